"""The run record's invariants, declared once: what a run folder's records say it trained, it trained.

    breaches = check_run(config, manifest, records)   # [] for a sound folder; else one line an invariant broken

Checked where a run folder is written (trainers/run.py, before the run is called completed: a breach is a bug in
the trainer, and the run ends failed with the line), where it is read (contract/reader.py: each breach is a problem
line of the folder, and the folder is read as it is, never repaired) and over every committed run folder
(tests/test_run_invariants.py, which also holds the committed report's list of them to the walk's).

Each invariant has a name (INVARIANTS) and reads only what the trainer writes: config.json's resolved global batch,
stop_at_top1, max_steps and model name (a plug-in's tokens a sample, workloads/); metrics.jsonl's iter, epoch, eval
and bench records; manifest.json's status, epochs_done, config_fingerprint and best_val_top1. A record written
before a field existed (an epoch record without `steps`, before 2026-12-01) is checked on what it holds: its steps
are the epoch's iterations, cut where the step cap or the evaluation that reached the target ended it, so its images
are checked against the steps it trained.
"""
from __future__ import annotations

import math
from typing import Iterable

import workloads
from contract.fingerprint import document_fingerprint

#: name -> what it says, for the lines and the docs
INVARIANTS = {
    "epoch_images_are_its_steps": "an epoch's images are its steps times the global batch (the last batch may be "
                                  "short): ceil(images / global batch) = steps",
    "steps_agree": "an eval record's step is its epoch's steps before it plus its iteration + 1, an epoch record's "
                   "step its epoch's first step plus its steps",
    "steps_only_grow": "epoch records count 0, 1, 2, ... and evaluations' steps rise",
    "evals_within_trained": "every evaluation lies within the steps its epoch trained",
    "top1_is_a_percent": "every validation top-1 lies within [0, 100]",
    "manifest_agrees": "the manifest's epochs done (a completed run), fingerprint and best top-1 agree with "
                       "config.json and metrics.jsonl",
    "bench_tokens_agree": "a bench record's tokens_per_s is its images_per_s_steady times the tokens a sample of "
                          "its model (workloads/); a model without tokens records none",
}


def check_run(config: dict | None, manifest: dict | None, records: Iterable[dict]) -> list[str]:
    """Every breach of INVARIANTS in one run folder's documents, as "<invariant>: <what, where>" lines."""
    records = list(records)
    epochs = [r for r in records if r.get("kind") == "epoch"]
    evals = [r for r in records if r.get("kind") == "eval"]
    run = _RunFacts(config or {}, records, evals)
    return [*_epoch_breaches(run, epochs), *_eval_breaches(run, epochs, evals), *_order_breaches(epochs, evals),
            *_percent_breaches(epochs, evals), *_manifest_breaches(config, manifest, epochs, evals),
            *_bench_breaches(config or {}, [r for r in records if r.get("kind") == "bench"])]


def epoch_end_steps(config: dict | None, records: Iterable[dict]) -> dict[int, int]:
    """Epoch number -> the step its epoch record's validation evaluated (the epoch's last step trained): the
    record's `step`, or (a record from before it was written) its epoch's first step plus the steps it trained;
    an epoch whose steps cannot be told (no iter record) is left out. Steps to a target read evaluations at these
    steps and the eval records' own, never an epoch's images."""
    records = list(records)
    run = _RunFacts(config or {}, records, [r for r in records if r.get("kind") == "eval"])
    ends = {}
    for r in records:
        if r.get("kind") != "epoch" or _whole(r.get("epoch")) is None:
            continue
        steps = run.steps_trained(r)
        if _whole(r.get("step")) is not None:
            ends[r["epoch"]] = r["step"]
        elif run.iters and steps is not None:
            ends[r["epoch"]] = r["epoch"] * run.iters + steps
    return ends


class _RunFacts:
    """What the checks need of config.json and the iter records: the global batch, the epoch's iterations (an iter
    record's `iters`: the sampler's length, the same every epoch), the step cap and the target."""

    def __init__(self, config: dict, records: list[dict], evals: list[dict]):
        resolved, train = _section(config, "resolved"), _section(config, "train")
        self.batch = _whole(resolved.get("global_batch"))
        self.iters = next((_whole(r.get("iters")) for r in records if r.get("kind") == "iter"
                           and _whole(r.get("iters"))), None)
        self.cap = _whole(train.get("max_steps")) or 0
        target = train.get("stop_at_top1")
        self.target = float(target) if _number(target) and target > 0 else None
        self.evals = evals

    def steps_trained(self, epoch: dict) -> int | None:
        """The steps an epoch trained: its record's `steps`, or (a record from before it was written) its
        iterations, cut by the step cap or by its evaluation that reached the target."""
        if _whole(epoch.get("steps")) is not None:
            return epoch["steps"]
        if self.iters is None or _whole(epoch.get("epoch")) is None:
            return None
        e, steps = epoch["epoch"], self.iters
        if self.cap:
            steps = max(0, min(steps, self.cap - e * self.iters))
        if self.target is not None:
            reached = [v["iter"] + 1 for v in self.evals if v.get("epoch") == e and _whole(v.get("iter")) is not None
                       and _number(v.get("val_top1")) and v["val_top1"] >= self.target]
            steps = min([steps, *reached])
        return steps


def _epoch_breaches(run: _RunFacts, epochs: list[dict]) -> list[str]:
    out = []
    for r in epochs:
        steps, images, e = run.steps_trained(r), _whole(r.get("images")), r.get("epoch")
        if run.batch and steps is not None and images is not None and math.ceil(images / run.batch) != steps:
            out.append(f"epoch_images_are_its_steps: epoch {e} records {images} images for {steps} step(s) of "
                       f"{run.batch} ({(steps - 1) * run.batch + 1}-{steps * run.batch} trained)")
        if _whole(r.get("step")) is not None and run.iters and steps is not None \
                and r["step"] != e * run.iters + steps:
            out.append(f"steps_agree: epoch {e} records step {r['step']}, its steps end at {e * run.iters + steps}")
    return out


def _eval_breaches(run: _RunFacts, epochs: list[dict], evals: list[dict]) -> list[str]:
    out, trained = [], {r.get("epoch"): run.steps_trained(r) for r in epochs}
    for v in evals:
        e, i, step = v.get("epoch"), _whole(v.get("iter")), _whole(v.get("step"))
        if run.iters and i is not None and step is not None and _whole(e) is not None \
                and step != e * run.iters + i + 1:
            out.append(f"steps_agree: the evaluation at epoch {e}, iteration {i} records step {step}, "
                       f"not {e * run.iters + i + 1}")
        if i is not None and trained.get(e) is not None and i + 1 > trained[e]:
            out.append(f"evals_within_trained: an evaluation after step {i + 1} of epoch {e}, which trained "
                       f"{trained[e]}")
    return out


def _order_breaches(epochs: list[dict], evals: list[dict]) -> list[str]:
    out = []
    numbers = [r.get("epoch") for r in epochs]
    if numbers != list(range(len(numbers))):
        out.append(f"steps_only_grow: epoch records count {_shown(numbers)}")
    steps = [v.get("step") for v in evals]
    if any(not (_number(a) and _number(b) and a < b) for a, b in zip(steps, steps[1:])):
        out.append(f"steps_only_grow: evaluations' steps run {_shown(steps)}")
    return out


def _percent_breaches(epochs: list[dict], evals: list[dict]) -> list[str]:
    # a top-1 that is no number (NaN, a string) is a type problem, said where the record is read (analysis/runs.py)
    bad = [(r["kind"], r.get("epoch"), r.get("val_top1")) for r in [*epochs, *evals]
           if _number(r.get("val_top1")) and not 0 <= r["val_top1"] <= 100]
    return [f"top1_is_a_percent: {kind} record of epoch {e} has val_top1 {value!r}" for kind, e, value in bad[:3]]


def _manifest_breaches(config: dict | None, manifest: dict | None, epochs: list[dict], evals: list[dict]) -> list[str]:
    if not isinstance(manifest, dict):
        return []
    out = []
    done = manifest.get("epochs_done")  # one that is no whole number is the manifest schema's problem
    if manifest.get("status") == "completed" and epochs and (done is None or _whole(done) is not None) \
            and done != len(epochs):
        out.append(f"manifest_agrees: epochs_done {manifest.get('epochs_done')!r}, metrics.jsonl records "
                   f"{len(epochs)} epoch(s)")
    recorded = manifest.get("config_fingerprint")
    if isinstance(config, dict) and recorded is not None and recorded != document_fingerprint(config):
        out.append(f"manifest_agrees: config_fingerprint {recorded!r}, config.json's is "
                   f"{document_fingerprint(config)!r}")
    top1s = [r["val_top1"] for r in [*epochs, *evals] if _number(r.get("val_top1"))]
    best = manifest.get("best_val_top1")
    if top1s and best is not None and not (_number(best) and 0 <= best <= 100 and best == max(top1s)):
        out.append(f"manifest_agrees: best_val_top1 {best!r}, the best evaluation's is {max(top1s)!r}")
    return out


def _bench_breaches(config: dict, benches: list[dict]) -> list[str]:
    model = _section(config, "model").get("name")
    tokens = workloads.tokens_per_sample(model) if isinstance(model, str) else None
    out = []
    for r in benches:
        recorded, images = r.get("tokens_per_s"), r.get("images_per_s_steady")
        if tokens is None and recorded is not None:
            out.append(f"bench_tokens_agree: a bench record of {model!r}, a model without tokens, records "
                       f"tokens_per_s {recorded!r}")
        elif tokens is not None and _number(images) and not (
                _number(recorded) and math.isclose(recorded, images * tokens, rel_tol=1e-9)):
            out.append(f"bench_tokens_agree: a bench record's tokens_per_s {recorded!r} is not its "
                       f"images_per_s_steady {images!r} x {tokens} tokens a sample of {model!r}")
    return out


def _section(document: dict, name: str) -> dict:
    value = document.get(name)
    return value if isinstance(value, dict) else {}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _shown(values: list) -> str:
    return ", ".join(map(str, values[:8])) + (", ..." if len(values) > 8 else "")
