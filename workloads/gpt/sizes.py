"""The GPT workload's sizes and their arithmetic, without torch: the presets, parameter counts and model FLOPs a
token (PaLM's appendix B). The workload's declaration (workloads/gpt/__init__.py) reads its context from here, and
the contract, which may import the declarations, never loads torch through them."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GPTSizes:
    layers: int
    heads: int
    width: int  # the residual stream's width, d_model
    context: int  # the longest sequence: the position embedding's rows
    vocab: int
    dropout: float = 0.0  # off: a training step is then a function of the weights and the batch alone


PRESETS = {
    # the local scale: bytes (vocab 256), a few million parameters, a context a 2-core CPU trains in minutes
    "gpt_local": GPTSizes(layers=4, heads=4, width=256, context=128, vocab=256),
    # GPT-2 small; vocab 50257 padded to 50304 (a multiple of 64) as nanoGPT does, so tokens/s compare with its loop
    "gpt2_124m": GPTSizes(layers=12, heads=12, width=768, context=1024, vocab=50304),
}


# ---- the arithmetic: parameters and model FLOPs a token, from the sizes alone -------------------------------------
def block_parameters(s: GPTSizes) -> int:
    """One block: two LayerNorms (2 d each), qkv (d x 3d + 3d), attention out (d x d + d), MLP (d x 4d + 4d, 4d x d
    + d): 12 d^2 + 13 d."""
    return 12 * s.width ** 2 + 13 * s.width


def parameter_count(s: GPTSizes) -> int:
    """Every parameter, the tied head counted once: embeddings, blocks, the final LayerNorm."""
    return s.vocab * s.width + s.context * s.width + s.layers * block_parameters(s) + 2 * s.width


def matmul_parameters(s: GPTSizes) -> int:
    """N of PaLM's 6N: the parameters less the position embedding, a lookup that multiplies nothing (the token
    embedding stays: tied, it is the output head's matmul). LayerNorms and biases are counted, as PaLM and nanoGPT
    do: 13 d a layer against 12 d^2."""
    return parameter_count(s) - s.context * s.width


def flops_per_token(s: GPTSizes) -> int:
    """Model FLOPs of one trained token, forward and backward (PaLM, Chowdhery et al. 2022, appendix B): 6 N for the
    weights' matmuls (2 forward, 4 backward) plus 12 L H Q T for attention's scores and weighted values over a
    context of T (H Q = width), counted whole as PaLM does although a causal mask leaves half of it unused. The
    numerator of MFU: tokens/s times this over the hardware's peak FLOP/s."""
    return 6 * matmul_parameters(s) + 12 * s.layers * s.width * s.context
