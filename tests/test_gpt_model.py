"""The GPT workload's model: shapes, causal masking, tied embeddings, its parameter count and model FLOPs a token."""
import dataclasses

import pytest
import torch

from workloads.gpt.model import GPT
from workloads.gpt.sizes import PRESETS, GPTSizes, flops_per_token, matmul_parameters, parameter_count

# One layer, 2 heads, width 4, context 8, vocab 16, counted by hand:
#   token embedding (tied with the head) 16 * 4 = 64; position embedding 8 * 4 = 32;
#   the block: two LayerNorms 2 * (4 + 4) = 16, qkv 4 * 12 + 12 = 60, attention out 4 * 4 + 4 = 20,
#   MLP in 4 * 16 + 16 = 80, MLP out 16 * 4 + 4 = 68: 244; the final LayerNorm 8. All: 64 + 32 + 244 + 8 = 348.
HAND = GPTSizes(layers=1, heads=2, width=4, context=8, vocab=16)
HAND_PARAMETERS = 348
HAND_MATMUL_PARAMETERS = 348 - 32  # the position embedding is a lookup, never multiplied
# PaLM (Chowdhery et al. 2022, appendix B): 6 N + 12 L H Q T a token, H Q = width: 6 * 316 + 12 * 1 * 4 * 8
HAND_FLOPS = 6 * 316 + 12 * 1 * 4 * 8  # = 2280

# GPT-2 small with nanoGPT's vocab padded to 50304 (a multiple of 64), counted by hand: token embedding
# 50304 * 768 = 38,633,472; positions 1024 * 768 = 786,432; a block 12 d^2 + 13 d = 7,087,872, 12 of them
# 85,054,464; the final LayerNorm 1,536. (With GPT-2's own 50257 tokens: 124,439,808, the published count.)
GPT2_124M_PARAMETERS = 38_633_472 + 786_432 + 85_054_464 + 1_536  # = 124,475,904


def test_flops_per_token_is_palms_formula_counted_by_hand():
    assert matmul_parameters(HAND) == HAND_MATMUL_PARAMETERS
    assert flops_per_token(HAND) == HAND_FLOPS == 2280


def test_parameter_count_of_a_hand_counted_model_and_of_the_module():
    assert parameter_count(HAND) == HAND_PARAMETERS
    assert sum(p.numel() for p in GPT(HAND).parameters()) == HAND_PARAMETERS  # tied: the head counted once


def test_gpt2_124m_preset_has_124m_parameters():
    sizes = PRESETS["gpt2_124m"]
    assert (sizes.layers, sizes.heads, sizes.width, sizes.context, sizes.vocab) == (12, 12, 768, 1024, 50304)
    assert parameter_count(sizes) == GPT2_124M_PARAMETERS == 124_475_904
    assert parameter_count(dataclasses.replace(sizes, vocab=50257)) == 124_439_808
    with torch.device("meta"):  # the module's own count, without allocating it
        assert sum(p.numel() for p in GPT(sizes).parameters()) == GPT2_124M_PARAMETERS


def test_local_preset_is_a_few_million_parameters_of_bytes():
    sizes = PRESETS["gpt_local"]
    assert sizes.vocab == 256 and 2e6 < parameter_count(sizes) < 5e6


def test_forward_returns_logits_flattened_over_batch_and_context():
    torch.manual_seed(0)
    model = GPT(HAND)
    tokens = torch.randint(0, HAND.vocab, (3, HAND.context))
    logits = model(tokens)
    assert logits.shape == (3 * HAND.context, HAND.vocab)
    loss = torch.nn.CrossEntropyLoss()(logits, torch.randint(0, HAND.vocab, (3 * HAND.context,)))
    loss.backward()  # the classifier loop's criterion on (logits, flattened targets)
    assert all(p.grad is not None for p in model.parameters())


def test_a_shorter_sequence_than_the_context_runs_and_a_longer_is_refused():
    model = GPT(HAND)
    assert model(torch.zeros(2, 3, dtype=torch.long)).shape == (6, HAND.vocab)
    with pytest.raises(ValueError, match="context"):
        model(torch.zeros(1, HAND.context + 1, dtype=torch.long))


def test_attention_is_causal_a_later_token_never_changes_earlier_logits():
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(HAND, layers=2)).eval()
    tokens = torch.randint(0, HAND.vocab, (1, HAND.context))
    changed = tokens.clone()
    changed[0, 5] = (tokens[0, 5] + 1) % HAND.vocab
    before, after = model(tokens), model(changed)
    assert torch.equal(before[:5], after[:5])  # positions 0-4 see nothing of position 5
    assert not torch.allclose(before[5:], after[5:])


def test_token_embedding_and_output_head_are_one_tensor():
    model = GPT(HAND)
    assert model.head.weight is model.token_embedding.weight
    names = [name for name, _ in model.named_parameters()]
    assert "head.weight" not in names  # listed once: one optimizer state, one entry in a checkpoint's parameters


def test_dropout_is_off_by_default_so_training_mode_is_deterministic():
    torch.manual_seed(0)
    model = GPT(HAND).train()
    tokens = torch.randint(0, HAND.vocab, (2, HAND.context))
    assert HAND.dropout == 0.0 and torch.equal(model(tokens), model(tokens))


def test_shard_units_are_the_blocks():
    model = GPT(dataclasses.replace(HAND, layers=3))
    assert list(model.shard_units()) == list(model.blocks)
