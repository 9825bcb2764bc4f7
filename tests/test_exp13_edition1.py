"""Experiment 13's first edition, superseded by the second: its declaration committed before every one of its runs,
and what it last drew kept as files (results/frozen/exp13_edition1, analysis/frozen.py) that are the files that
commit drew, each marked, and the ones the committed report holds. Its reading code is gone (git history keeps it)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import nbformat
import pytest

from analysis import report
from analysis.experiments import steps_to_target_e2 as e2
from analysis.experiments.steps_to_target import FROZEN, exp13_first_edition as kept
from contract.manifest import VERSION
from tests.helpers import REPO, started_before

DECLARED = "experiments/13_steps_to_target/declared_2026-11-25-exp13.txt"


def has_git() -> bool:
    return shutil.which("git") is not None and (REPO / ".git").exists()


# ---- the declaration precedes every run ---------------------------------------------------------------------------
def test_a_run_that_started_before_the_declaration_is_caught(tmp_path):
    for name, start in (("early", "2026-11-25T01:00:00+00:00"), ("late", "2026-11-26T01:00:00+00:00")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "start": start, "attempts": [{"start": start}]}))
    (tmp_path / "unreadable").mkdir()
    early = started_before(sorted(tmp_path.iterdir()), "2026-11-25T22:00:00+00:00")
    assert [p.rsplit("/", 1)[1] for p in early] == ["early", "unreadable"]


def first_edition_runs():
    """The committed first-edition runs: the second edition's (e2-) are planned by edition2.toml and its decisions,
    and dated by tests/test_exp13_edition2.py."""
    runs = (REPO / "results" / "reference").glob("*/13_steps_to_target/*")
    return sorted(p for p in runs if p.is_dir() and not p.name.startswith(e2.PREFIX))


def test_the_declaration_was_committed_before_every_committed_experiment_13_run_started():
    if not has_git():
        pytest.skip("no git history here to date the declaration by")
    added = subprocess.run(["git", "log", "--follow", "--diff-filter=A", "--format=%cI", "--", DECLARED], cwd=REPO,
                           capture_output=True, text=True, timeout=60).stdout.split()
    assert added, f"{DECLARED} is not in the git history"
    runs = first_edition_runs()
    assert started_before(runs, added[-1]) == []


def test_every_committed_experiment_13_run_started_after_the_commit_that_planned_its_row():
    """Edge rows and step 2's rows are added after the declaration: each run must start after its own row landed."""
    if not has_git():
        pytest.skip("no git history here to date the rows by")
    config = "experiments/13_steps_to_target/config.toml"
    runs = first_edition_runs()
    for row in sorted({re.sub(r"-s\d+$", "", run.name) for run in runs}):
        added = subprocess.run(["git", "log", "--format=%cI", "-S", f'run = "{row}"', "--", config], cwd=REPO,
                               capture_output=True, text=True, timeout=60).stdout.split()
        assert added, f"no commit of {config} adds the row of {row}"
        assert started_before([r for r in runs if re.sub(r"-s\d+$", "", r.name) == row], added[-1]) == []


# ---- what it last drew, kept ----------------------------------------------------------------------------------------
def kept_files() -> list:
    return [p for kind in ("tables", "figures", "readings") for p in kept.files(kind)]


def test_every_kept_markdown_file_carries_the_mark_and_the_folder_says_why():
    assert {p.name for p in kept.files("tables")} == {f"exp13_{n}.{x}" for n in ("steps_to_target", "rate_selection")
                                                      for x in ("md", "csv")}
    assert {p.name for p in kept.files("figures")} == {"exp13_steps_to_target.png", "exp13_steps_to_target.pdf"}
    for md in (p for p in kept_files() if p.suffix == ".md"):
        assert md.read_text().count(kept.mark()) == 1, md.name
    why = (kept.folder / "SUPERSEDED.md").read_text()
    assert kept.drawn_at in why and kept.code in why


def markdown_outputs(notebook: bytes) -> list[str]:
    """The markdown a notebook's cells printed (an.markdown's outputs)."""
    cells = nbformat.reads(notebook.decode(), as_version=4).cells
    return [out["data"]["text/markdown"] for cell in cells for out in cell.get("outputs", [])
            if "text/markdown" in out.get("data", {})]


def test_the_kept_files_are_what_the_removed_code_last_drew_at_the_commit_the_mark_names():
    """Each kept file, its mark line aside, is the committed report's file at drawn_at (its tables and figure) or
    the text its notebooks showed there (the readings); the code that drew them is at that commit, and gone now."""
    if not has_git():
        pytest.skip("no git history here (a source copy, not a clone)")

    def at_commit(path: str) -> bytes:
        return subprocess.run(["git", "show", f"{kept.drawn_at}:{path}"], cwd=REPO, capture_output=True,
                              check=True).stdout

    assert b"def steps_table" in at_commit(kept.code) and not (REPO / kept.code).read_text().count("def ")
    shown = {text for name in ("rq4_large_batch", "rq5_critical_batch")
             for text in markdown_outputs(at_commit(f"results/{name}.ipynb"))}
    for path in kept_files():
        unmarked = path.read_bytes().replace(f"{kept.mark()}\n\n".encode(), b"")
        if path.parent.name == "readings":
            assert unmarked.decode() in shown, path.name
        else:
            assert unmarked == at_commit(f"results/{path.parent.name}/{path.name}"), path.name


def test_the_committed_report_holds_the_kept_tables_and_figures_byte_for_byte():
    assert report.frozen_for(report.committed_runs(), FROZEN) == FROZEN
    for kind in ("tables", "figures"):
        for path in kept.files(kind):
            assert (report.COMMITTED_REPORT / kind / path.name).read_bytes() == path.read_bytes(), path.name
