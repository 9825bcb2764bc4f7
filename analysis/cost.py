"""`python -m analysis cost`: what each experiment costs at the gpu and thesis scales, in GPU-hours; and what each
local quality study took, from its measured runs.

Per run of a study (expanded exactly as `make expN SCALE=...` would): images processed = epochs x training images
(ILSVRC-2012: 1,281,167) for a training, (batches + warm-up batches) x global batch for a throughput benchmark;
wall-clock = images / images/s; GPU-hours = wall-clock x the GPUs the run holds (its workers; 1 for emulated workers).
images/s: ours where a run at that scale and in the same numerics (fp32, bf16+cl, ...) measured it (the study
frame's bench rows), else the thesis's measurement for the same framework, per-GPU batch and GPU count (Tables 1-9,
P100 GPUs in fp32: for a tf32, bf16 or compiled configuration on a newer GPU, a pessimistic stand-in); empty where
neither exists. The check: the thesis's own 90-epoch wall-clocks (Tables 11-15) beside the estimate. Validation
passes (50,000 images an epoch, forward only) and start-up are not counted.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from . import numbers as nb
from . import reference as rf
from . import tables as tb

IMAGENET_TRAIN = 1_281_167
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
SCALES = ("gpu", "thesis")
COLUMNS = ["experiment", "scale", "configuration", "runs", "gpus_per_run", "images_per_run", "images_per_s",
           "rate_source", "run_wallclock_s", "gpu_hours", "thesis_wallclock_s", "estimate_over_thesis"]


def images_per_epoch(cfg) -> int:
    d = cfg.data
    if d.kind == "imagefolder":
        return IMAGENET_TRAIN
    if d.kind == "synthetic":
        return d.synthetic_images
    return d.classes * d.per_class


def run_work(cfg) -> tuple[float, int]:
    """(images a run processes, GPUs it holds)."""
    if cfg.bench.batches > 0:
        images = (cfg.bench.batches + cfg.bench.warmup_batches) * cfg.global_batch
    else:
        images = cfg.train.epochs * images_per_epoch(cfg)
    gpus = 1 if cfg.train.backend == "emulated" else cfg.train.workers
    return float(images), gpus


def rate(ours: pd.DataFrame, thesis: pd.DataFrame, scale: str, framework: str, batch: int, gpus: int,
         numerics: str = nb.FP32):
    """(images/s, where it comes from) for a run holding `gpus` GPUs at per-GPU batch `batch` in `numerics`."""
    fw = "pytorch" if framework == "emulated" else framework  # emulated workers: one PyTorch process on one GPU
    o = ours[(ours["scale"] == scale) & (ours["framework"] == fw) & (ours["per_gpu_batch"] == batch)
             & (ours["gpus"] == gpus) & (ours["numerics"] == numerics)]
    for col in ("steady_images_per_s", "thesis_images_per_s"):
        v = o[col].dropna() if len(o) else o
        if len(v):
            return float(v.mean()), f"ours ({scale} scale)"
    t = thesis[(thesis["framework"] == fw) & (thesis["per_gpu_batch"] == batch) & (thesis["gpus"] == gpus)]
    if len(t):
        return float(t["throughput"].iloc[0]), f"thesis Table {int(t['table'].iloc[0])} (P100)"
    return math.nan, "unmeasured"


def thesis_wallclock(ref: pd.DataFrame, exp: int, framework: str, batch: int, gpus: int) -> float:
    r = ref[(ref["experiment"] == exp) & (ref["framework"] == framework) & (ref["per_gpu_batch"] == batch)
            & (ref["gpus"] == gpus)].dropna(subset=["wallclock_s"])
    return float(r["wallclock_s"].iloc[0]) if len(r) else math.nan


def study_rows(experiment: Path, scale: str, ours: pd.DataFrame, ref: pd.DataFrame) -> list[dict]:
    from trainers.config import load_config
    from trainers.study import expand

    config = experiment / "config.toml"
    exp = int(experiment.name[:2])
    groups: dict[str, dict] = {}
    for run in expand(config, scale):
        cfg = load_config(config, scale, [f"{k}={json.dumps(v)}" for k, v in run.settings.items()], need_data=False)
        name = run.name.rsplit("-s", 1)[0]
        if name in groups:
            groups[name]["runs"] += 1
            continue
        images, gpus = run_work(cfg)
        fw, b = cfg.framework(), cfg.train.per_worker_batch
        numerics = nb.numerics_label(cfg.train.precision, cfg.train.channels_last, cfg.train.compile)
        speed, source = rate(ours, ref.dropna(subset=["throughput"]), scale, fw, b, gpus, numerics)
        wall = images / speed if speed == speed else math.nan
        check = thesis_wallclock(ref, exp, fw, b, cfg.train.workers) if scale == "thesis" else math.nan
        groups[name] = {"experiment": experiment.name, "scale": scale, "configuration": name, "runs": 1,
                        "gpus_per_run": gpus, "images_per_run": int(images), "images_per_s": speed, "rate_source": source,
                        "run_wallclock_s": wall, "thesis_wallclock_s": check,
                        "estimate_over_thesis": wall / check if check == check else math.nan}
    rows = list(groups.values())
    for r in rows:
        r["gpu_hours"] = r["runs"] * r["gpus_per_run"] * r["run_wallclock_s"] / 3600.0
    return rows


def cost_table(df: pd.DataFrame, ref: pd.DataFrame, experiments: Path = Path("experiments"),
               scales=SCALES) -> pd.DataFrame:
    """One row per configuration of every numbered experiment at each scale (see the module docstring)."""
    ours = tb.throughput_summary(df)
    rows = []
    for folder in sorted(p for p in Path(experiments).iterdir() if (p / "config.toml").is_file()
                         and p.name[:2].isdigit()):
        for scale in scales:
            rows += study_rows(folder, scale, ours, ref)
    return pd.DataFrame(rows, columns=COLUMNS)


def totals(cost: pd.DataFrame) -> pd.DataFrame:
    """Per experiment and scale: runs, GPU-hours, and the wall-clock of running them one after another."""
    c = cost.assign(wall_all=cost["runs"] * cost["run_wallclock_s"],
                    unknown=cost["images_per_s"].isna().astype(int))
    g = c.groupby(["experiment", "scale"], sort=True)
    out = g.agg(runs=("runs", "sum"), gpu_hours=("gpu_hours", lambda s: s.sum(min_count=1)),
                sequential_wallclock_s=("wall_all", lambda s: s.sum(min_count=1)),
                configurations_unmeasured=("unknown", "sum")).reset_index()
    return out


NOTES = [
    "images/s: ours where a run at that scale in the same numerics measured it, else the thesis's for the same "
    "framework, per-GPU batch and GPU count (P100 in fp32, its throughput formula); emulated workers run as one "
    "PyTorch process on one GPU, so they take the 1-GPU rate; 'unmeasured': no such measurement (e.g. per-GPU "
    "batch 32 with PyTorch), no estimate.",
    "wall-clock = epochs x 1,281,167 images / images/s (benchmarks: their batches x global batch); validation and "
    "start-up are not counted. gpu_hours = runs x GPUs per run x wall-clock.",
    "thesis_wallclock_s: the thesis's own 90-epoch time for that configuration (Tables 11-15), the check on the "
    "estimate; estimate_over_thesis below 1 means the thesis's run took longer than its own throughput implies.",
]


def write_cost(df: pd.DataFrame, ref: pd.DataFrame, out: Path,
               experiments: Path = Path("experiments")) -> tuple[list[Path], pd.DataFrame]:
    """cost.md (totals, then per configuration) and the CSVs; returns (paths, totals)."""
    cost = cost_table(df, ref, experiments)
    written = tb.write_table(cost, out, "cost", "Cost per configuration at the gpu and thesis scales", NOTES)
    sums = totals(cost)
    written += tb.write_table(sums, out, "cost_totals", "Cost per experiment and scale (GPU-hours)")
    md = out / "cost.md"
    md.write_text(tb.to_markdown(sums, "Cost per experiment and scale (GPU-hours)") + "\n" + md.read_text())
    return written, sums


# ============================================================================================ local studies, measured


def list_schedule_s(durations: list[float], slots: int) -> float:
    """Wall-clock of jobs started in plan order, each on the first slot to come free (as `study --jobs N` does)."""
    free = [0.0] * slots
    for d in durations:
        free[free.index(min(free))] += d
    return max(free)


def local_study_times(df: pd.DataFrame, experiments: Path = EXPERIMENTS, jobs: int = 2) -> pd.DataFrame:
    """Per local quality study, its default plan (`make expN`): the planned runs the frame holds (same name and
    config fingerprint, completed), their measured wall-clock, and the study's at JOBS=jobs from those times."""
    from trainers.config import load_config
    from trainers.fingerprint import config_fingerprint
    from trainers.study import expand

    done = df[(df["kind"] == "run") & (df["scale"] == "local") & (df["status"] == "completed")] if len(df) else df
    rows = []
    for folder in sorted(p for p in Path(experiments).iterdir() if (p / "config.toml").is_file()
                         and p.name[:2].isdigit()):
        config = folder / "config.toml"
        if load_config(config, "local", need_data=False).bench.batches > 0:
            continue  # a throughput study runs one job at a time and times it
        walls = []
        for run in expand(config, "local"):
            cfg = load_config(config, "local", [f"{k}={json.dumps(v)}" for k, v in run.settings.items()],
                              need_data=False)
            hit = done[(done["experiment"] == folder.name) & (done["run"] == run.name)
                       & (done["fingerprint"] == config_fingerprint(cfg))] if len(done) else done
            walls.append(float(hit["wallclock_s"].iloc[0]) if len(hit) else math.nan)
        measured = [w for w in walls if w == w]
        rows.append({"experiment": folder.name, "runs_planned": len(walls), "runs_measured": len(measured),
                     "run_minutes": sum(measured) / 60.0,
                     f"study_minutes_jobs{jobs}": (list_schedule_s(walls, jobs) / 60.0 if len(measured) == len(walls)
                                                  else math.nan)})
    return pd.DataFrame(rows)


STUDY_TIME_NOTES = [
    "The local scale's default plan of each quality study (`make expN`: its worker counts x its seeds). runs_measured: "
    "the planned runs found completed with the plan's config fingerprint; run_minutes: their wall-clocks summed, each "
    "measured as the run went (the committed reference's runs ran two side by side, one thread each).",
    "study_minutes_jobs2: those runs started in plan order, two at a time, each as one ends (`make expN JOBS=2` on "
    "2 cores): a study's wall-clock from its runs' measured times, empty until every planned run is measured. "
    "Experiments 6-9 compare with experiment 5's runs, which they do not include.",
]


def format_hours(h: float) -> str:
    return "" if h != h else f"{h:,.1f}"


def summary_lines(sums: pd.DataFrame) -> list[str]:
    out = []
    for scale, g in sums.groupby("scale"):
        out.append(f"{scale}: {format_hours(g['gpu_hours'].sum())} GPU-hours in all, "
                   f"{nb.format_duration(g['sequential_wallclock_s'].sum())} one run after another")
    return out
