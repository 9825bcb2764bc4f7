"""`python -m analysis cost`: what each experiment costs at the gpu and thesis scales, in GPU-hours, and at the node
scale in node-hours of a node of N GPUs (`--gpus N`; default experiments/scales.toml [node.study], not the GPUs
visible here, so the table is the same on any machine); and what each local quality study took, from its runs.

Each study is expanded exactly as `make expN SCALE=...` would (the node scale placed as contract/plan.py places it)
and priced at a measured images/s of the row's own numerics, named with its GPU in `rate_source`, never another
precision's or another GPU's rate: where each rate comes from, and what the node scale assumes or predicts (the
scaling advisor, analysis/advisor/model.py, over NODE_LINK), is NOTES below, the notes the table carries.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from contract.config import load_config
from contract.fingerprint import config_fingerprint
from contract.plan import (check_node_gpus, declared_node_gpus, expand, node_fits, node_gpus_used,
                           node_processes)

from .advisor import model as advisor
from . import numbers as nb
from . import reference as rf
from . import tables as tb
from .machines import machine_of

IMAGENET_TRAIN = 1_281_167
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
GPU_BENCHES = Path(__file__).resolve().parents[1] / "results"
NO_MEASUREMENT = "no measurement"
NODE = "node"
SCALES = ("gpu", NODE, "thesis")
SCALING_UNMEASURED = "scaling unmeasured"  # in a node row's rate_source: a 1-GPU rate times the run's GPUs
PREDICTED = "predicted, no measurement"  # in a node row's rate_source: the scaling advisor's images/s
NODE_LINK = "nvlink4"  # the node scale's GPUs' link (analysis/reference/links.toml): an 8-GPU H100/H200 SXM node
STEP_SOURCES = (GPU_BENCHES / "advisor" / "steps", GPU_BENCHES / "gpu_checks")  # step-split records, searched
COLUMNS = ["experiment", "scale", "configuration", "runs", "gpus_per_run", "images_per_run", "images_per_s",
           "rate_source", "run_wallclock_s", "gpu_hours", "node_hours", "thesis_wallclock_s", "estimate_over_thesis"]


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
    measurement of that numerics or none (see NOTES)."""
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


def row_of(cfg, exp: int, scale: str, ours: pd.DataFrame, ref: pd.DataFrame, bench: pd.DataFrame | None) -> dict:
    """A configuration's row at the gpu or thesis scale (see NOTES), runs and totals aside."""
    images, gpus = run_work(cfg)
    fw, b = cfg.framework(), cfg.train.per_worker_batch
    numerics = nb.numerics_label(cfg.train.precision, cfg.train.channels_last, cfg.train.compile)
    speed, source = rate(ours, ref.dropna(subset=["throughput"]), scale, fw, b, gpus, numerics, bench)
    wall = images / speed if speed == speed else math.nan
    check = thesis_wallclock(ref, exp, fw, b, cfg.train.workers) if scale == "thesis" else math.nan
    return {"gpus_per_run": gpus, "images_per_run": int(images), "images_per_s": speed, "rate_source": source,
            "run_wallclock_s": wall, "node_hours": math.nan, "thesis_wallclock_s": check,
            "estimate_over_thesis": wall / check if check == check else math.nan}


def study_rows(experiment: Path, scale: str, ours: pd.DataFrame, ref: pd.DataFrame,
               bench: pd.DataFrame | None = None, node_gpus: int | None = None,
               steps: list | None = None) -> list[dict]:
    """A row per configuration of the experiment's study at the scale (its seeds counted in `runs`); node_gpus: the
    node scale's N (default: experiments/scales.toml's)."""
    config = experiment / "config.toml"
    if scale == NODE and node_gpus is None:
        node_gpus = declared_node_gpus(config)
    groups: dict[str, dict] = {}
    for run in expand(config, scale):
        name = run.name.rsplit("-s", 1)[0]
        if name in groups:
            groups[name]["runs"] += 1
            continue
        cfg = load_config(config, scale, [f"{k}={json.dumps(v)}" for k, v in run.settings.items()], need_data=False)
        if scale == NODE:
            row = node_row(cfg, run.nodes, ours, bench, node_gpus, steps)
        else:
            row = row_of(cfg, int(experiment.name[:2]), scale, ours, ref, bench)
        if row is not None:
            groups[name] = {"experiment": experiment.name, "scale": scale, "configuration": name, "runs": 1, **row}
    rows = list(groups.values())
    for r in rows:
        r["gpu_hours"] = r["runs"] * r["gpus_per_run"] * r["run_wallclock_s"] / 3600.0
        if scale == NODE:
            r["node_hours"] = r["runs"] * r["run_wallclock_s"] / 3600.0  # each run holds the whole node
    return rows


def scaled_source(source: str, gpus: int) -> str:
    """The rate_source of a 1-GPU measurement taken for a run on `gpus` GPUs."""
    return f"{source} x {gpus}: the 1-GPU measurement x {gpus} GPUs, {SCALING_UNMEASURED}"


def scaling_assumed(source: str) -> bool:
    return SCALING_UNMEASURED in str(source)


def gpu_steps(folders=STEP_SOURCES) -> list[tuple[Path, dict]]:
    """Every step-split record timed on a GPU under `folders` (python -m tools step-split --json)."""
    out = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.json")):
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(doc, dict) and "whole_step_s" in doc and doc.get("device", "cpu") != "cpu":
                out.append((path, doc))
    return out


def predicted_rate(steps: list[tuple[Path, dict]] | None, model: str | None, backend: str, batch: int,
                   processes: int, numerics: str, node_gpus: int):
    """(images/s, source) the scaling advisor predicts for `processes` GPUs of one node from the newest step of
    the same model, per-GPU batch and numerics; None where no such step was timed."""
    for path, doc in reversed(steps or []):
        label = nb.numerics_label(doc.get("precision", "fp32"), doc.get("channels_last", False), False)
        if (doc.get("model"), doc.get("batch"), label) == (model, batch, numerics):
            step, _ = advisor.load_step(path)
            link = advisor.nominal_link(NODE_LINK)
            p = advisor.predict(step, "horovod" if backend == "horovod" else "ddp", processes, node_gpus, link, link)
            return p.images_per_s, f"{PREDICTED}: the advisor from {path.name} ({doc['device']}), {NODE_LINK} nominal"
    return None


def predicted(source: str) -> bool:
    return PREDICTED in str(source)


def node_rate(ours: pd.DataFrame, bench: pd.DataFrame | None, backend: str, batch: int, workers: int,
              processes: int, numerics: str, steps: list | None = None, model: str | None = None,
              node_gpus: int = 8):
    """(images/s, where it comes from) of a node run of `workers` over `processes` GPUs (see NOTES):
    ours at the node scale for the same W over the same P; else, for P = 1, the GPU benchmark's 1-GPU DDP rate of
    the same numerics and per-GPU batch; else the advisor's prediction from a step of the same model, batch and
    numerics (`steps`); else the 1-GPU rate x P (said in the source); else no measurement."""
    fw = "horovod+pytorch" if backend == "horovod" else "pytorch"
    o = ours[(ours["scale"] == NODE) & (ours["framework"] == fw) & (ours["backend"] == backend)
             & (ours["per_gpu_batch"] == batch) & (ours["gpus"] == workers) & (ours["processes"] == processes)
             & (ours["numerics"] == numerics)] if len(ours) else ours
    for col in ("steady_images_per_s", "thesis_images_per_s"):
        v = o[col].dropna() if len(o) else o
        if len(v):
            return float(v.mean()), f"ours ({NODE} scale)"
    # a rank's DDP step (the 'ddp' rows), or one plain process (emulated workers: the 'single' rows)
    wrapper = {"ddp": "pytorch", "single": "emulated", "emulated": "emulated"}.get(backend)
    one = _bench_rate(bench, wrapper, batch, 1, numerics) if wrapper else None
    if one and processes == 1:
        return one
    if backend in ("ddp", "horovod"):
        guess = predicted_rate(steps, model, backend, batch, processes, numerics, node_gpus)
        if guess:
            return guess
    if not one:
        return math.nan, NO_MEASUREMENT
    speed, source = one
    return (speed, source) if processes == 1 else (processes * speed, scaled_source(source, processes))


def node_row(cfg, nodes: int, ours: pd.DataFrame, bench: pd.DataFrame | None, node_gpus: int,
             steps: list | None = None) -> dict | None:
    """A configuration's row at the node scale, placed as the study places it (contract/plan.py); None for a run
    the node does not hold (several nodes; a throughput run or DataParallel on more GPUs than it has)."""
    w, backend = cfg.train.workers, cfg.train.backend
    if backend == "auto":  # no launcher: as the trainer picks one process
        backend = "emulated" if w > 1 else "single"
    if nodes > 1 or not node_fits(w, backend, node_gpus, cfg.bench.batches > 0):
        return None
    images, _ = run_work(cfg)
    processes = node_processes(w, backend, node_gpus)
    numerics = nb.numerics_label(cfg.train.precision, cfg.train.channels_last, cfg.train.compile)
    model = cfg.model.name if cfg.train.framework != "tensorflow" else None  # the steps timed are PyTorch's
    speed, source = node_rate(ours, bench, backend, cfg.train.per_worker_batch, w, processes, numerics, steps,
                              model, node_gpus)
    return {"gpus_per_run": node_gpus_used(w, backend, node_gpus), "images_per_run": int(images),
            "images_per_s": speed, "rate_source": source, "run_wallclock_s": images / speed if speed == speed
            else math.nan, "node_hours": math.nan, "thesis_wallclock_s": math.nan, "estimate_over_thesis": math.nan}


def cost_table(df: pd.DataFrame, ref: pd.DataFrame, experiments: Path, node_gpus: int) -> pd.DataFrame:
    """One row per configuration of every numbered experiment at each scale (see NOTES), priced from the GPU
    benchmarks (results/bench_gpu*.json) and the GPU step splits the advisor predicts from (STEP_SOURCES)."""
    ours = tb.throughput_summary(df)
    bench, steps = gpu_bench_rates(), gpu_steps()
    rows = []
    for folder in sorted(p for p in Path(experiments).iterdir() if (p / "config.toml").is_file()
                         and p.name[:2].isdigit()):
        for scale in SCALES:
            rows += study_rows(folder, scale, ours, ref, bench, node_gpus, steps)
    return pd.DataFrame(rows, columns=COLUMNS)


def _gpu_of(source: str) -> str:
    """The GPU a rate was measured on, from its rate_source: 'P100' (the thesis's), the benchmark's device, or
    'ours (<scale>)' for our runs (their machine is in their manifests)."""
    if source.endswith("(P100)"):
        return "P100"
    if "(" in source and (source.startswith("bench_gpu") or predicted(source)):
        return source.split("(", 1)[1].split(")", 1)[0]
    return source


def totals(cost: pd.DataFrame) -> pd.DataFrame:
    """Per experiment and scale: runs, GPU-hours (node-hours at the node scale), and the wall-clock of running them
    one after another, with the GPUs whose rates they use, how many configurations have no measurement (left out of
    the sums) and how many take a 1-GPU rate x their GPUs (perfect scaling assumed: the node scale)."""
    c = cost.assign(wall_all=cost["runs"] * cost["run_wallclock_s"],
                    unknown=cost["images_per_s"].isna().astype(int))
    c["rates_on"] = c["rate_source"].fillna("").map(_gpu_of).where(c["images_per_s"].notna(), "")
    c["scaled"] = c["rate_source"].map(scaling_assumed).astype(int)
    c["predicted"] = c["rate_source"].map(predicted).astype(int)
    c["scaled_hours"] = c["node_hours"].where(c["scaled"] == 1)
    g = c.groupby(["experiment", "scale"], sort=True)
    out = g.agg(runs=("runs", "sum"), gpu_hours=("gpu_hours", lambda s: s.sum(min_count=1)),
                node_hours=("node_hours", lambda s: s.sum(min_count=1)),
                node_hours_scaling_assumed=("scaled_hours", lambda s: s.sum(min_count=1)),
                sequential_wallclock_s=("wall_all", lambda s: s.sum(min_count=1)),
                configurations_unmeasured=("unknown", "sum"), configurations_scaling_assumed=("scaled", "sum"),
                configurations_predicted=("predicted", "sum"),
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
    "The node scale (a node of N GPUs, `make cost GPUS=N`; the table's N is in its title): each run placed as the "
    "study places it (W workers over P = min(W, N) GPUs, one process a GPU; DataParallel's W GPUs in one; a "
    "throughput run needing more than N GPUs left out; a run across several nodes refused: SCALE=thesis) and "
    "priced in node_hours = runs x wall-clock (each run holds the whole node); gpus_per_run: the GPUs that compute. "
    "images/s: ours at the node scale for the same W over the same P, else the GPU benchmark's 1-GPU DDP rate of the "
    "same numerics and batch -- as measured on one GPU, x P on P > 1 GPUs, which assumes perfect scaling that no run "
    "has measured (rate_source says 'scaling unmeasured'; optimistic); Horovod and DataParallel: no 1-GPU benchmark, "
    "'no measurement'.",
    "thesis_wallclock_s: the thesis's own 90-epoch time for that configuration (Tables 11-15), the check on the "
    "estimate; estimate_over_thesis below 1 means the thesis's run took longer than its own throughput implies.",
]


TOTALS_NOTE = ("rates_on: the GPUs whose measured images/s a row's configurations use; configurations_unmeasured: "
               "configurations with no measurement of their own numerics on that scale's GPU, left out of gpu_hours "
               "and sequential_wallclock_s (so a total with any is a lower bound); node_hours (the node scale): "
               "runs x wall-clock, each run holding the whole node; configurations_scaling_assumed: node "
               "configurations priced at a 1-GPU rate x their GPUs (perfect scaling, unmeasured: optimistic), and "
               "node_hours_scaling_assumed the node-hours they make up; configurations_predicted: configurations "
               "priced at the scaling advisor's prediction (no measurement: rate_source names the step and GPU).")


def write_cost(df: pd.DataFrame, ref: pd.DataFrame, out: Path, experiments: Path = Path("experiments"),
               node_gpus: int | None = None) -> tuple[list[Path], pd.DataFrame]:
    """cost.md (totals, then per configuration) and the CSVs; returns (paths, totals). node_gpus: the node scale's
    N (default: experiments/scales.toml's)."""
    n = check_node_gpus(node_gpus) if node_gpus is not None else declared_node_gpus(Path(experiments) / "scales.toml")
    cost = cost_table(df, ref, experiments, n)
    node = f"node-hours of a node of {n} GPUs at the node scale"
    written = tb.write_table(cost, out, "cost", f"Cost per configuration at the gpu, node and thesis scales ({node})",
                             NOTES)
    sums = totals(cost)
    sums.attrs["node_gpus"] = n
    said = summary_lines(sums, n) + [TOTALS_NOTE]
    title = f"Cost per experiment and scale (GPU-hours; {node})"
    written += tb.write_table(sums, out, "cost_totals", title, said)
    md = out / "cost.md"
    md.write_text(tb.to_markdown(sums, title, said) + "\n" + md.read_text())
    return written, sums


def list_schedule_s(durations: list[float], slots: int) -> float:
    """Wall-clock of jobs started in plan order, each on the first slot to come free (as `study --jobs N` does)."""
    free = [0.0] * slots
    for d in durations:
        free[free.index(min(free))] += d
    return max(free)


def local_study_times(df: pd.DataFrame, experiments: Path = EXPERIMENTS, jobs: int = 2) -> pd.DataFrame:
    """Per local quality study with a measured run, its default plan (`make expN`): the planned runs the frame holds
    (same name and config fingerprint, completed), their measured wall-clock, and the study's at JOBS=jobs from
    those times."""
    done = df[(df["kind"] == "run") & (df["scale"] == "local") & (df["status"] == "completed")] if len(df) else df
    rows = []
    for folder in sorted(p for p in Path(experiments).iterdir() if (p / "config.toml").is_file()
                         and p.name[:2].isdigit()):
        config = folder / "config.toml"
        if load_config(config, "local", need_data=False).bench.batches > 0:
            continue  # a throughput study runs one job at a time and times it
        walls, machines = [], set()
        for run in expand(config, "local"):
            cfg = load_config(config, "local", [f"{k}={json.dumps(v)}" for k, v in run.settings.items()],
                              need_data=False)
            hit = done[(done["experiment"] == folder.name) & (done["run"] == run.name)
                       & (done["fingerprint"] == config_fingerprint(cfg))] if len(done) else done
            walls.append(float(hit["wallclock_s"].iloc[0]) if len(hit) else math.nan)
            if len(hit):
                machines.update(machine_of(path) for path in hit["path"])
        measured = [w for w in walls if w == w]
        if not measured:  # a declared study none of whose runs has run: nothing to time
            continue
        rows.append({"experiment": folder.name, "measured_on": ", ".join(sorted(machines)),
                     "runs_planned": len(walls), "runs_measured": len(measured),
                     "run_minutes": sum(measured) / 60.0,
                     f"study_minutes_jobs{jobs}": (list_schedule_s(walls, jobs) / 60.0 if len(measured) == len(walls)
                                                  else math.nan)})
    return pd.DataFrame(rows)


def study_time_notes(reused: dict[int, tuple[int, ...]]) -> list[str]:
    """The study-times table's notes; reused: an experiment -> those that compare with its runs without including
    them (entries.Experiment.reuses), each said."""
    said = "".join(f" {nb.experiments_text(users).capitalize()} compare with experiment {n}'s runs, which they do "
                   "not include." for n, users in reused.items())
    return [STUDY_TIME_NOTES[0], STUDY_TIME_NOTES[1] + said]


STUDY_TIME_NOTES = [
    "The local scale's default plan of each quality study (`make expN`: its worker counts x its seeds). runs_measured: "
    "the planned runs found completed with the plan's config fingerprint; run_minutes: their wall-clocks summed, each "
    "measured as the run went (the committed reference's runs ran two side by side, one thread each); measured_on: "
    "the machine whose runs they are (a reference machine's label): each time is that machine's alone.",
    "study_minutes_jobs2: those runs started in plan order, two at a time, each as one ends (`make expN JOBS=2` on "
    "2 cores): a study's wall-clock from its runs' measured times, empty until every planned run is measured.",
]


def format_hours(h: float) -> str:
    return "" if h != h else f"{h:,.1f}"


def _scope(experiments) -> str:
    numbers = sorted(int(str(e)[:2]) for e in experiments)
    return "experiment " + str(numbers[0]) if len(numbers) == 1 else f"experiments {numbers[0]}-{numbers[-1]}"


def summary_lines(sums: pd.DataFrame, node_gpus: int | None = None) -> list[str]:
    """Per scale: the thesis's nine experiments, then the studies beyond it, each total saying which experiments it
    sums (GPU-hours; node-hours of a node of node_gpus GPUs at the node scale), on which GPUs' rates, and what it
    leaves out or assumes."""
    out = []
    for scale, g in sums.groupby("scale"):
        number = g["experiment"].astype(str).str[:2].astype(int)
        thesis = number.isin(set(rf.load_reference()["experiment"]))  # the thesis's nine; beyond: our own studies
        for label, part in (("the thesis's experiments", g[thesis]), ("beyond the thesis", g[~thesis])):
            if not part.empty:
                out.append(_summary_line(scale, label, part, node_gpus))
    return out


def _summary_line(scale: str, label: str, part: pd.DataFrame, node_gpus: int | None) -> str:
    gpus = sorted({x.strip() for s in part["rates_on"] for x in s.split(",") if x.strip()})
    unmeasured = int(part["configurations_unmeasured"].sum())
    scaled = int(part["configurations_scaling_assumed"].sum())
    guessed = int(part["configurations_predicted"].sum())
    if scale == NODE:
        where = f"{scale} (a node of {node_gpus} GPUs)" if node_gpus else scale
        hours = f"{format_hours(part['node_hours'].sum())} node-hours"
    else:
        where, hours = scale, f"{format_hours(part['gpu_hours'].sum())} GPU-hours"
    return (f"{where}, {label} ({_scope(part['experiment'])}): {hours}, "
            f"{nb.format_duration(part['sequential_wallclock_s'].sum())} one run after another"
            + (f"; rates measured on {', '.join(gpus)}" if gpus else "")
            + (f"; {format_hours(part['node_hours_scaling_assumed'].sum())} of the node-hours from {scaled} "
               "configuration(s) at a 1-GPU rate x their GPUs (perfect scaling assumed, unmeasured)" if scaled else "")
            + (f"; {guessed} configuration(s) at the scaling advisor's prediction (no measurement)" if guessed else "")
            + (f"; {unmeasured} configuration(s) with no measurement left out" if unmeasured else ""))
