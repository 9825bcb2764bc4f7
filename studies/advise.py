"""`make advise CLUSTER=P` (`python -m suite advise --cluster P`; `python -m suite analysis advise --cluster P` comes
here too): a cluster's predicted images/s for experiment 3's DDP and Horovod runs, each placed as the study places it
there (nodes, ranks a node, a rank's threads: issue 63), from measured parts only (issue #51): the profile's newest
`make cluster-check` link fit (its two link layers run now where none is recorded), one worker's step and the input
pipeline's images/s timed at the scale at each thread count the runs have (`python -m tools step-split`), kept beside
the link fits (results/cluster_check/steps/, which git ignores). docs/advisor.md says how each part is measured.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from analysis.advisor import model as advisor
from contract.config import ConfigError
from contract.placement import cpus_per_task_for
from slurm.client import Clients, NoConfiguration

EXP3 = Path(__file__).resolve().parents[1] / "experiments" / "03_throughput_distributed_data_parallel" / "config.toml"
STEP_STEPS, STEP_WARMUP, INPUT_BATCHES = 20, 5, 50  # seconds on a CPU at the local scale


class AdviseError(Exception):
    """What the user must fix, in one line."""


@dataclass(frozen=True)
class Shape:
    nodes: int  # the nodes that answer (or --nodes)
    node_cpus: int  # a node's CPUs: the profile's, else sinfo's
    shared_cores: int | None  # the one machine's cores where every node is a host on it, else None


@dataclass(frozen=True)
class Placed:
    """One experiment-3 run as the study places it on the cluster: its backend, nodes, ranks a node and a rank's
    threads."""
    backend: str
    nodes: int
    ranks_per_node: int
    threads: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node


def answering_nodes(clients: Clients) -> list[tuple[str, int]]:
    """(node, CPUs) of every node that answers (sinfo); AdviseError where Slurm cannot be asked."""
    try:
        r = clients.run(["sinfo", "-h", "-N", "-o", "%N %T %c"], capture_output=True, text=True, timeout=60)
    except NoConfiguration as e:
        raise AdviseError(str(e)) from None
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AdviseError(f"sinfo could not be run ({e}): run this on the cluster's login node, or give --nodes "
                          f"N and --step FILE") from None
    if r.returncode != 0:
        said = (r.stderr.strip().splitlines() or ["no message"])[-1][:160]
        raise AdviseError(f"sinfo failed ({said}): is SLURM_CONF set (make advise CLUSTER=local "
                          f"sets it for the local cluster)?")
    rows = [line.split() for line in r.stdout.splitlines() if len(line.split()) == 3]
    return sorted({(n, int(c)) for n, s, c in rows
                   if s.rstrip("~#*") in ("idle", "mixed", "allocated", "completing")})


def cluster_shape(profile, nodes: int | None = None, clients: Clients | None = None) -> Shape:
    """The nodes (sinfo's answering ones unless given) and a node's CPUs (the profile's, else sinfo's; where nodes
    are given and sinfo cannot be asked, a local cluster's nodes have this machine's cores, as slurmd -C describes
    them)."""
    found: list[tuple[str, int]] = []
    if nodes is None or not profile.cpus_per_node:
        try:
            found = answering_nodes(clients or Clients.of(profile))
        except AdviseError:
            if nodes is None or not profile.shared_machine:
                raise
    nodes = len(found) if nodes is None else nodes
    if nodes < 1:
        raise AdviseError(f"no node of {profile.name} answers (sinfo): start it (the local cluster: make cluster "
                          f"NODES=3) or give --nodes N")
    cpus = profile.cpus_per_node or (min(c for _, c in found) if found else os.cpu_count() or 1)
    return Shape(nodes, cpus, (os.cpu_count() or 1) if profile.shared_machine else None)


def study_placements(profile, scale: str, node_cpus: int) -> list[Placed]:
    """Experiment 3's DDP and Horovod+PyTorch runs at the scale, each placed as `make exp3 LAUNCHER=slurm
    CLUSTER=P` places it: its nodes and ranks a node as studies/slurm.py submits it, its threads as each rank takes
    them (rank_threads). Issue 63: a table of 1...N ranks of one thread, filling a node first, predicted placements
    the study never runs (its 1-process run has a whole node's threads; its 2 processes are on 2 nodes)."""
    from contract.plan import expand
    from studies.slurm import placement

    placed = []
    try:
        for run in expand(EXP3, scale, seeds=1, need_data=False):
            if run.cfg.train.framework != "pytorch" or run.backend not in ("ddp", "horovod"):
                continue  # the advisor models PyTorch's step and the two reducers
            nodes, per_node, _ = placement(run.workers, run.backend, run.nodes, profile.gpus_per_node,
                                           profile.ranks_per_node)
            placed.append(Placed(run.backend, nodes, per_node, rank_threads(profile, run, per_node, node_cpus)))
    except ConfigError as e:  # a scale without experiment 3's runs, a node too small for its tasks
        raise AdviseError(f"experiment 3 at the {scale} scale on {profile.name}: {e}") from None
    return sorted(set(placed), key=lambda p: (p.backend != "ddp", p.ranks, p.nodes))


def rank_threads(profile, run, per_node: int, node_cpus: int) -> int:
    """A rank's threads as the study gives them: on hosts of one machine a local run's (that machine's cores over
    the run's ranks: studies/launch.py threads_per_process, which studies/slurm.py passes as OMP_NUM_THREADS),
    else the CPUs the rank is given (contract/placement.py: cpus_per_task, or its node's CPUs over the node's
    ranks)."""
    if profile.shared_machine and run.cfg.train.device == "cpu":
        from studies.launch import Plan, threads_per_process

        plan = Plan(run=run, cfg=run.cfg, backend=run.backend, run_dir=Path(), status="missing", trainer_args=[])
        return threads_per_process(plan, 1)
    return profile.cpus_per_task or cpus_per_task_for(node_cpus, per_node)


def link_fit(profile, probe: bool, root: Path = advisor.CHECK_ROOT, clients: Clients | None = None) -> Path:
    """The profile's newest link fit; where none is recorded, the check's two link layers run now (probe) or the
    line that says how to make one."""
    path = advisor.latest_link_fit(profile.name, root)
    if path:
        return path
    if not probe:
        raise AdviseError(f"no link fit recorded for {profile.name} under {root}: make cluster-check "
                          f"CLUSTER={profile.name} (its link-intra and link-inter layers) makes one")
    from studies.cluster_check import run_check

    print(f"advise: no link fit recorded for {profile.name}; timing its links now (cluster-check's link-intra and "
          f"link-inter layers)", flush=True)
    try:
        run_check(profile.name, "local", 2, root, timeout=600, layers=("link-intra", "link-inter"), clients=clients)
    except ConfigError as e:  # no Slurm configuration here: one line, and no probe started
        raise AdviseError(str(e)) from None
    path = advisor.latest_link_fit(profile.name, root)
    if not path:
        raise AdviseError(f"the link probes of {profile.name} did not both pass (their table is above): fix the "
                          f"failing layer, then make cluster-check CLUSTER={profile.name} "
                          f"LAYERS=\"link-intra link-inter\"")
    return path


def step_name(scale: str, threads: int) -> str:
    return f"{scale}-{EXP3.parent.name[:2]}-t{threads}.json"


def step_path(root: Path, scale: str, threads: int) -> Path:
    """Where make advise keeps a step it timed: beside this machine's link fits (root: the cluster checks' folder,
    which git ignores), never over the committed steps (results/advisor/steps/: make advise-local's)."""
    from analysis.advisor.runs import TIMED_STEPS

    return Path(root) / TIMED_STEPS / step_name(scale, threads)


def measured_step(scale: str, threads: int, out: Path) -> tuple[advisor.Step, dict]:
    """One worker's step and its input pipeline, timed here in a process of its own (its threads are its own), kept
    in `out` (a report predicts each run of this machine, model, batch and threads from it)."""
    argv = [sys.executable, "-m", "tools", "step-split", "--config", str(EXP3), "--scale", scale,
            "--threads", str(threads), "--steps", str(STEP_STEPS), "--warmup", str(STEP_WARMUP),
            "--input-batches", str(INPUT_BATCHES), "--json", str(Path(out).resolve())]
    if scale == "local":
        argv += ["--device", "cpu"]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    print(f"advise: timing one worker's step at the {scale} scale ({threads} thread(s)) and its input", flush=True)
    r = subprocess.run(argv, text=True, capture_output=True, cwd=Path(__file__).resolve().parents[1])
    if r.returncode != 0:
        raise AdviseError(f"step-split failed: {(r.stderr or r.stdout).strip().splitlines()[-1][:200]}")
    print("advise: " + next(line for line in r.stdout.splitlines() if "forward" in line) + f" -> {out}", flush=True)
    return advisor.load_step(Path(out))


def steps_by_threads(placed: list[Placed], scale: str, step_file: Path | None, root: Path) -> dict[int, tuple]:
    """{threads: (step, its record, where it came from)}: one step timed here at each thread count the rows have,
    or the given file's step for every row (its time as timed, its threads the row's)."""
    wanted = sorted({p.threads for p in placed})
    if step_file:
        step, record = advisor.load_step(step_file)
        return {t: (replace(step, threads=t), record, str(step_file)) for t in wanted}
    return {t: (*measured_step(scale, t, step_path(root, scale, t)), str(step_path(root, scale, t)))
            for t in wanted}


def advise_cluster(cluster: str, nodes: int | None = None, step_file: Path | None = None, scale: str = "local",
                   probe: bool = True, root: Path = advisor.CHECK_ROOT) -> str:
    """The predicted table of experiment 3's runs on `cluster`, as markdown."""
    from slurm.profiles import ProfileError, load_profile

    try:
        profile = load_profile(cluster)
    except ProfileError as e:
        raise AdviseError(str(e)) from None
    clients = Clients.of(profile)  # checked where a client is needed: a recorded fit and given nodes need none
    shape = cluster_shape(profile, nodes, clients)
    placed = study_placements(profile, scale, shape.node_cpus)
    path = link_fit(profile, probe, root, clients)
    intra, inter, fits = advisor.read_link_fit(path)
    # the fit says whether its hosts share one machine's cores (the profile's shared_machine, or the probe's boot
    # ids: studies/cluster_check.annotate_link_fit), the one answer the report's predictions use too
    shape = replace(shape, shared_cores=fits.get("shared_cores", shape.shared_cores))
    steps = steps_by_threads(placed, scale, step_file, root)
    rows = [advisor.predict(steps[p.threads][0], p.backend, p.ranks, p.ranks_per_node, intra, inter,
                            shared_cores=shape.shared_cores) for p in placed]
    text = advisor.placement_markdown(rows, title(profile.name, scale, shape, path, fits, steps),
                                      unit="processes" if not profile.gpus_per_node else "GPUs")
    beyond = sorted({p.nodes for p in placed if p.nodes > shape.nodes})
    if beyond:
        text += (f"\nrows on {', '.join(map(str, beyond))} nodes: {profile.name} has {shape.nodes} answering, so "
                 f"the study's jobs for them would wait for nodes that are not there\n")
    return text


def title(name: str, scale: str, shape: Shape, path: Path, fits: dict, steps: dict[int, tuple]) -> str:
    shared = f"; the nodes share this machine's {shape.shared_cores} cores" if shape.shared_cores else ""
    lines = [f"{name}: experiment 3's runs at the {scale} scale, predicted as make exp3 LAUNCHER=slurm CLUSTER={name} "
             f"places them ({shape.nodes} nodes answer, {shape.node_cpus} CPU(s) a node{shared})", "",
             f"- links ({path}): within a node {advisor.describe_link_record(fits['intra'])}; across nodes "
             f"{advisor.describe_link_record(fits['inter'])}"]
    for threads, (step, record, where) in steps.items():
        lines.append(f"- one worker's step at {threads} thread(s) ({where}): {record.get('model', '?')} batch "
                     f"{step.batch}, {1000 * step.compute_s:.1f} ms (forward {1000 * step.forward_s:.1f}, backward "
                     f"{1000 * step.backward_s:.1f}, optimizer {1000 * step.optimizer_s:.1f}), gradients "
                     f"{step.gradient_bytes / 1e6:.2f} MB")
    step, record, _ = steps[max(steps)]
    input_rate = f"{step.input_images_per_s:,.0f} img/s" if step.input_images_per_s else "not measured"
    lines.append(f"- input pipeline: {input_rate} ({record.get('data_kind', '?')} data, "
                 f"{record.get('loader_workers', '?')} loader workers: "
                 f"{'beside the step' if step.input_overlaps else 'in the step, the rank loads its own batches'})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """python -m suite advise --cluster P [--nodes N] [--step FILE] [--scale S] [--no-probe] [--check-root DIR]"""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m suite advise", description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", required=True, help="a profile in slurm/clusters/ (or a path to a .toml)")
    ap.add_argument("--nodes", type=int, default=None, help="the nodes (default: those sinfo lists as answering)")
    ap.add_argument("--step", type=Path, default=None, help="a step timed by python -m tools step-split on one of "
                    "the cluster's workers (default: timed here at the scale)")
    ap.add_argument("--scale", default="local", help="the scale whose experiment-3 runs are predicted (their "
                    "placements, and the step timed here)")
    ap.add_argument("--no-probe", action="store_true", help="never run the link probes; say how to make a fit")
    ap.add_argument("--check-root", type=Path, default=advisor.CHECK_ROOT, help="where cluster-check folders are; "
                    "the steps timed here go to its steps/")
    args = ap.parse_args(argv)
    try:
        table = advise_cluster(args.cluster, args.nodes, args.step, args.scale, not args.no_probe, args.check_root)
    except (AdviseError, OSError, KeyError, ValueError) as e:
        print(f"error: advise --cluster {args.cluster}: {e}", file=sys.stderr)
        return 2
    print(table, end="")
    return 0
