"""`python -m tools bench --model gpt_local`: the trainer's tokens/s against a nanoGPT-style loop, run with tiny
steps. Structure and positive rates only: a test's outcome never depends on this machine's speed."""
from __future__ import annotations

from tools import bench


def test_the_gpt_bench_measures_both_sides_in_tokens_per_second():
    cfg = bench.gpt_config("gpt_local", batch=2, steps=1, warmup=1)
    assert cfg.optim.name == "adamw" and cfg.train.workers == 1 and cfg.scale == "local"
    rates = bench.gpt_rates(cfg, repeats=2)
    hand, ours = rates["hand_written_tokens_per_s"], rates["trainer_tokens_per_s"]
    assert len(hand) == len(ours) == 2 and all(rate > 0 for rate in hand + ours)
    assert rates["ratio"] == max(ours) / max(hand)


def test_a_gpt_preset_picks_the_gpt_bench_prints_the_ratio_and_writes_it_with_the_machine(capsys, tmp_path):
    import json

    out_json = tmp_path / "bench_gpt.json"
    assert bench.main(["--model", "gpt_local", "--batch", "2", "--steps", "1", "--warmup", "1", "--repeats", "1",
                       "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model gpt_local (AdamW), batch 2 x 128 tokens") and "trainer / hand-written loop: " in out
    written = json.loads(out_json.read_text())
    assert written["command"] == "python -m tools bench --model gpt_local --batch 2 --steps 1 --warmup 1 --repeats 1"
    assert written["ratio"] == max(written["trainer_tokens_per_s"]) / max(written["hand_written_tokens_per_s"])
    assert f"{written['ratio']:.3f}" in out and written["machine"]["cores"] and len(written["load_average_after"]) == 3
