"""The analysis's benchmarks (tests/bench_analysis.py) run on small generated inputs and say what they timed."""
from __future__ import annotations

import pytest

from tests import bench_analysis


def test_the_parse_benchmark_parses_every_generated_line(capsys):
    result = bench_analysis.bench_parse(lines=2_000, repeat=1)
    assert result["lines"] == 2_000 and result["bad_lines"] == 0 and result["parsed_train_rows"] > 1_900
    assert capsys.readouterr().out.startswith("bench-parse: 2000 lines")


@pytest.mark.slow
def test_the_report_benchmark_reports_the_runs_it_generated(capsys):
    assert bench_analysis.main(["report", "--runs", "3", "--no-notebooks"]) == 0
    assert capsys.readouterr().out.startswith("bench-report: 3 runs")
