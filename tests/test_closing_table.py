"""The table a study prints when it ends (issue 67): this machine beside the one committed reference machine that ran
the experiment and the thesis, in at most 120 columns; every other reference machine is left to the report."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import synth_records as synth
from analysis.compare import WIDTH, comparison_text, drawing_machine, fitted
from analysis.machines import REFERENCE_ROOT
from tests.helpers import REPO

import pandas as pd


def machines(root: Path, holding: dict[str, list[str]]) -> Path:
    """Reference machines under root, each a machine.toml and empty experiment folders."""
    for label, experiments in holding.items():
        (root / label).mkdir(parents=True)
        (root / label / "machine.toml").write_text(f'label = "{label}"\ndescription = "{label} described"\n')
        for experiment in experiments:
            (root / label / experiment).mkdir()
    return root


def test_an_experiment_is_compared_with_the_machine_the_committed_report_draws_it_from():
    # experiments 1-3 are drawn from vm-epyc-avx512 (its report_draws), 4-9 from the first machine, vm-2cpu
    assert drawing_machine("01_throughput_single_gpu", REFERENCE_ROOT)[0] == "vm-epyc-avx512"
    assert drawing_machine("05_linear_scaling", REFERENCE_ROOT)[0] == "vm-2cpu"
    assert drawing_machine("99_never_run", REFERENCE_ROOT) is None


def test_an_experiment_only_a_later_machine_holds_is_compared_with_that_machine(tmp_path):
    root = machines(tmp_path, {"a-machine": ["05_linear_scaling"], "b-machine": ["05_linear_scaling", "12_large"]})
    assert drawing_machine("05_linear_scaling", root) == ("a-machine", root / "a-machine")
    assert drawing_machine("12_large", root) == ("b-machine", root / "b-machine")


def quality_entry(run_dir: Path) -> dict:
    return dict(name=run_dir.name, run_dir=run_dir, fingerprint="f", experiment=run_dir.parent.name,
                framework="pytorch", gpus=1, per_gpu_batch=128)


def test_the_closing_table_fits_120_columns_and_names_one_reference_machine(tmp_path):
    labels = {f"a-long-reference-machine-label-{i}": ["04_naive_scaling"] for i in range(4)}
    root = machines(tmp_path / "reference", labels)
    long_name = "e2-tune-lamb-w512-base0.0003125"  # the longest configuration any committed study names
    run = synth.write_run(tmp_path / "runs", "04_naive_scaling", f"{long_name}-s0", epochs=2)
    text = comparison_text([quality_entry(run)], "quality", root)
    lines = text.splitlines()
    assert [line for line in lines if len(line) > WIDTH] == []
    assert "reference: a-long-reference-machine-label-0" in text  # the machine the report draws it from
    assert "reference: a-long-reference-machine-label-1" not in text  # the others: the report's
    said = " ".join(text.split())  # a wrapped line read as one
    assert re.search(r"3 other reference machine\(s\) that ran it \(.*\): their values in the report's this_machine_vs_reference", said)
    assert long_name in text and "thesis" in text


def test_a_table_too_wide_for_120_columns_is_said_a_configuration_a_line_with_every_value():
    frame = pd.DataFrame({"configuration": ["x" * 60, "short"], "this machine": ["123.45 ± 6.78 (n=3)", "1.00"],
                          "threads/rank": ["2", "-"], "reference: some-machine": ["99.99 ± 0.01 (n=9)", "-"],
                          "thesis": ["smoke run: not compared", "73.29"]})
    text = fitted(frame)
    assert [line for line in text.splitlines() if len(line) > WIDTH] == []
    for value in ("x" * 60, "123.45 ± 6.78 (n=3)", "99.99 ± 0.01 (n=9)", "smoke run: not compared", "73.29"):
        assert value in text
    narrow = frame.iloc[[1]]
    assert fitted(narrow) == narrow.to_string(index=False)  # a table that fits is the plain table


def closing_block(out: str) -> list[str]:
    """The study's closing table: from its heading line to the line before the study's last line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("steady-state images/s"))
    return lines[start:-1]


@pytest.mark.slow
def test_a_real_studys_closing_table_fits_120_columns(tmp_path):
    """Experiment 3 at --quick, two of its runs (a 1- and a 2-process DDP run): the table the study prints."""
    out = subprocess.run([sys.executable, "-m", "suite", "study", "experiments/03_throughput_distributed_data_parallel",
                          "--quick", "--only", "n1-t1-ddp-s0", "n2-ddp-t1-s0", "--out", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=1200).stdout
    block = closing_block(out)
    assert [line for line in block if len(line) > WIDTH] == [], "\n".join(block)
    assert re.search(r"n1-t1-ddp\s+[\d.]+", "\n".join(block)) and re.search(r"n2-ddp-t1\s+[\d.]+", "\n".join(block))
    header = next(line for line in block if re.match(r"\s*configuration\s+this machine", line))
    assert "reference: vm-epyc-avx512" in header and "reference: vm-2cpu" not in header
    assert any(line.startswith("reference vm-epyc-avx512: ") for line in block)
