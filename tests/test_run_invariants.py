"""The run record's invariants (contract/invariants.py): each can fail, and every committed run folder is walked,
its breaches exactly those the committed report lists (results/tables/run_invariants.csv)."""
from __future__ import annotations

import csv
import json

from contract.invariants import INVARIANTS, check_run
from contract.reader import find_runs, read_document, read_metrics
from tests.helpers import REPO, train_in_process, write_config

TINY = {"data": {"kind": "generated", "classes": 4, "per_class": 6, "val_per_class": 2, "image_size": 16,
                 "loader_workers": 0},
        "model": {"num_classes": 4}, "train": {"epochs": 2, "workers": 1, "per_worker_batch": 4, "eval_every": 2}}


def documents(run_dir):
    return (read_document(run_dir / "config.json")[0], read_document(run_dir / "manifest.json")[0],
            read_metrics(run_dir).records)


def test_a_real_run_keeps_every_invariant_and_each_spoiled_record_breaks_the_one_it_should(tmp_path):
    assert train_in_process(write_config(tmp_path / "c.toml", TINY), tmp_path, "r") == 0
    config, manifest, records = documents(tmp_path / "c" / "r")
    assert check_run(config, manifest, records) == []

    def broken(spoil) -> set[str]:
        c, m, r = json.loads(json.dumps([config, manifest, records]))
        spoil(c, m, r)
        return {line.split(":")[0] for line in check_run(c, m, r)}

    epoch = next(i for i, r in enumerate(records) if r["kind"] == "epoch")
    evals = [i for i, r in enumerate(records) if r["kind"] == "eval"]
    assert broken(lambda c, m, r: r[epoch].update(images=4)) == {"epoch_images_are_its_steps"}
    assert broken(lambda c, m, r: r[epoch].update(step=r[epoch]["step"] - 1)) == {"steps_agree"}
    assert broken(lambda c, m, r: r[evals[0]].update(step=r[evals[0]]["step"] + 1)) == {"steps_agree"}
    assert "steps_only_grow" in broken(lambda c, m, r: r.__setitem__(evals[0], r[evals[1]]))
    assert broken(lambda c, m, r: r[epoch].update(val_top1=500.0)) >= {"top1_is_a_percent", "manifest_agrees"}
    assert broken(lambda c, m, r: m.update(epochs_done=3)) == {"manifest_agrees"}
    assert broken(lambda c, m, r: m.update(config_fingerprint="deadbeef0000")) == {"manifest_agrees"}
    assert broken(lambda c, m, r: c["train"].update(epochs=3)) == {"manifest_agrees"}  # config.json edited after
    assert broken(lambda c, m, r: m.update(best_val_top1=float("nan"))) == {"manifest_agrees"}
    assert broken(lambda c, m, r: r[evals[0]].update(iter=7)) >= {"evals_within_trained"}  # of 6


def test_every_committed_run_folder_is_walked_and_its_breaches_are_the_committed_report_s_list():
    found = {(str(d.relative_to(REPO)), line.split(": ", 1)[0], line.split(": ", 1)[1])
             for d in find_runs(REPO / "results" / "reference") for line in check_run(*documents(d))}
    listed_at = REPO / "results" / "tables" / "run_invariants.csv"
    listed = set()
    if listed_at.is_file():
        with open(listed_at) as f:
            listed = {(r["run"], r["invariant"], r["what"]) for r in csv.DictReader(f)}
    assert {name for _, name, _ in found} <= set(INVARIANTS)
    # the report lists every breach the walk finds, and nothing else (`make reference-report` redraws the list)
    assert found == listed, sorted(found ^ listed)[:5]
