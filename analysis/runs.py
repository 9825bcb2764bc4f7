"""Run folders (results/runs/<experiment>/<run>/) and upstream logs as one tidy DataFrame.

One row per (run, record): ``kind`` says which record --
  run       one per run: status, best validation accuracy, wall-clock, bad lines (always present, so a
            half-written or failed run still shows up);
  epoch     one per epoch: losses, top-1, top-5 (percent), learning rate, epoch time, skipped fp16 steps;
  eval      one per evaluation inside an epoch (train.eval_every): step, val_top1, val_loss;
  bench     throughput: thesis-formula and steady-state images/s (the bench record, the iteration records, or a log);
  util      utilisation samples (trainers/telemetry.py), one row per sample and device ("cpu process", "gpu0",
            "rank8 gpu0" for another node): t (seconds since the run started), util_pct, mem_gb, power_w;
  schedule  the planned learning rate of each epoch (config.json resolved.schedule);
  link bench  a bench row of a run under a limited link (LINK_BENCH below).
Every row carries the run's identity and configuration columns (RUN_COLUMNS), so any table or figure is a filter
and a group-by away: ``gpus`` is the run's workers W (the thesis's GPUs), ``processes`` its real ranks P (manifest
world_size), ``numerics`` (numbers.numerics_label) part of its identity. Nothing here raises on bad content: every
problem (a missing or unreadable file, bad lines) is a line in ``df.attrs['problems']``. Run folders are read by
contract.reader, the one reader; everything here is derived from its frame.
"""
from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from contract import manifest as declared
from contract import hostload, placement, reader
from contract.invariants import epoch_end_steps
from contract.runfiles import COMPACT, plain_name, run_file_exists
from contract.runfolder import CONFIG, MANIFEST, METRICS

from . import logs as lg
from . import numbers as nb

RUN_COLUMNS = ["experiment", "exp", "run", "path", "source", "scale", "framework", "backend", "numerics", "gpus",
               "processes", "per_gpu_batch", "global_batch", "lr", "warmup", "optimizer", "holdout", "eval_every",
               "seed", "epochs", "epochs_done", "status", "diverged", "wallclock_s", "bad_lines"]
RECORD_COLUMNS = ["kind", "epoch", "train_loss", "train_top1", "train_top5", "val_loss", "val_top1", "val_top5",
                  "epoch_lr", "epoch_time", "images", "skipped_steps", "thesis_images_per_s", "steady_images_per_s",
                  "batch_time_avg_at_199", "warmup_batches", "data_share", "data_s", "compute_s", "comm_s",
                  "tokens_per_s", "model_flops_per_s", "mfu", "best_val_top1", "best_val_top5", "t", "util_pct",
                  "mem_gb", "power_w", "device", "planned_lr", "step", "note"]
COLUMNS = RUN_COLUMNS + RECORD_COLUMNS
TEXT_COLUMNS = ["experiment", "run", "path", "source", "scale", "framework", "backend", "numerics", "warmup", "optimizer",
                "status",
                "kind", "device", "note"]
#: an epoch record's fields as columns here: field -> column
EPOCH_COLUMNS = {"train_loss": "train_loss", "train_top1": "train_top1", "train_top5": "train_top5",
                 "val_loss": "val_loss", "val_top1": "val_top1", "val_top5": "val_top5", "lr": "epoch_lr",
                 "epoch_time": "epoch_time", "images": "images", "skipped_steps": "skipped_steps", "data_s": "data_s",
                 "compute_s": "compute_s", "comm_s": "comm_s"}
#: a bench record's fields as columns here: field -> column
BENCH_COLUMNS = {"images_per_s_thesis": "thesis_images_per_s", "images_per_s_steady": "steady_images_per_s",
                 "batch_time_avg_at_199": "batch_time_avg_at_199", "warmup_batches": "warmup_batches",
                 "data_share": "data_share", "data_s": "data_s", "compute_s": "compute_s", "comm_s": "comm_s",
                 # a plug-in workload's rates (contract/runfolder.py workload_rates; None in an images/s run's record)
                 "tokens_per_s": "tokens_per_s", "model_flops_per_s": "model_flops_per_s", "mfu": "mfu"}
#: the fields each kind of record is read for
ITER_FIELDS = ["epoch", "iter", "batch_time", "batch_time_avg", "data_time_avg", "loss"]
UTIL_FIELDS = ["time", "t", "rank", "cpu_process_pct", "cpu_system_pct", "mem_process_gb", "gpus"]
_EXP_RE = re.compile(r"^(\d+)")


def experiment_number(name: str) -> int | None:
    """The leading NN of an experiment folder name ('05_linear_scaling' -> 5)."""
    m = _EXP_RE.match(name or "")
    return int(m.group(1)) if m else None


def util_rows(record: dict, origin: float | None) -> list[dict]:
    """One util record -> a row per device: the process's and the node's CPU, then each GPU."""
    t = record.get("t")
    if not _finite(t):
        t = float(record["time"]) - origin if (_finite(record.get("time")) and origin is not None) else math.nan
    rank = record.get("rank")
    node = f"rank{rank} " if rank not in (0, None) else ""
    rows = [{"kind": "util", "t": t, "device": f"{node}cpu process", "util_pct": record.get("cpu_process_pct"),
             "mem_gb": record.get("mem_process_gb")},
            {"kind": "util", "t": t, "device": f"{node}cpu system", "util_pct": record.get("cpu_system_pct")}]
    for gpu in record.get("gpus") or []:
        if isinstance(gpu, dict):
            rows.append({"kind": "util", "t": t, "device": f"{node}gpu{gpu.get('index')}",
                         "util_pct": gpu.get("util_pct"), "mem_gb": gpu.get("mem_used_gb"),
                         "power_w": gpu.get("power_w")})
    return rows


def _iso_to_unix(s) -> float:
    if not s:
        return math.nan
    try:
        return datetime.fromisoformat(str(s).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return math.nan


def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _number(x) -> float:
    """A field as a float: NaN where the record does not hold it (None), an error where it holds no number."""
    return math.nan if x is None else float(x)


def records_of(raw: pd.DataFrame, kind: str, fields: list[str]) -> list[dict]:
    """A run's records of one kind in the order written, as {field: value} of these fields (None where a record
    does not hold one), from the reader's frame."""
    rows = raw[raw["kind"] == kind]
    return [dict(zip(fields, values)) for values in zip(*(rows[f].tolist() if f in rows else [None] * len(rows)
                                                          for f in fields))]


def run_identity(folder: pd.Series) -> dict:
    """The run's identity and configuration columns, from the reader's row of its folder (config.json)."""
    cfg = folder["config"] or {}
    train = cfg.get("train") or {}
    lr = cfg.get("lr") or {}
    res = cfg.get("resolved") or {}
    experiment = cfg.get("experiment") or folder["experiment"]
    gpus, gb, backend = res.get("world_size"), res.get("global_batch"), res.get("backend")  # as the plan resolved them
    b = train.get("per_worker_batch")
    # emulated workers are neither DDP nor Horovod: labelled by what they are, whatever framework the config names
    framework = "emulated" if backend == "emulated" else res.get("framework")
    return {
        "experiment": experiment, "exp": experiment_number(experiment), "run": cfg.get("run") or folder["run"],
        "path": folder["path"], "source": "run", "scale": cfg.get("scale"), "framework": framework,
        "backend": backend, "numerics": nb.numerics_label(train.get("precision"), train.get("channels_last"),
                                                          train.get("compile")),
        "gpus": gpus, "per_gpu_batch": b,
        "global_batch": gb, "lr": res.get("lr"),
        "warmup": nb.warmup_label(lr.get("warmup"), lr.get("warmup_epochs")) if lr else None,
        "optimizer": (cfg.get("optim") or {}).get("name"),
        "seed": train.get("seed"), "epochs": train.get("epochs"),
        # the share of the training set held out to validate on (experiment 13's tuning runs); 0: the validation set
        "holdout": float((cfg.get("data") or {}).get("holdout_share") or 0.0),
        # evaluations every this many steps inside an epoch (experiment 13's second edition); 0: at epochs' ends
        "eval_every": int(train.get("eval_every") or 0),
    }


def latest_epochs(records: list[dict]) -> tuple[dict[int, dict], int]:
    """Epoch number -> its epoch record, the last written (a resumed run may repeat an epoch), in the order the
    epochs first came; and how many records had an epoch that is no number (bad lines)."""
    epochs: dict[int, dict] = {}
    bad = 0
    for r in records:
        if r["epoch"] is None:
            continue
        try:
            epochs[int(r["epoch"])] = r
        except (TypeError, ValueError, OverflowError):
            bad += 1
    return epochs, bad


def epoch_record_rows(epochs: dict[int, dict], ends: dict[int, int]) -> list[dict]:
    """A row per epoch, in epoch order, its fields under EPOCH_COLUMNS' names; `step` the step its validation
    evaluated (ends: contract/invariants.py's epoch_end_steps; None where the records cannot tell)."""
    return [{"kind": "epoch", "epoch": e, "step": ends.get(e),
             **{column: epochs[e][field] for field, column in EPOCH_COLUMNS.items()}} for e in sorted(epochs)]


def evaluation_records(raw: pd.DataFrame) -> list[dict]:
    """The records that place a run's evaluations at their steps (epoch_end_steps reads them), each with its kind."""
    wanted = {"iter": ["iters"], "epoch": ["epoch", "steps", "step"], "eval": ["epoch", "iter", "val_top1"]}
    return [{"kind": kind, **r} for kind, fields in wanted.items() for r in records_of(raw, kind, fields)]


def eval_rows(records: list[dict]) -> list[dict]:
    """A row per evaluation inside an epoch (train.eval_every), in step order; a step recorded twice (a resumed
    run) counts once, as last written."""
    latest = {int(r["step"]): r for r in records if r["step"] is not None}
    return [{"kind": "eval", "step": s, "val_top1": latest[s]["val_top1"], "val_loss": latest[s]["val_loss"]}
            for s in sorted(latest)]


def bench_rows(benches: list[dict]) -> list[dict]:
    """A row per bench record, its fields under BENCH_COLUMNS' names."""
    return [{"kind": "bench", **{column: r[field] for field, column in BENCH_COLUMNS.items()}, "note": "bench record"}
            for r in benches]


def parse_iters(records: list[dict]) -> tuple[pd.DataFrame, int]:
    """The iteration records' timings and losses as a frame; and how many records held no numbers there."""
    recs, bad = [], 0
    for r in records:
        try:
            recs.append((int(r["epoch"]), int(r["iter"]), _number(r["batch_time"]), _number(r["batch_time_avg"]),
                         _number(r["data_time_avg"]), _number(r["loss"])))
        except (ValueError, TypeError, OverflowError):
            bad += 1
    return pd.DataFrame(recs, columns=ITER_FIELDS), bad


def first_time(raw: pd.DataFrame) -> float | None:
    """When the run's first record other than an iteration's was written (Unix seconds), if any says."""
    for t in raw.loc[~raw["kind"].isin(["run", "iter"]), "time"]:
        if _finite(t):
            return float(t)
    return None


PLANNED = "planned"


def reported_status(manifest: dict, statuses: list[str], diverged: bool) -> tuple[str, bool]:
    """(status, diverged): the most final word of the manifest and the status records; non-finite losses mean
    diverged."""
    last = statuses[-1] if statuses else None
    cands = [s for s in (manifest.get("status"), last) if s]
    status = next((s for s in ("diverged", "completed", "failed", "preempted") if s in cands), None)
    status = status or (cands[0] if cands else "unknown")
    if diverged or "diverged" in statuses:
        return "diverged", True
    return status, False


def wallclock(epochs: dict[int, dict], manifest: dict) -> float:
    """The sum of epoch times, else the manifest's end - start."""
    et = [float(epochs[e]["epoch_time"]) for e in epochs if _finite(epochs[e]["epoch_time"])]
    if et:
        return float(sum(et))
    return _iso_to_unix(manifest.get("end")) - _iso_to_unix(manifest.get("start")) if manifest else math.nan


def run_summary(epochs: dict[int, dict], problems: tuple[str, ...]) -> dict:
    """The run's own row: best validation accuracy, and what was wrong with its folder."""
    val1 = [float(epochs[e]["val_top1"]) for e in epochs if _finite(epochs[e]["val_top1"])]
    val5 = [float(epochs[e]["val_top5"]) for e in epochs if _finite(epochs[e]["val_top5"])]
    return {"kind": "run", "best_val_top1": max(val1) if val1 else math.nan,
            "best_val_top5": max(val5) if val5 else math.nan, "note": "; ".join(problems) or None}


def throughput_rows(raw: pd.DataFrame) -> list[dict]:
    """A row per bench record (the trainers write one at a benchmark's end)."""
    return bench_rows(records_of(raw, "bench", list(BENCH_COLUMNS)))


def utilisation_rows(raw: pd.DataFrame, manifest: dict) -> list[dict]:
    """The util records' rows, their time counted from the manifest's start (else from the first record)."""
    t0 = _iso_to_unix(manifest.get("start"))
    origin = t0 if _finite(t0) else first_time(raw)
    return [row for r in records_of(raw, "util", UTIL_FIELDS) for row in util_rows(r, origin)]


def _nonfinite_loss(epoch: dict) -> bool:
    return any(epoch[k] is not None and not _finite(epoch[k]) for k in ("train_loss", "val_loss"))


# Files that parse but hold nothing usable, or the wrong kind of thing, are a problem line each: never a silent row
# (a run with no epochs counted as a result, a NaN accuracy left out of a mean unsaid), never a crash.
#: the manifest's fields read here; one its declaration (contract/manifest.py) does not allow is read as absent
MANIFEST_READ = ("status", "epochs_done", "world_size", "start", "end")
ACCURACIES = ("val_top1", "val_top5", "train_top1", "train_top5")


def manifest_problems(manifest: dict | None) -> list[str]:
    """What is wrong with a readable manifest's fields (a missing or unreadable one is the reader's problem)."""
    if manifest is None:
        return []
    problems = [] if "status" in manifest else [f"{MANIFEST}: no status (a run killed as it started, or a manifest "
                                                "not written by the trainer); its records decide the status"]
    wrong = (declared.field_problem(k, manifest[k]) for k in MANIFEST_READ if manifest.get(k) is not None)
    return problems + [f"{MANIFEST}: {problem}; read as absent" for problem in wrong if problem]


def usable_manifest(manifest: dict) -> dict:
    """The manifest without the fields manifest_problems names: each is read as absent."""
    return {k: v for k, v in manifest.items()
            if k not in MANIFEST_READ or v is None or not declared.field_problem(k, v)}


def record_problems(epochs: dict[int, dict], benched: bool, manifest: dict, status: str, diverged: bool) -> list[str]:
    """A run that says it trained but has no epoch record, and an accuracy that is no number (a diverged run's is
    explained by its status)."""
    problems, done = [], manifest.get("epochs_done") or 0
    if not epochs and not benched and (status == "completed" or done > 0):
        problems.append(f"{METRICS}: no epoch record, though the run is {status} with {done} epoch(s) done: its "
                        "accuracy is unknown")
    bad = [(e, k, epochs[e][k]) for e in sorted(epochs) for k in ACCURACIES
           if epochs[e][k] is not None and not _finite(epochs[e][k])]
    if bad and not diverged:
        e, k, v = bad[0]
        problems.append(f"{METRICS}: {k} is {v!r} at epoch {e}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1
                                                                   else "") + ": no number (see the run's train.log)")
    return problems


def run_frame(raw: pd.DataFrame) -> pd.DataFrame:
    """One run folder's rows of the reader's frame (the folder's row, then its records) -> its rows here: the run's
    summary, its epochs, throughput, utilisation and planned schedule, each with the run's columns."""
    folder = raw.iloc[0]
    config, manifest = folder["config"] or {}, usable_manifest(folder["manifest"] or {})
    ident = run_identity(folder)
    epochs, bad_epochs = latest_epochs(records_of(raw, "epoch", ["epoch", *EPOCH_COLUMNS]))
    iters, bad_iters = parse_iters(records_of(raw, "iter", ITER_FIELDS))
    rows = epoch_record_rows(epochs, epoch_end_steps(config, evaluation_records(raw)))
    rows += eval_rows(records_of(raw, "eval", ["step", "val_top1", "val_loss"]))
    rows += throughput_rows(raw) + utilisation_rows(raw, manifest)
    rows += [{"kind": "schedule", "epoch": e, "planned_lr": v}
             for e, v in enumerate((config.get("resolved") or {}).get("schedule") or [])]
    diverged = any(_nonfinite_loss(epochs[e]) for e in epochs) or \
        bool(len(iters) and not np.isfinite(iters["loss"].to_numpy(dtype=float)).all())
    statuses = [str(r["status"]) for r in records_of(raw, "status", ["status"])]
    status, diverged = reported_status(manifest, statuses, diverged)
    if status == "unknown" and folder["config"] is not None and folder["manifest"] is None and len(raw) == 1:
        status = PLANNED  # its config.json alone: a study planned it (a queued job, a study stopped first)
    problems = manifest_problems(folder["manifest"]) + record_problems(
        epochs, any(r["kind"] == "bench" for r in rows), manifest, status, diverged)
    frame = pd.DataFrame([run_summary(epochs, (*folder["problems"], *problems))] + rows)
    run_cols = dict(ident, processes=manifest.get("world_size"),  # P: None (NaN) where the manifest does not say
                    epochs_done=manifest.get("epochs_done", len(epochs)), status=status, diverged=diverged,
                    wallclock_s=wallclock(epochs, manifest), bad_lines=folder["bad_lines"] + bad_epochs + bad_iters)
    for c, v in run_cols.items():
        frame[c] = v
    frame.attrs["problems"] = [f"{folder['path']}: {p}" for p in problems]
    return frame


def load_run(run_dir: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """One run folder -> (its rows, problems found)."""
    raw = reader.read_run(run_dir)
    frame = run_frame(raw)
    return frame, list(raw.attrs["problems"]) + frame.attrs["problems"]


def _finish(frames: list[pd.DataFrame]) -> pd.DataFrame:
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object if c in TEXT_COLUMNS else float) for c in COLUMNS})
    df = pd.concat(frames, ignore_index=True)
    for c in COLUMNS:
        if c not in df:
            df[c] = np.nan
    num = [c for c in COLUMNS if c not in TEXT_COLUMNS + ["diverged"]]
    for c in num:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    df["diverged"] = df["diverged"].fillna(False).astype(bool)
    return df[COLUMNS]


def runs_frame(raw: pd.DataFrame) -> pd.DataFrame:
    """The reader's frame of a tree of run folders -> the rows here, a run after another (problems in
    ``df.attrs['problems']``)."""
    groups = [rows for _, rows in raw.groupby("path", sort=False) if not rows.iloc[0]["left_out"]]
    frames = [run_frame(rows) for rows in groups if rows.iloc[0]["config"] is not None]
    df = _finish(frames)
    df.attrs["problems"] = (list(raw.attrs["problems"]) + [p for f in frames for p in f.attrs["problems"]]
                            + [no_identity_line(rows.iloc[0]["path"]) for rows in groups
                               if rows.iloc[0]["config"] is None])
    return df


def no_identity_line(path: str) -> str:
    """A folder without a readable config.json has no identity (experiment, config fingerprint, seed, scale: the
    folder's name is none), so it is never counted, drawn or averaged: no row, this line instead."""
    return (f"{path}: no readable {CONFIG}: which config and seed it ran cannot be told, so it is left out of every "
            f"table and figure; remove it (rm -r {path}) or run its study again")


def empty_run_folders(root: str | Path) -> list[str]:
    """A problem line for each folder under root that holds no folder and none of a run's files: a run that never
    started (a study's console.log at most), which the reader, looking for those files, would pass over unsaid."""
    root = Path(root)
    if not root.is_dir():
        return []
    leaves = [d for d in sorted(root.rglob("*")) if d.is_dir() and not d.name.startswith(".")
              and not any(p.is_dir() for p in d.iterdir())]
    return [f"{d}: no {CONFIG}, {MANIFEST} or {METRICS} -- a run that never started, or no run folder; remove it"
            for d in leaves if not any(run_file_exists(d / name) for name in (CONFIG, MANIFEST, METRICS))]


def load_runs(root: str | Path = "results/runs") -> pd.DataFrame:
    """Every run folder under root as one tidy frame (problems in ``df.attrs['problems']``)."""
    df = runs_frame(reader.read_runs(root))
    df.attrs["problems"] = df.attrs["problems"] + empty_run_folders(root)
    return df


def load_log(path: str | Path, meta: dict | None = None) -> pd.DataFrame:
    """One upstream log as a run: rows like load_run's, source='log'.

    meta (or a sidecar ``<log>.json``) may give experiment, run, scale, framework, gpus, per_gpu_batch, lr,
    warmup, seed, numerics; without it the run is 'unknown' scale, 1 GPU and fp32 (the thesis's P100s ran strict fp32).
    """
    path = Path(path)
    meta = dict(meta or {})
    side = path.with_name(path.name + ".json")
    if not meta and side.exists():
        meta, _ = reader.read_document(side)
        meta = meta or {}
    log = lg.parse_log(path)
    b, g = meta.get("per_gpu_batch"), meta.get("gpus", 1)
    experiment = meta.get("experiment", path.parent.name)
    ident = {"experiment": experiment, "exp": experiment_number(experiment),
             "run": meta.get("run", plain_name(path).stem),
             "path": str(path), "source": "log", "scale": meta.get("scale", "unknown"),
             "framework": meta.get("framework"), "backend": None, "numerics": meta.get("numerics", nb.FP32),
             "gpus": g, "processes": meta.get("processes"), "per_gpu_batch": b,
             "global_batch": (b * g) if b and g else None, "lr": meta.get("lr"), "warmup": meta.get("warmup"),
             "optimizer": meta.get("optimizer", "sgd"), "seed": meta.get("seed"), "epochs": meta.get("epochs")}
    rows = []
    ep = log.epochs
    # a loss printed as nan/inf: the run diverged (truncated lines never reach the frame, so a NaN here was
    # written as 'nan' by the tool)
    losses = log.train["loss"].to_numpy(dtype=float) if log.tool in ("pytorch-examples", "tf_cnn_benchmarks") \
        else log.train["loss_avg"].to_numpy(dtype=float)
    diverged = bool(len(losses) and (~np.isfinite(losses)).any())
    for r in ep.itertuples(index=False):
        if r.epoch < 0:
            continue
        rows.append({"kind": "epoch", "epoch": r.epoch, "train_loss": r.train_loss, "train_top1": r.train_top1,
                     "train_top5": r.train_top5, "val_loss": r.val_loss, "val_top1": r.val_top1,
                     "val_top5": r.val_top5, "epoch_lr": r.lr, "epoch_time": r.epoch_time})
    tp = nb.log_throughput(log, b, g)
    if tp["thesis_images_per_s"] is not None or tp["steady_images_per_s"] is not None:
        rows.append({"kind": "bench", "thesis_images_per_s": tp["thesis_images_per_s"],
                     "steady_images_per_s": tp["steady_images_per_s"],
                     "batch_time_avg_at_199": tp["batch_time_avg_at_199"], "warmup_batches": tp["warmup_batches"],
                     "note": f"{log.tool} log ({log.fmt})"})
    val1 = ep["val_top1"].dropna() if len(ep) else pd.Series(dtype=float)
    val5 = ep["val_top5"].dropna() if len(ep) else pd.Series(dtype=float)
    wall = float(ep["epoch_time"].sum()) if len(ep) and ep["epoch_time"].notna().any() else math.nan
    summary = {"kind": "run", "best_val_top1": val1.max() if len(val1) else math.nan,
               "best_val_top5": val5.max() if len(val5) else math.nan, "note": f"{log.tool} log ({log.fmt})"}
    frame = pd.DataFrame([summary] + rows)
    cols = dict(ident, epochs_done=int((ep["epoch"] >= 0).sum()) if len(ep) else 0,
                status="diverged" if diverged else "log", diverged=diverged, wallclock_s=wall,
                bad_lines=log.bad_lines)
    for c, v in cols.items():
        frame[c] = v
    return frame


LOG_SUFFIXES = (".log", ".out", ".txt", ".err")


def is_log(path: Path) -> bool:
    """A log by its name, gzip'd or not (a committed run's train.log.gz: parse_log reads either)."""
    return Path(path.name.removesuffix(COMPACT)).suffix in LOG_SUFFIXES


def load_logs(paths) -> pd.DataFrame:
    """Upstream logs (files, or folders searched for *.log/*.out/*.txt/*.err) as one frame like load_runs'."""
    files: list[Path] = []
    for p in paths or []:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(q for q in p.rglob("*") if q.is_file() and is_log(q)))
        elif p.exists():
            files.append(p)
    return _finish([load_log(f) for f in files])


def load_study(runs: str | Path = "results/runs", logs=None, also=(), leave_out=()) -> pd.DataFrame:
    """Run folders plus any upstream logs: the one frame everything else is made from. also: more folders of run
    folders (machines.complements: an experiment another reference machine holds), read into the same frame;
    leave_out: experiment folders of `runs` not read (machines.superseded: another machine's runs replace them)."""
    own = [p for p in sorted(Path(runs).iterdir()) if p.is_dir() and p.name not in leave_out] if leave_out else [runs]
    roots = [*own, *also]
    read = [reader.read_runs(root) for root in roots] if len(roots) > 1 else [reader.read_runs(runs)]
    raw = pd.concat(read, ignore_index=True) if len(read) > 1 else read[0]
    raw.attrs["problems"] = [p for frame in read for p in frame.attrs["problems"]]  # concat keeps equal attrs only
    a = runs_frame(raw)
    problems = list(a.attrs.get("problems", [])) + [p for root in roots for p in empty_run_folders(root)]
    if logs:
        b = load_logs(logs)
        counted = b[(b["kind"] == "run") & (b["bad_lines"] > 0)]
        problems += [f"{r.path}: {int(r.bad_lines)} bad line(s) skipped" for r in counted.itertuples()]
        a = _finish([x for x in (a, b) if len(x)])
    a.attrs["problems"] = problems
    df = refuse_mixed_configs(count_runs_once(add_run_facts(a, raw)))
    return set_link_runs_apart(df)


# Runs are averaged only within one config fingerprint (contract/fingerprint.py: the resolved config without seed,
# names, paths and launcher details). A group the tables would average (POOL_KEYS) that holds runs of more than one
# fingerprint -- a smoke run beside full ones, runs from before and after a config change -- is refused: its runs get
# status MIXED and a line in the report's problem list, and no table or verdict averages them. Numerics (fp32, bf16 +
# channels_last, compiled...) are a key, not a mix: a study that varies them on purpose gets a row for each; so is the
# share held out to validate on (experiment 13's tuning run and its study runs share every other key), and so is how
# often a run evaluates (experiment 13's second edition counts steps every k steps, its first edition every epoch: two
# measurements, read apart by each edition's reading, never a mix of one).
POOL_KEYS = ["exp", "framework", "numerics", "per_gpu_batch", "global_batch", "gpus", "lr", "warmup", "optimizer",
             "holdout", "eval_every", "scale"]
MIXED = "mixed-config"
# make link-sweep runs experiment 3 across the local cluster's hosts with each host's link limited by tc (manifest
# `link`). Such a run's throughput is a point on a curve against the link's rate (analysis/link.py), not one more
# measurement of its configuration: its bench rows become LINK_BENCH rows, which the throughput tables, the cost and
# the verdicts (all reading kind "bench") never average. Its run row stays: every run is listed. The same config over
# another link is another measurement: its fingerprint names the link, so such runs are never averaged together.
LINK_BENCH = "link bench"
# A run counts once, by what it is (contract/reader.py RUN_IDENTITY: its experiment, config fingerprint, how it ran,
# seed, scale and machine) -- never by its folder's name or the name it was trained under: a copied folder (`cp -a w1-s0
# w1-s0.bak`), or the same config and seed trained under `--run a` and `--run b`, would otherwise count as another
# seed, narrowing every interval with a std of 0.000 and perhaps changing a verdict.
#: the columns add_run_facts adds beside `fingerprint`, and their value on rows of no run folder (upstream logs)
FACTS_ABSENT = {"link": None, "hosts": math.nan, "threads_per_rank": None, "cpus_per_rank": None, "identity": None,
                "ended": "", "disturbed": "", "peak_memory_bytes": math.nan, "peak_memory_of": "", "nodes": math.nan}


def run_facts(fingerprint: str | None, config, manifest) -> dict:
    """A run folder's fingerprint (with its link), the link it ran under and its distinct hosts, each rank's
    threads and CPUs where all ranks had the same (contract/placement.py), its identity, its manifest's end and
    why its timed steps did not measure its machine alone (contract/hostload.py; "" when they did or were not timed),
    the largest peak memory a rank with what it measured, and the nodes its ranks were started on
    (contract/placement.py; NaN and "" where unrecorded)."""
    m = manifest if isinstance(manifest, dict) else {}
    ranks = m.get("placement") if isinstance(m.get("placement"), list) else None  # a rank's entry each, in rank order
    peak, peak_of = placement.peak_memory(ranks)
    link = m.get("link") if isinstance(m.get("link"), str) and m.get("link") else None
    return {"fingerprint": f"{fingerprint} (link {link})" if fingerprint and link else fingerprint, "link": link,
            "hosts": len(set(m["hosts"])) if isinstance(m.get("hosts"), list) and m["hosts"] else math.nan,
            "threads_per_rank": placement.per_rank(ranks, "threads"),
            "cpus_per_rank": placement.per_rank(ranks, "cpus"),
            "identity": reader.identity_of(config, manifest) if isinstance(config, dict) else None,
            "ended": str(m.get("end") or ""),
            "disturbed": "; ".join(hostload.disturbances(ranks)),
            "peak_memory_bytes": math.nan if peak is None else peak, "peak_memory_of": peak_of,
            "nodes": placement.nodes(ranks)}


def add_run_facts(df: pd.DataFrame, raw: pd.DataFrame) -> pd.DataFrame:
    """Columns `fingerprint` and FACTS_ABSENT's, each row's run folder's (run_facts), from the reader's frame."""
    folders = raw[raw["kind"] == "run"]
    facts = {path: run_facts(fp, config, manifest) for path, fp, config, manifest in
             zip(folders["path"], folders["fingerprint"], folders["config"], folders["manifest"])}
    attrs = dict(df.attrs)
    found = {path: f["fingerprint"] for path, f in facts.items()}
    values = {c: [facts[p][c] if p in facts else absent for p in df["path"]] for c, absent in FACTS_ABSENT.items()}
    for column in ("threads_per_rank", "cpus_per_rank", "peak_memory_bytes", "nodes"):
        values[column] = pd.to_numeric(values[column], errors="coerce")
    df = df.assign(fingerprint=df["path"].map(found) if len(df) else pd.Series(dtype=object), **values)
    df["hosts"] = pd.to_numeric(df["hosts"], errors="coerce")
    df.attrs = attrs
    return df


def set_link_runs_apart(df: pd.DataFrame) -> pd.DataFrame:
    """The bench rows of runs under a limited link, as LINK_BENCH rows."""
    limited = (df["kind"] == "bench") & df["link"].notna()
    if limited.any():
        df.loc[limited, "kind"] = LINK_BENCH
    return df


def copies_of_runs(df: pd.DataFrame) -> dict[str, str]:
    """Each run folder that holds the same run as another -> the folder kept: the one of the run's own name (the
    one a study resumes; a `cp -a` copy's folder is not), then the newest training (a study that trains a row again
    under another name -- experiment 12's study repeating its sweep's run -- reads the one it trained last), then the
    first by path. Folders without a readable config.json have no identity."""
    runs = df[(df["kind"] == "run") & df["identity"].notna()]
    copies = {}
    for _, g in runs.groupby("identity", sort=False):
        folders = sorted(zip(g["path"], g["run"], g["ended"]), key=lambda f: f[2], reverse=True)  # newest first
        folders.sort(key=lambda f: Path(f[0]).name != f[1])  # stable: own name first, then newest, then path
        copies.update({path: folders[0][0] for path, _, _ in folders[1:]})
    return copies


def count_runs_once(df: pd.DataFrame) -> pd.DataFrame:
    """Drop every copy's rows, with a line each in df.attrs['problems'] naming it and the folder counted."""
    copies = copies_of_runs(df)
    if not copies:
        return df
    problems = list(df.attrs.get("problems", []))
    problems += [f"{copy}: the same run as {kept} ({reader.IDENTITY_WORDS}) -- counted once; remove the copy"
                 for copy, kept in sorted(copies.items())]
    df = df[~df["path"].isin(copies)].reset_index(drop=True)
    df.attrs["problems"] = problems
    df.attrs["copies"] = copies  # what each kept folder stands for (analysis/experiments/large_batch.py: the sweep's repeats)
    return df


def mixed_groups(df: pd.DataFrame) -> list[tuple[dict, pd.DataFrame]]:
    """(the group's key, its finished runs) of every group of finished runs with more than one fingerprint."""
    runs = df[(df["kind"] == "run") & df["status"].isin(["completed", "diverged", "log"])].copy()
    # throughput tables keep backends apart (DDP and DataParallel are both "pytorch"); quality tables do not
    benched = set(df.loc[df["kind"] == "bench", "path"])
    runs["pool_backend"] = [b if p in benched else "" for p, b in zip(runs["path"], runs["backend"])]
    out = []  # another link is another measurement (its fingerprint says so), never a mix
    for key, g in runs.groupby(POOL_KEYS + ["pool_backend", "link"], dropna=False, sort=True):
        if g["fingerprint"].nunique() > 1:
            out.append((dict(zip(POOL_KEYS, key)), g))
    return out


def refuse_mixed_configs(df: pd.DataFrame) -> pd.DataFrame:
    """Mark runs whose group mixes configs MIXED and say so in df.attrs['problems']. Their throughput rows go (the
    throughput tables average every bench row of a group); their run and epoch rows stay, listed and drawn per run."""
    problems = list(df.attrs.get("problems", []))
    refused: set = set()
    for key, g in mixed_groups(df):
        counts = ", ".join(f"{fp} ({n} run{'s' if n > 1 else ''})" for fp, n in g["fingerprint"].value_counts().items())
        folders = sorted({str(Path(p).parent) for p in g["path"]})
        problems.append(f"{', '.join(folders)}: experiment {key['exp']:.0f}, {key['gpus']:.0f} worker(s), "
                        f"{key['numerics']}, scale {key['scale']}: runs of different configs (fingerprints {counts}) -- not averaged; "
                        f"runs: {', '.join(sorted(g['run']))}")
        df.loc[df["path"].isin(g["path"]), "status"] = MIXED
        refused.update(g["path"])
    if refused:
        attrs = dict(df.attrs)
        df = df[~(df["path"].isin(refused) & (df["kind"] == "bench"))].reset_index(drop=True)
        df.attrs = attrs
    df.attrs["problems"] = problems
    return df
