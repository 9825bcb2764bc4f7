"""`python -m analysis cost`: what each experiment costs at the gpu and thesis scales, in GPU-hours; and what each
local quality study took, from its measured runs.

Per run of a study (expanded exactly as `make expN SCALE=...` would): images processed = epochs x training images
(ILSVRC-2012: 1,281,167) for a training, (batches + warm-up batches) x global batch for a throughput benchmark;
wall-clock = images / images/s; GPU-hours = wall-clock x the GPUs the run holds (its workers; 1 for emulated workers).
images/s, always a measurement of the row's own numerics (fp32, bf16+cl, ...), and named with its GPU: ours where a
run at that scale measured it (the study frame's bench rows); else, at the gpu scale, the GPU benchmark
(results/bench_gpu*.json: `make bench` on a GPU, the trainer's step at a per-GPU batch, one GPU); else, in fp32 only,
at the thesis scale (the P100s, fp32 only), the thesis's measurement for the same framework, per-GPU batch and GPU
count (Tables 1-9); else 'no measurement' and no estimate -- never another precision's or another GPU's rate. The check: the thesis's own 90-epoch wall-clocks (Tables 11-15) beside the estimate. Validation
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
GPU_BENCHES = Path(__file__).resolve().parents[1] / "results"
NO_MEASUREMENT = "no measurement"
THESIS_EXPERIMENTS = range(1, 10)  # the thesis's nine; 10 and beyond are this suite's own studies
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


def gpu_bench_rates(folder: Path = GPU_BENCHES) -> pd.DataFrame:
    """The GPU benchmarks' rows (results/bench_gpu*.json, `python -m tools bench` on a GPU): device, numerics,
    wrapper (single / ddp at world size 1), per-GPU batch and the trainer's images/s."""
    rows = []
    for path in sorted(Path(folder).glob("bench_gpu*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        variants = doc.get("variants") or {}
        for r in doc.get("rows") or []:
            v = variants.get(r.get("variant"), {})
            numerics = nb.numerics_label(v.get("precision", "fp32"), v.get("channels_last", False),
                                         v.get("compile", False))
            rows.append({"device": doc.get("device", "?"), "file": path.name, "numerics": numerics,
                         "wrapper": r.get("wrapper"), "per_gpu_batch": r.get("per_gpu_batch"),
                         "images_per_s": r.get("trainer_images_per_s")})
    return pd.DataFrame(rows, columns=["device", "file", "numerics", "wrapper", "per_gpu_batch", "images_per_s"])


def _bench_rate(bench: pd.DataFrame, framework: str, batch: int, gpus: int, numerics: str):
    """A 1-GPU run's rate from the GPU benchmark: emulated workers are one plain process (wrapper 'single'), a
    PyTorch DDP run at world size 1 the 'ddp' rows."""
    if bench is None or bench.empty or gpus != 1 or framework not in ("emulated", "pytorch"):
        return None
    wrapper = "single" if framework == "emulated" else "ddp"
    b = bench[(bench["numerics"] == numerics) & (bench["wrapper"] == wrapper) & (bench["per_gpu_batch"] == batch)]
    b = b.dropna(subset=["images_per_s"])
    if b.empty:
        return None
    return float(b["images_per_s"].iloc[-1]), f"{b['file'].iloc[-1]} ({b['device'].iloc[-1]})"


def rate(ours: pd.DataFrame, thesis: pd.DataFrame, scale: str, framework: str, batch: int, gpus: int,
         numerics: str = nb.FP32, bench: pd.DataFrame | None = None):
    """(images/s, where it comes from) for a run holding `gpus` GPUs at per-GPU batch `batch` in `numerics`: a
    measurement of that numerics or none (see the module docstring)."""
    fw = "pytorch" if framework == "emulated" else framework  # emulated workers: one PyTorch process on one GPU
    o = ours[(ours["scale"] == scale) & (ours["framework"] == fw) & (ours["per_gpu_batch"] == batch)
             & (ours["gpus"] == gpus) & (ours["numerics"] == numerics)]
    for col in ("steady_images_per_s", "thesis_images_per_s"):
        v = o[col].dropna() if len(o) else o
        if len(v):
            return float(v.mean()), f"ours ({scale} scale)"
    measured = _bench_rate(bench, framework, batch, gpus, numerics) if scale == "gpu" else None
    if measured:
        return measured
    if scale == "gpu" or numerics != nb.FP32:  # the P100 is not the gpu scale's GPU, and it ran strict fp32 only
        return math.nan, NO_MEASUREMENT
    t = thesis[(thesis["framework"] == fw) & (thesis["per_gpu_batch"] == batch) & (thesis["gpus"] == gpus)]
    if len(t):
        return float(t["throughput"].iloc[0]), f"thesis Table {int(t['table'].iloc[0])} (P100)"
    return math.nan, NO_MEASUREMENT


def thesis_wallclock(ref: pd.DataFrame, exp: int, framework: str, batch: int, gpus: int) -> float:
    r = ref[(ref["experiment"] == exp) & (ref["framework"] == framework) & (ref["per_gpu_batch"] == batch)
            & (ref["gpus"] == gpus)].dropna(subset=["wallclock_s"])
    return float(r["wallclock_s"].iloc[0]) if len(r) else math.nan


def study_rows(experiment: Path, scale: str, ours: pd.DataFrame, ref: pd.DataFrame,
               bench: pd.DataFrame | None = None) -> list[dict]:
    from contract.config import load_config
    from contract.plan import expand

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
        speed, source = rate(ours, ref.dropna(subset=["throughput"]), scale, fw, b, gpus, numerics, bench)
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
               scales=SCALES, bench: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per configuration of every numbered experiment at each scale (see the module docstring); bench: the
    GPU benchmarks' rates (default: results/bench_gpu*.json)."""
    ours = tb.throughput_summary(df)
    bench = gpu_bench_rates() if bench is None else bench
    rows = []
    for folder in sorted(p for p in Path(experiments).iterdir() if (p / "config.toml").is_file()
                         and p.name[:2].isdigit()):
        for scale in scales:
            rows += study_rows(folder, scale, ours, ref, bench)
    return pd.DataFrame(rows, columns=COLUMNS)


def _gpu_of(source: str) -> str:
    """The GPU a rate was measured on, from its rate_source: 'P100' (the thesis's), the benchmark's device, or
    'ours (<scale>)' for our runs (their machine is in their manifests)."""
    if source.endswith("(P100)"):
        return "P100"
    if "(" in source and source.startswith("bench_gpu"):
        return source.split("(", 1)[1].rstrip(")")
    return source


def totals(cost: pd.DataFrame) -> pd.DataFrame:
    """Per experiment and scale: runs, GPU-hours, and the wall-clock of running them one after another, with the
    GPUs whose rates they use and how many configurations have no measurement (left out of the sums)."""
    c = cost.assign(wall_all=cost["runs"] * cost["run_wallclock_s"],
                    unknown=cost["images_per_s"].isna().astype(int))
    if "rate_source" not in c:
        c["rate_source"] = ""
    c["rates_on"] = c["rate_source"].fillna("").map(_gpu_of).where(c["images_per_s"].notna(), "")
    g = c.groupby(["experiment", "scale"], sort=True)
    out = g.agg(runs=("runs", "sum"), gpu_hours=("gpu_hours", lambda s: s.sum(min_count=1)),
                sequential_wallclock_s=("wall_all", lambda s: s.sum(min_count=1)),
                configurations_unmeasured=("unknown", "sum"),
                rates_on=("rates_on", lambda s: ", ".join(sorted({x for x in s if x})))).reset_index()
    return out


NOTES = [
    "images/s, a measurement of the row's own numerics, named in rate_source with its GPU: ours where a run at "
    "that scale measured it; at the gpu scale, else the GPU benchmark (results/bench_gpu*.json, one GPU, the "
    "trainer's step on synthetic data); at the thesis scale, else the thesis's for the same framework, per-GPU batch "
    "and GPU count (P100 in fp32, its throughput formula); emulated workers run as one PyTorch process on one GPU, so they take the "
    "1-GPU rate; 'no measurement' (a tf32, bf16 or compiled row with no run or benchmark of its own, or e.g. "
    "per-GPU batch 32 with PyTorch): no estimate, left out of the sums.",
    "wall-clock = epochs x 1,281,167 images / images/s (benchmarks: their batches x global batch); validation and "
    "start-up are not counted. gpu_hours = runs x GPUs per run x wall-clock.",
    "thesis_wallclock_s: the thesis's own 90-epoch time for that configuration (Tables 11-15), the check on the "
    "estimate; estimate_over_thesis below 1 means the thesis's run took longer than its own throughput implies.",
]


TOTALS_NOTE = ("rates_on: the GPUs whose measured images/s a row's configurations use; configurations_unmeasured: "
               "configurations with no measurement of their own numerics on that scale's GPU, left out of gpu_hours "
               "and sequential_wallclock_s (so a total with any is a lower bound).")


def write_cost(df: pd.DataFrame, ref: pd.DataFrame, out: Path,
               experiments: Path = Path("experiments")) -> tuple[list[Path], pd.DataFrame]:
    """cost.md (totals, then per configuration) and the CSVs; returns (paths, totals)."""
    cost = cost_table(df, ref, experiments)
    written = tb.write_table(cost, out, "cost", "Cost per configuration at the gpu and thesis scales", NOTES)
    sums = totals(cost)
    said = summary_lines(sums) + [TOTALS_NOTE]
    written += tb.write_table(sums, out, "cost_totals", "Cost per experiment and scale (GPU-hours)", said)
    md = out / "cost.md"
    md.write_text(tb.to_markdown(sums, "Cost per experiment and scale (GPU-hours)", said) + "\n" + md.read_text())
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
    from contract.config import load_config
    from contract.fingerprint import config_fingerprint
    from contract.plan import expand

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


def _scope(experiments) -> str:
    numbers = sorted(int(str(e)[:2]) for e in experiments)
    return "experiment " + str(numbers[0]) if len(numbers) == 1 else f"experiments {numbers[0]}-{numbers[-1]}"


def summary_lines(sums: pd.DataFrame) -> list[str]:
    """Per scale: the thesis's nine experiments, then the studies beyond it, each total saying which experiments it
    sums, on which GPUs' rates, and what it leaves out."""
    out = []
    for scale, g in sums.groupby("scale"):
        number = g["experiment"].astype(str).str[:2].astype(int)
        for label, part in (("the thesis's experiments", g[number.isin(THESIS_EXPERIMENTS)]),
                            ("beyond the thesis", g[~number.isin(THESIS_EXPERIMENTS)])):
            if part.empty:
                continue
            gpus = sorted({x.strip() for s in part.get("rates_on", pd.Series(dtype=str)).fillna("")
                           for x in s.split(",") if x.strip()})
            unmeasured = int(part["configurations_unmeasured"].sum())
            out.append(f"{scale}, {label} ({_scope(part['experiment'])}): {format_hours(part['gpu_hours'].sum())} "
                       f"GPU-hours, {nb.format_duration(part['sequential_wallclock_s'].sum())} one run after another"
                       + (f"; rates measured on {', '.join(gpus)}" if gpus else "")
                       + (f"; {unmeasured} configuration(s) with no measurement left out" if unmeasured else ""))
    return out
