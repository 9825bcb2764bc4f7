"""Experiment 13, its first edition (declared_2026-11-25-exp13.txt: steps to the target counted in whole epochs, 3
seeds; its plan as it ran in experiments/13_steps_to_target/edition1.toml, its 136 runs in
results/reference/xeon-2cpu/13_steps_to_target), superseded by the second (steps_to_target_e2.py). Its tables, figure
and readings are kept as files, as the report last drew them (results/frozen/exp13_edition1/SUPERSEDED.md): the
committed report copies them in and its notebooks show them, and no code re-derives them (analysis/frozen.py).
"""
from __future__ import annotations

from pathlib import Path

from ..frozen import Frozen

exp13_first_edition = Frozen(Path(__file__).resolve().parents[2] / "results" / "frozen" / "exp13_edition1", (12, 13),
                             "the second edition (exp13_e2_*, declared_2026-11-28-edition2.txt)", "6b9bd3904b",
                             "analysis/experiments/steps_to_target.py",
                             {"exp13_steps_to_target": "Experiment 13, first edition (superseded by the second): "
                                                       "steps to the target top-1 per global batch, in whole epochs"})
FROZEN = (exp13_first_edition,)  # the notebooks show its files: an.exp13_first_edition.show(name)
EXPORTS = ("exp13_first_edition",)
