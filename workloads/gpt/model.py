"""A GPT-style decoder: causal self-attention, pre-norm blocks, GELU MLP, tied token embedding and output head.

GPT-2's shapes (Radford et al. 2019, as nanoGPT builds them): learned position embeddings, biases in every Linear
and LayerNorm, weights N(0, 0.02) with the residual projections scaled by 1/sqrt(2 L). Its forward returns the
logits flattened to (batch * context, vocab), so a classifier's loop (CrossEntropyLoss on logits and targets)
trains it unchanged with the next tokens flattened to (batch * context,). Its sizes, presets and arithmetic
(parameters, model FLOPs a token) are sizes.py's, which needs no torch.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from workloads.gpt.sizes import GPTSizes


# ---- the modules --------------------------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, s: GPTSizes):
        super().__init__()
        if s.width % s.heads:
            raise ValueError(f"width {s.width} does not split into {s.heads} heads")
        self.heads, self.dropout = s.heads, s.dropout
        self.qkv = nn.Linear(s.width, 3 * s.width)
        self.out = nn.Linear(s.width, s.width)
        self.out_dropout = nn.Dropout(s.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (part.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for part in self.qkv(x).split(d, dim=2))
        # is_causal: position i attends to positions <= i (a fused kernel where the device has one)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.out_dropout(self.out(y.transpose(1, 2).reshape(b, t, d)))


class MLP(nn.Module):
    def __init__(self, s: GPTSizes):
        super().__init__()
        self.up = nn.Linear(s.width, 4 * s.width)
        self.down = nn.Linear(4 * s.width, s.width)
        self.dropout = nn.Dropout(s.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + MLP(norm(x)); the residual stream itself is never normalised."""

    def __init__(self, s: GPTSizes):
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(s.width), CausalSelfAttention(s)
        self.norm2, self.mlp = nn.LayerNorm(s.width), MLP(s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, sizes: GPTSizes):
        super().__init__()
        self.sizes = sizes
        self.token_embedding = nn.Embedding(sizes.vocab, sizes.width)
        self.position_embedding = nn.Embedding(sizes.context, sizes.width)
        self.dropout = nn.Dropout(sizes.dropout)
        self.blocks = nn.ModuleList(Block(sizes) for _ in range(sizes.layers))
        self.final_norm = nn.LayerNorm(sizes.width)
        self.head = nn.Linear(sizes.width, sizes.vocab, bias=False)
        self.head.weight = self.token_embedding.weight  # tied (Press & Wolf 2017): one tensor, listed once
        self.apply(self._init_weights)
        for block in self.blocks:  # GPT-2: each residual branch's last projection scaled by 1/sqrt(2 L)
            for projection in (block.attention.out, block.mlp.down):
                nn.init.normal_(projection.weight, std=0.02 / math.sqrt(2 * sizes.layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def shard_units(self) -> list[nn.Module]:
        """The modules a sharding backend gathers one at a time (torchtitan shards each transformer block): only
        one block's full weights exist at once; the embeddings, final norm and tied head stay with the root."""
        return list(self.blocks)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, t) token ids, t <= context -> logits (batch * t, vocab)."""
        b, t = tokens.shape
        if t > self.sizes.context:
            raise ValueError(f"a sequence of {t} tokens is longer than the model's context of {self.sizes.context}")
        positions = torch.arange(t, device=tokens.device)
        x = self.dropout(self.token_embedding(tokens) + self.position_embedding(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x).flatten(0, 1))  # a new tensor, not a view (FSDP hooks its output)
