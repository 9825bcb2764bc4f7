"""`make advise CLUSTER=P` (`python -m suite advise --cluster P`; `python -m suite analysis advise --cluster P` comes
here too): a cluster's predicted images/s for 1...N processes for DDP and Horovod, from measured parts only (issue
#51): the profile's newest `make cluster-check` link fit (its two link layers run now where none is recorded), one
worker's step and the input pipeline's images/s timed at the scale (`python -m tools step-split`). docs/advisor.md
says how each part is measured and where it is kept.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from analysis import advisor
from contract.config import ConfigError
from slurm.client import Clients, NoConfiguration

EXP3 = Path(__file__).resolve().parents[1] / "experiments" / "03_throughput_distributed_data_parallel" / "config.toml"
STEP_STEPS, STEP_WARMUP, INPUT_BATCHES = 20, 5, 50  # seconds on a CPU at the local scale


class AdviseError(Exception):
    """What the user must fix, in one line."""


@dataclass(frozen=True)
class Shape:
    nodes: int
    ranks_per_node: int
    threads: int  # a CPU rank's threads (GPU ranks: the CPUs left to each)
    shared_cores: int | None  # the one machine's cores where every node is a host on it, else None


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
    """The nodes (sinfo's answering ones unless given), the ranks a node a study puts there, a rank's threads (a
    node's CPUs: the profile's, else sinfo's; where nodes are given and sinfo cannot be asked, a local cluster's
    nodes have this machine's cores, as slurmd -C describes them)."""
    from studies.cluster_check import ranks_a_node

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
    per_node = ranks_a_node(profile)
    return Shape(nodes, per_node, max(1, cpus // per_node),
                 (os.cpu_count() or 1) if profile.shared_machine else None)


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


def measured_step(scale: str, threads: int) -> tuple[advisor.Step, dict]:
    """One worker's step and its input pipeline, timed here in a process of its own (its threads are its own), kept
    in results/advisor/steps/ (the report predicts each run of this machine, model, batch and threads from it)."""
    from analysis.advisor_runs import STEPS

    out = STEPS / f"{scale}-{EXP3.parent.name[:2]}-t{threads}.json"
    argv = [sys.executable, "-m", "tools", "step-split", "--config", str(EXP3), "--scale", scale,
            "--threads", str(threads), "--steps", str(STEP_STEPS), "--warmup", str(STEP_WARMUP),
            "--input-batches", str(INPUT_BATCHES), "--json", str(out.resolve())]
    if scale == "local":
        argv += ["--device", "cpu"]
    print(f"advise: timing one worker's step at the {scale} scale ({threads} thread(s)) and its input", flush=True)
    r = subprocess.run(argv, text=True, capture_output=True, cwd=Path(__file__).resolve().parents[1])
    if r.returncode != 0:
        raise AdviseError(f"step-split failed: {(r.stderr or r.stdout).strip().splitlines()[-1][:200]}")
    print("advise: " + next(line for line in r.stdout.splitlines() if "forward" in line) + f" -> {out}", flush=True)
    return advisor.load_step(out)


def advise_cluster(cluster: str, nodes: int | None = None, step_file: Path | None = None, scale: str = "local",
                   probe: bool = True, root: Path = advisor.CHECK_ROOT) -> str:
    """The predicted table for 1...N processes of `cluster`, as markdown."""
    from slurm.profiles import ProfileError, load_profile

    try:
        profile = load_profile(cluster)
    except ProfileError as e:
        raise AdviseError(str(e)) from None
    clients = Clients.of(profile)  # checked where a client is needed: a recorded fit and given nodes need none
    shape = cluster_shape(profile, nodes, clients)
    path = link_fit(profile, probe, root, clients)
    intra, inter, fits = advisor.read_link_fit(path)
    # the fit says whether its hosts share one machine's cores (the profile's shared_machine, or the probe's boot
    # ids: studies/cluster_check.annotate_link_fit), the one answer the report's predictions use too
    shape = replace(shape, shared_cores=fits.get("shared_cores", shape.shared_cores))
    step, record = advisor.load_step(step_file) if step_file else measured_step(scale, shape.threads)
    if step_file:
        step = replace(step, threads=shape.threads)
    rows = advisor.process_table(step, shape.nodes, shape.ranks_per_node, intra, inter, shape.shared_cores)
    return advisor.scaling_markdown(rows, title(profile.name, shape, path, fits, step, record, step_file),
                                    unit="processes" if not profile.gpus_per_node else "GPUs")


def title(name: str, shape: Shape, path: Path, fits: dict, step: advisor.Step, record: dict, step_file) -> str:
    where = f"{step_file}" if step_file else "timed here"
    shared = f"; the nodes share this machine's {shape.shared_cores} cores" if shape.shared_cores else ""
    input_rate = f"{step.input_images_per_s:,.0f} img/s" if step.input_images_per_s else "not measured"
    return (f"{name}: predicted for 1...{shape.nodes * shape.ranks_per_node} processes ({shape.nodes} nodes x "
            f"{shape.ranks_per_node} ranks, {shape.threads} thread(s) a rank{shared})\n\n"
            f"- links ({path}): within a node {advisor.describe_link_record(fits['intra'])}; across nodes "
            f"{advisor.describe_link_record(fits['inter'])}\n"
            f"- one worker's step ({where}): {record.get('model', '?')} batch {step.batch}, "
            f"{1000 * step.compute_s:.1f} ms (forward {1000 * step.forward_s:.1f}, backward "
            f"{1000 * step.backward_s:.1f}, optimizer {1000 * step.optimizer_s:.1f}), gradients "
            f"{step.gradient_bytes / 1e6:.2f} MB\n"
            f"- input pipeline: {input_rate} ({record.get('data_kind', '?')} data, "
            f"{record.get('loader_workers', '?')} loader workers: "
            f"{'beside the step' if step.input_overlaps else 'in the step, the rank loads its own batches'})")


def main(argv: list[str] | None = None) -> int:
    """python -m suite advise --cluster P [--nodes N] [--step FILE] [--scale S] [--no-probe] [--check-root DIR]"""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m suite advise", description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", required=True, help="a profile in slurm/clusters/ (or a path to a .toml)")
    ap.add_argument("--nodes", type=int, default=None, help="the nodes (default: those sinfo lists as answering)")
    ap.add_argument("--step", type=Path, default=None, help="a step timed by python -m tools step-split on one of "
                    "the cluster's workers (default: timed here at the scale)")
    ap.add_argument("--scale", default="local", help="the scale whose experiment-3 step is timed here")
    ap.add_argument("--no-probe", action="store_true", help="never run the link probes; say how to make a fit")
    ap.add_argument("--check-root", type=Path, default=advisor.CHECK_ROOT, help="where cluster-check folders are")
    args = ap.parse_args(argv)
    try:
        table = advise_cluster(args.cluster, args.nodes, args.step, args.scale, not args.no_probe, args.check_root)
    except (AdviseError, OSError, KeyError, ValueError) as e:
        print(f"error: advise --cluster {args.cluster}: {e}", file=sys.stderr)
        return 2
    print(table, end="")
    return 0
