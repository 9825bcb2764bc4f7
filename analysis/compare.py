"""This machine against the committed reference and the thesis: the table a study prints when it ends.

Committed run folders are a reference measured on a named machine: results/reference/<label>/ holds them, with
machine.toml saying what the machine was. A clone's own studies write to results/runs/ (gitignored), so they
measure the machine they run on. The table matches a planned run to reference runs by config fingerprint
(contract/fingerprint.py) and the nodes its ranks started on, never by name, and averages over seeds only within one
fingerprint.
"""
from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import pandas as pd

from contract import hostload, placement, reader

from . import flags as fl
from . import numbers as nb
from .machines import REFERENCE_ROOT, REPO, complements, reference_machines, runs_label, superseded
from .runs import experiment_number, load_study, run_frame
from .smoke import SMOKE, is_smoke_run, smoke_paths

SEED_SUFFIX = re.compile(r"-s\d+$")


#: (the study's kind, a language model's runs: reader.is_token_run) -> (the closing table's heading, the report
#: table's measure column). A language model is read as its experiments read it: tokens/s and final validation loss.
MEASURES = {("throughput", False): ("steady-state images/s", "steady images/s"),
            ("throughput", True): ("steady-state tokens/s", "steady tokens/s"),
            ("quality", False): ("best validation top-1 (%)", "best top-1 %"),
            ("quality", True): ("final validation loss (nats a token)", "final val loss")}


def run_value(run_dir: Path, kind: str) -> float:
    """A finished run's result in its MEASURES measure; NaN for a folder without a readable config.json, an
    unfinished run, or a run without throughput rows."""
    raw = reader.read_run(run_dir)
    if raw["config"].iloc[0] is None:
        return math.nan
    df = run_frame(raw)
    runs = df[df["kind"] == "run"]
    if runs.empty or runs["status"].iloc[0] not in ("completed", "diverged"):
        return math.nan
    tokens = reader.is_token_config(raw["config"].iloc[0])
    if kind == "throughput":  # a run with no throughput rows (a quality run) has no such column: NaN
        column = "tokens_per_s" if tokens else "steady_images_per_s"
        bench = df.loc[df["kind"] == "bench"].reindex(columns=[column])[column].dropna()
        return float(bench.iloc[-1]) if len(bench) else math.nan
    if tokens:  # the last epoch's, as experiment 15 reads it; a diverged run has none (counted, never averaged)
        if runs["status"].iloc[0] == "diverged":
            return math.nan
        losses = df.loc[df["kind"] == "epoch"].reindex(columns=["val_loss"])["val_loss"]
        return float(losses.iloc[-1]) if len(losses) else math.nan
    return float(runs["best_val_top1"].iloc[0])


def nodes_of_run(run_dir: Path) -> int | None:
    """The nodes a run's ranks started on (its manifest's placement); None where unrecorded."""
    return reader.nodes_of(reader.read_manifest(run_dir) or {})


def placed_alike(nodes: int | None, other: int | None) -> bool:
    """Two runs of one config on the same nodes, or either's unrecorded (manifests before placement was recorded):
    one node's 4 processes and 2 nodes of 2 are two measurements, never one's reference for the other."""
    return nodes is None or other is None or nodes == other


def reference_values(folder: Path, experiment: str, fingerprint: str, kind: str,
                     nodes: int | None = None) -> list[float]:
    """The results of a reference machine's runs of `experiment` whose config fingerprint is `fingerprint`, placed
    on `nodes` nodes (placed_alike)."""
    values = []
    for run_dir in sorted(p for p in (folder / experiment).glob("*") if p.is_dir()):
        if reader.folder_fingerprint(run_dir) == fingerprint and placed_alike(nodes, nodes_of_run(run_dir)):
            v = run_value(run_dir, kind)
            if not math.isnan(v):
                values.append(v)
    return values


# ============================================================================================ the thesis's number


def thesis_value(ref: pd.DataFrame, experiment: str, framework: str, gpus: int, per_gpu_batch: int,
                 kind: str, numerics: str = nb.FP32) -> float:
    """The thesis's images/s or best top-1 for the same experiment, framework and GPU count. Throughput also needs
    the same per-GPU batch; quality takes the thesis's row whatever the batch (the miniature's is its own). Only
    fp32 runs get one: the thesis's P100s ran strict fp32."""
    if numerics != nb.FP32:
        return math.nan
    rows = ref[(ref["experiment"] == experiment_number(experiment)) & (ref["gpus"] == gpus)]
    if framework != "emulated":  # emulated workers stand in for whichever framework the thesis ran them with
        rows = rows[rows["framework"] == framework]
    if kind == "throughput":
        rows = rows[rows["per_gpu_batch"] == per_gpu_batch]
    column = "throughput" if kind == "throughput" else "top1"
    values = rows[column].dropna()
    return float(values.mean()) if len(values) else math.nan


# ============================================================================================ the table


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.2f}"
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return f"{mean:.2f} ± {sd:.2f} (n={len(values)})"


def comparison_frame(entries: list[dict], kind: str, root: Path = REFERENCE_ROOT) -> pd.DataFrame:
    """One row per configuration (the planned runs without their seed suffix): this machine, each reference
    machine, the thesis. entries: name, run_dir, fingerprint, experiment, framework, gpus, per_gpu_batch and
    optionally numerics (default fp32)."""
    from .reference import load_reference

    ref = load_reference()
    machines = reference_machines(root)
    groups: dict[tuple[str, str, int | None], list[dict]] = {}
    for e in entries:
        groups.setdefault((SEED_SUFFIX.sub("", e["name"]), e["fingerprint"], nodes_of_run(e["run_dir"])), []).append(e)
    rows = []
    for (config, fingerprint, nodes), members in groups.items():
        first = members[0]
        row = {"configuration": config, "fingerprint": fingerprint,
               "this machine": _cell([v for v in (run_value(m["run_dir"], kind) for m in members)
                                      if not math.isnan(v)]),
               "threads/rank": threads_cell(members)}
        for label, folder, _ in machines:
            row[f"reference: {label}"] = _cell(reference_values(folder, first["experiment"], fingerprint, kind,
                                                                nodes))
        thesis = thesis_value(ref, first["experiment"], first["framework"], first["gpus"], first["per_gpu_batch"],
                              kind, first.get("numerics", nb.FP32))
        row["thesis"] = "-" if math.isnan(thesis) else f"{thesis:.2f}"
        if any(is_smoke_run(m["run_dir"]) for m in members):  # a smoke run is never placed beside the thesis
            row["thesis"] = "smoke run: not compared"
        rows.append(row)
    return pd.DataFrame(rows)


def threads_cell(members: list[dict]) -> str:
    """The threads each rank of this machine's runs had (manifest.json's per-rank placement): one number, "mixed"
    where ranks or seeds differ, "-" where nothing was recorded."""
    manifests = [reader.read_manifest(m["run_dir"]) for m in members]
    values = {placement.per_rank(found.get("placement"), "threads") for found in manifests if found}
    recorded = values - {None}
    if not recorded:
        return "-"
    return str(recorded.pop()) if len(values) == 1 else "mixed"


def unlike_lines(entries: list[dict], frame: pd.DataFrame) -> list[str]:
    """A line for each shape (workers, per-GPU batch) whose rows here ran with different threads a rank."""
    threads = dict(zip(frame["configuration"], frame["threads/rank"]))
    shapes: dict[tuple, dict[str, str]] = {}
    for e in entries:
        config = SEED_SUFFIX.sub("", e["name"])
        if threads.get(config, "-") != "-":
            shapes.setdefault((e["gpus"], e["per_gpu_batch"], e.get("processes")), {})[config] = threads[config]
    return [f"not like for like: {', '.join(f'{c} {t}' for c, t in rows.items())} threads a rank at "
            f"{gpus} worker(s), batch {batch}: their images/s compare placements, not frameworks"
            for (gpus, batch, _), rows in shapes.items() if len(set(rows.values())) > 1]


def flag_lines(entries: list[dict]) -> list[str]:
    """A line for each of this machine's configurations that is flagged (analysis/flags.py): a speed-up over its
    framework's 1-process configuration above its processes, a baseline of other threads a rank, a run whose
    timed steps did not have its machine alone (contract/hostload.py)."""
    measured = {}
    for config, members in _configurations(entries).items():
        manifests = [reader.read_manifest(m["run_dir"]) or {} for m in members]
        values = [v for v in (run_value(m["run_dir"], "throughput") for m in members) if not math.isnan(v)]
        threads = {placement.per_rank(found.get("placement"), "threads") for found in manifests} - {None}
        measured[config] = {"entry": members[0], "value": sum(values) / len(values) if values else math.nan,
                            "threads": threads.pop() if len(threads) == 1 else math.nan,
                            "disturbed": fl.join(line for found in manifests
                                                 for line in hostload.disturbances(found.get("placement")))}
    lines = []
    for config, m in measured.items():
        base = _one_process(m["entry"], measured)
        if base is None or base is m:
            flag = m["disturbed"]
        else:
            processes = m["entry"].get("processes") or m["entry"]["gpus"]
            flag = fl.speedup_flag(m["value"] / base["value"] if base["value"] else math.nan, processes,
                                   m["threads"], base["threads"], m["disturbed"], base["disturbed"])
        if flag:  # wrapped: the closing table's lines fit WIDTH columns
            lines += wrapped(f"flagged {config}: {flag}")
    return lines


def _configurations(entries: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for e in entries:
        groups.setdefault(SEED_SUFFIX.sub("", e["name"]), []).append(e)
    return groups


def _one_process(entry: dict, measured: dict) -> dict | None:
    """The 1-process configuration of the same framework, per-GPU batch and numerics, if this machine ran one."""
    def same(e):
        return all(e.get(k) == entry.get(k) for k in ("framework", "per_gpu_batch", "numerics"))
    ones = [m for m in measured.values() if same(m["entry"]) and (m["entry"].get("processes") or m["entry"]["gpus"]) == 1]
    return ones[0] if ones else None


WIDTH = 120  # the closing table's lines: a terminal of 120 columns shows each whole


def wrapped(line: str) -> list[str]:
    """A long line of the closing table as lines of at most WIDTH columns, the continuations indented."""
    return textwrap.wrap(line, WIDTH, subsequent_indent="  ", break_on_hyphens=False)


def drawing_machine(experiment: str, root: Path = REFERENCE_ROOT) -> tuple[str, Path] | None:
    """(label, folder) of the one reference machine the committed report draws `experiment` from: the first
    machine's, unless another supplies it (complements: report_draws, or a folder only that machine holds); None
    where no reference machine ran it. An experiment drawn from two machines (report_draws_beside) gives the
    first of them."""
    found = reference_machines(root)
    if not found:
        return None
    label, first, _ = found[0]
    if (first / experiment).is_dir() and experiment not in superseded(first, root):
        return label, first
    others = [(other, folder.parent) for other, folder in complements(first, root) if folder.name == experiment]
    return others[0] if others else None


def fitted(frame: pd.DataFrame) -> str:
    """The table as text in at most WIDTH columns: the plain table where it fits; else a configuration a line (its
    continuations indented), every value kept, since a table cut to fit would drop what it was printed for."""
    text = frame.to_string(index=False)
    if max(map(len, text.splitlines())) <= WIDTH:
        return text
    first, *rest = frame.columns
    lines = []
    for row in frame.itertuples(index=False):
        values = dict(zip(frame.columns, row))
        lines += wrapped(f"{values[first]}: " + "; ".join(f"{c} {values[c]}" for c in rest))
    return "\n".join(lines)


def comparison_text(entries: list[dict], kind: str, root: Path = REFERENCE_ROOT) -> str:
    """The closing table as text within WIDTH columns: this machine, the one reference machine the committed report
    draws the experiment from (drawing_machine), the thesis; a line each for a flag, the reference machine, and
    where the other reference machines' values are (the report's this_machine_vs_reference table)."""
    what = MEASURES[kind, bool(entries) and reader.is_token_run(entries[0]["run_dir"])][0]
    frame = comparison_frame(entries, kind, root).drop(columns=["fingerprint"])
    drawn = drawing_machine(entries[0]["experiment"], root) if entries else None
    held = {f"reference: {label}" for label, folder, _ in reference_machines(root)
            if entries and (folder / entries[0]["experiment"]).is_dir()}  # a machine that never ran it says nothing
    others = [c for c in frame.columns if c.startswith("reference: ") and (not drawn or c != f"reference: {drawn[0]}")]
    beside = (f"reference {drawn[0]} (the committed reference machine that ran it, matched by config fingerprint)"
              if drawn else "no committed reference machine (none ran this experiment)")
    lines = wrapped(f"{what}: this machine (threads/rank: each rank's threads here), {beside}, the thesis (ResNet-50 "
                    f"on ILSVRC-2012, P100 GPUs: another scale unless --scale thesis)")
    lines.append(fitted(frame.drop(columns=others)))
    lines += [part for line in unlike_lines(entries, frame) for part in wrapped(line)]
    if kind == "throughput":
        lines += flag_lines(entries)
    for label, _, description in reference_machines(root):
        if drawn and label == drawn[0]:
            lines += wrapped(f"reference {label}: {description}")
    also = [c.removeprefix("reference: ") for c in others if c in held]
    if also:
        lines += wrapped(f"{len(also)} other reference machine(s) that ran it ({', '.join(also)}): their values in "
                         "the report's this_machine_vs_reference table")
    return "\n".join(lines)


# ============================================================================================ the report's view


def _hosts(df: pd.DataFrame) -> list[str]:
    """The host names the run folders' manifests record (which machine 'this machine' was)."""
    hosts: set[str] = set()
    for path in df.loc[(df["kind"] == "run") & (df["source"] == "run"), "path"].dropna().unique():
        hosts.update((reader.read_manifest(path) or {}).get("hosts") or [])
    return sorted(hosts)


def load_report_study(runs, logs=None, root: Path = REFERENCE_ROOT) -> pd.DataFrame:
    """The report's frame: load_study of `runs`, with the committed reference's complements in place of what they
    supersede (see complements)."""
    return load_study(runs, logs, also=[folder for _, folder in complements(runs, root)],
                      leave_out=superseded(runs, root))


def _repo_relative(path: Path) -> Path:
    try:  # as a user would type it, from the repository's root
        return Path(path).resolve().relative_to(REPO)
    except ValueError:
        return Path(path).resolve()


def _count(df: pd.DataFrame, under: Path | None = None) -> int:
    runs = df[df["kind"] == "run"] if len(df) else df
    if under is not None and len(runs):
        runs = runs[runs["path"].map(lambda p: Path(p).resolve().is_relative_to(Path(under).resolve()))]
    return int(len(runs))


def made_from(df: pd.DataFrame, runs: Path, root: Path = REFERENCE_ROOT, experiments=()) -> str:
    """One line a table, figure or notebook carries so it says which runs it shows: folder, machine, count (and an
    experiment another reference machine contributed: its folder, machine and count; with `experiments`, only
    when it is one of them, so an entry that never reads it does not name it). With `experiments`, the count is of
    those experiments' runs only: a table of experiment 1 is not "made from" experiment 12's runs."""
    if experiments and len(df) and "exp" in df.columns:
        df = df[df["exp"].isin(experiments)]
    machine = runs_label(runs, root)
    hosts = _hosts(df) if machine == "this machine" else []
    if hosts:
        machine += f" (host {', '.join(hosts)})"
    extra = complements(runs, root)
    counted = [(label, folder, _count(df, folder)) for label, folder in extra]
    n = _count(df) - sum(k for _, _, k in counted)
    parts = [f"{folder.name}: {k} run{'' if k == 1 else 's'} in {_repo_relative(folder)} (reference machine {label})"
             for label, folder, k in counted  # an entry's experiment with none of the runs it reads is not named
             if not experiments or (experiment_number(folder.name) in experiments and k)]
    if n or not parts:  # the first machine's runs, unless the entry reads only experiments drawn from another
        parts.insert(0, f"{n} run{'' if n == 1 else 's'} in {_repo_relative(runs)} ({machine})")
    return "Made from " + "; ".join(parts) + "."


def without_thesis_beside_smoke(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The thesis's cell of a smoke run's configuration says so instead of a number: 2 epochs of a miniature are
    never placed beside a 90-epoch ImageNet result."""
    found = smoke_paths(runs)
    smoke = {SEED_SUFFIX.sub("", r.run) for r in runs.itertuples() if r.path in found}
    if smoke and len(frame):
        frame.loc[frame["configuration"].isin(smoke), "thesis"] = SMOKE
    return frame


def report_comparison(df: pd.DataFrame, throughput=(), root: Path = REFERENCE_ROOT) -> pd.DataFrame:
    """Every configuration of `df`'s runs (this machine's) beside the reference machines' and the thesis's: in
    images/s for the experiments of `throughput`, in best top-1 for the others (a language model's: MEASURES)."""
    runs = df[(df["kind"] == "run") & (df["source"] == "run")]
    parts = []
    measure = runs["exp"].isin(list(throughput)).map({True: "throughput", False: "quality"})
    for (experiment, kind), g in runs.groupby([runs["experiment"], measure]):
        entries = [dict(name=r.run, run_dir=Path(r.path), fingerprint=r.fingerprint, experiment=experiment,
                        framework=r.framework, gpus=r.gpus, per_gpu_batch=r.per_gpu_batch, numerics=r.numerics)
                   for r in g.itertuples()]
        frame = without_thesis_beside_smoke(comparison_frame(entries, kind, root), g)
        frame.insert(0, "measure", MEASURES[kind, reader.is_token_run(entries[0]["run_dir"])][1])
        frame.insert(0, "experiment", experiment)
        parts.append(frame)
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if len(table) and (table["thesis"] == SMOKE).all():  # smoke runs alone: no thesis column at all
        table = table.drop(columns="thesis").assign(verdict=SMOKE)
    # a reference machine with no run of any of these configurations says nothing: its column of "-" is left out
    silent = [c for c in table.columns if c.startswith("reference: ") and (table[c] == "-").all()]
    return table.drop(columns=silent)
