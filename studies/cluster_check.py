"""`make cluster-check CLUSTER=P`: the path a study takes on a cluster, checked layer by layer in a few minutes, one
table of passes and failures that names the failing layer.

    python -m tools cluster-check --cluster P [--scale S] [--nodes N] [--out DIR] [--layers L ...]

Each layer but `nodes` is one short job, submitted with the profile as a study's runs are (slurm/job.sh), one after
another; a failed layer does not stop the others, so one run names every broken layer, except where nodes or
placement fail: no job waits for nodes that are not there, and none runs with the wrong threads (gated). What each layer checks:
slurm/README.md. Each rank writes what it saw (tools/cluster_probe.py); this module reads it and decides. The table
goes to DIR/<profile>-<time>/cluster_check.md beside every job's log.
"""
from __future__ import annotations

import json
import shlex
import sys
import tarfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from contract import placement
from contract.config import ConfigError, load_config
from contract.placement import cpus_per_task_for
from contract.reader import read_manifest, read_metrics
from contract.runfiles import read_run_file, run_file_exists
from contract.runfolder import CHECKPOINT, LOG, METRICS, link_bits_per_s
from slurm.client import Clients, NoConfiguration
from slurm.profiles import Profile, ProfileError, load_profile, sbatch_argv
from studies.launch import REPO

# placement right after nodes: every later layer's ranks take their threads by its rule, so where it fails their
# timings and verdicts would be the misplacement's (gated)
LAYERS = ("nodes", "placement", "hosts", "staging", "ddp", "horovod", "link-intra", "link-inter", "train")
PLACEMENT_FAILED = "not run: placement failed (its row says the fix)"
JOB_MINUTES = 5  # each layer's time limit: a layer that needs longer is itself a finding
TRAIN_STEPS = 6  # the train layer's steps; the preemption is rehearsed after half of them
STAGED_MARKER = "cluster-check.txt"  # the one file in the tar the staging layer stages
CHECK_OUT = Path("results/cluster_check")
LINK_RANKS = 2  # a link probe's ranks: 2 on one host (link-intra), 1 on each of 2 hosts (link-inter)
LINK_BUDGET_S = 20  # the seconds a link probe's all_reduces may take (each job's start-up comes on top)


@dataclass
class Finding:
    layer: str
    ok: bool | None  # None: not run (a layer below it failed)
    detail: str


def run_check(cluster: str, scale: str = "local", nodes: int = 2, out: Path = CHECK_OUT,
              timeout: float = 1800, layers: tuple[str, ...] = LAYERS, clients: Clients | None = None) -> int:
    """Check `layers` (default all) on `nodes` nodes of the cluster the profile `cluster` describes; 0 when all pass.
    The nodes layer is always checked: no job should wait for nodes that are not there. clients: a caller's own
    (make advise's), so a configless site is said once."""
    if nodes < 2:
        raise ConfigError(f"--nodes {nodes}: the check is of a path across nodes; give 2 or more")
    unknown = set(layers) - set(LAYERS)
    if unknown:
        raise ConfigError(f"no layer {', '.join(sorted(unknown))}; the layers: {', '.join(LAYERS)}")
    jobs_layers = [layer for layer in LAYERS[1:] if layer in layers]
    try:
        profile = load_profile(cluster)
        clients = clients or Clients.of(profile)
        clients.check()  # before the check's folder is made: no client starts without a configuration
    except (ProfileError, NoConfiguration) as e:
        raise ConfigError(str(e)) from None
    folder = (out / f"{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    folder.mkdir(parents=True)
    print(f"cluster-check of {profile.name} ({nodes} nodes, scale {scale}) in {folder}", flush=True)
    findings = [check_nodes(clients, nodes)]
    if findings[0].ok:
        def run(layers: list[str]) -> list[Finding]:
            states = wait(clients, submit_layers(clients, profile, scale, nodes, folder, layers), timeout)
            return [judge(layer, states.get(layer, "NOT SUBMITTED"), folder, nodes, profile.requeue)
                    for layer in layers]

        findings += gated(jobs_layers, run)
    else:
        findings += [Finding(layer, None, "not run: too few nodes answer") for layer in jobs_layers]
    annotate_link_fit(folder, profile)
    table = render(findings)
    (folder / "cluster_check.md").write_text(table)
    (folder / "cluster_check.json").write_text(json.dumps([f.__dict__ for f in findings], indent=1))
    print(table, end="")
    failed = [f.layer for f in findings if f.ok is False]
    print(f"cluster-check: {'all layers pass' if not failed else 'failing: ' + ', '.join(failed)}; "
          f"logs in {folder}")
    return 0 if all(f.ok for f in findings) else 1


def gated(layers: list[str], run) -> list[Finding]:
    """Each layer's finding, run(layers) submitting and judging their jobs. Where the placement layer is checked it
    runs first, alone, and where it fails the later layers' jobs are not submitted: their ranks would take the same
    wrong threads, and each row would fail with the placement's line instead of naming its own layer (issue 63:
    OMP_NUM_THREADS=8 failed every row so)."""
    if "placement" not in layers:
        return run(layers)
    rest = [layer for layer in layers if layer != "placement"]
    first = run(["placement"])
    if not first[0].ok:
        return first + [Finding(layer, None, PLACEMENT_FAILED) for layer in rest]
    return first + (run(rest) if rest else [])


def annotate_link_fit(folder: Path, profile: Profile) -> None:
    """link_fit.json (where the link layers wrote one) names its profile and, for nodes that are hosts on one
    machine, that machine's cores: the profile's shared_machine says so, or the probe found the ranks of its
    across-nodes link on one kernel (a site-like profile of the local cluster does not say)."""
    import os

    from analysis.advisor import model as advisor

    shared = (os.cpu_count() or 1) if profile.shared_machine else None
    fit = Path(folder) / advisor.LINK_FIT
    if shared is None and fit.exists():
        shared = json.loads(fit.read_text()).get("inter", {}).get("shared_cores")
    advisor.annotate_link_fit(folder, profile.name, shared)


# ---- the layers ----------------------------------------------------------------------------------------------
def check_nodes(clients: Clients, nodes: int) -> Finding:
    """Enough nodes that answer: idle, mixed or allocated (not down, drained or not responding: a '*')."""
    r = clients.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return Finding("nodes", False, f"sinfo failed: {r.stderr.strip()[:200]}")
    states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
    up = sorted(n for n, s in states.items() if s.rstrip("~#") in ("idle", "mixed", "allocated", "completing"))
    down = sorted(f"{n} {s}" for n, s in states.items() if n not in up)
    detail = f"{len(up)} of {len(states)} nodes answer" + (f" ({', '.join(down)})" if down else "")
    return Finding("nodes", len(up) >= nodes, detail + ("" if len(up) >= nodes else f"; {nodes} needed"))


def layer_job(layer: str, profile: Profile, scale: str, nodes: int, folder: Path) -> tuple[dict, list[str]]:
    """(the job's environment beyond the profile's, the arguments after the job script) for one layer."""
    python = sys.executable
    env = {"PYTHON": python, "HARNESS_DIR": str(REPO / "slurm"), "BACKEND": "ddp", "RESUME": "never",
           "TRAIN_CMD": f"{python} -m tools cluster-probe", "DATA_TAR": ""}  # staging only where it is checked
    args = [layer, "--dir", str(folder), "--marker", STAGED_MARKER]
    if layer == "staging":
        env.update(DATA_TAR=str(make_tar(folder)), DATA_SUBDIR="")
    elif layer == "horovod":
        env["BACKEND"] = "horovod"
    elif layer.startswith("link-"):
        args += ["--budget-s", str(LINK_BUDGET_S)]
    elif layer == "placement":
        args += ["--loader-workers", str(load_config(REPO / "experiments" / "05_linear_scaling" / "config.toml",
                                                     scale, need_data=False).data.loader_workers)]
    elif layer == "train":
        for key in ("TRAIN_CMD", "DATA_TAR", "RESUME"):  # the profile's staging and job.sh's resume, as a study's
            env.pop(key)
        if profile.requeue:
            env["TRAINERS_REHEARSE_PREEMPTION"] = str(TRAIN_STEPS // 2)
        args = [str(REPO / "experiments" / "05_linear_scaling" / "config.toml"), "--scale", scale,
                "--out", str(folder / "train"), "--run-name", "check", "--set", f"train.workers={nodes}",
                "--set", 'train.backend="ddp"', "--set", f"train.max_steps={TRAIN_STEPS}",
                "--set", "train.print_freq=1"]  # every step a point where the ranks agree to stop
    return env, args


def submit_layers(clients: Clients, profile: Profile, scale: str, nodes: int, folder: Path,
                  layers: list[str]) -> dict[str, int]:
    """Submit each layer's job, each after the one before (afterany: a failure does not stop the next)."""
    script, jobs, previous = REPO / "slurm" / "check.sbatch", {}, None
    for layer in layers:
        env, args = layer_job(layer, profile, scale, nodes, folder)
        job_nodes, per_node = layer_shape(layer, profile, nodes)
        cpus = profile.cpus_per_task or cpus_per_task_for(profile.cpus_per_node, per_node)
        argv = sbatch_argv(replace(profile, cpus_per_task=cpus), script, job_nodes, per_node,
                           min(per_node, profile.gpus_per_node), job_name=f"check-{layer}",
                           time_limit=str(JOB_MINUTES), output=folder / f"{layer}.out", env=env, train_args=args)
        if previous:
            argv[1:1] = [f"--dependency=afterany:{previous}"]
        (folder / f"{layer}.sbatch-line").write_text(shlex.join(argv) + "\n")
        got = clients.submit(argv, timeout=60, cwd=REPO)
        if not got.job:  # its row reads NOT SUBMITTED
            print(f"  {layer}: sbatch failed: {got.said[:300]}", flush=True)
            continue
        jobs[layer] = previous = int(got.job)
    return jobs


def layer_shape(layer: str, profile: Profile, nodes: int) -> tuple[int, int]:
    """(nodes, ranks a node) of a layer's job: the link probes' own shapes, the placement layer's ranks a node, else
    one rank on each of the check's nodes."""
    if layer == "link-intra":
        return 1, LINK_RANKS
    if layer == "link-inter":
        return LINK_RANKS, 1
    return nodes, ranks_a_node(profile) if layer == "placement" else 1


def ranks_a_node(profile: Profile) -> int:
    """The placement layer's ranks a node: a study's (one a GPU, or the CPU cluster's ranks_per_node), at least 2
    so that ranks sharing a node's CPUs or GPUs can show."""
    return max(2, profile.gpus_per_node or profile.ranks_per_node)


def make_tar(folder: Path) -> Path:
    """A small tar to stage: one file whose presence on every node the staging layer checks."""
    marker = folder / STAGED_MARKER
    marker.write_text("staged by cluster-check\n")
    tar = folder / "staging.tar"
    with tarfile.open(tar, "w") as t:
        t.add(marker, arcname=STAGED_MARKER)
    return tar


# ---- reading what the ranks saw ------------------------------------------------------------------------------
def job_state(clients: Clients, job: int) -> str | None:
    """The job's state (scontrol, or once purged the accounting/completion log); None when Slurm knows nothing."""
    r = clients.run(["scontrol", "show", "job", "-o", str(job)], capture_output=True, text=True, timeout=60)
    for token in r.stdout.split():
        if token.startswith("JobState="):
            return token.split("=", 1)[1]
    r = clients.run(["sacct", "-n", "-P", "-X", "-j", str(job), "-o", "state"], capture_output=True, text=True,
                    timeout=60)
    states = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    return states[-1] if states else None


FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def wait(clients: Clients, jobs: dict[str, int], timeout: float) -> dict[str, str]:
    """Every layer's final job state; a line as each ends. Jobs still unfinished at `timeout` are cancelled."""
    deadline, states, pending = time.monotonic() + timeout, {}, {}
    while len(states) < len(jobs) and time.monotonic() < deadline:
        for layer, job in jobs.items():
            state = None if layer in states else job_state(clients, job)
            pending[job] = (pending.get(job) or time.monotonic()) if state == "PENDING" else None
            if pending[job] and time.monotonic() - pending[job] > 5:
                start_requeued(clients, job)
            if state and state.split()[0] in FINAL:
                states[layer] = state.split()[0]
                print(f"  {layer}: job {job} {states[layer]}", flush=True)
        time.sleep(1)
    for layer, job in jobs.items():
        if layer not in states:
            clients.run(["scancel", str(job)], capture_output=True, timeout=60)
            states[layer] = f"still {job_state(clients, job) or 'unknown'} after {timeout:.0f} s (cancelled)"
    return states


def start_requeued(clients: Clients, job: int) -> None:
    """Slurm holds a requeued job back 120 s (Reason=BeginTime); the check has minutes, so it is let start now
    (wait() calls this 5 s after the job went back to pending: slurmd refuses a restart whose credential is not
    newer than the last attempt's, to the second)."""
    r = clients.run(["scontrol", "show", "job", "-o", str(job)], capture_output=True, text=True, timeout=60)
    info = dict(token.split("=", 1) for token in r.stdout.split() if "=" in token)
    if info.get("Reason") != "BeginTime" or int(info.get("Restarts", "0")) == 0:
        return
    clients.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], capture_output=True, timeout=60)


def judge(layer: str, state: str, folder: Path, nodes: int, requeues: bool = True) -> Finding:
    """Pass or fail, and the one detail a user needs, from the job's state and what each rank wrote."""
    if layer == "train":
        return judge_train(state, folder / "train" / "05_linear_scaling" / "check", nodes, requeues)
    ranks = [json.loads(p.read_text()) for p in sorted((folder / layer).glob("rank*.json"))]
    failed = [r for r in ranks if not r.get("ok")]
    if failed:
        r = failed[0]
        return Finding(layer, False, f"rank {r['rank']} on {r['host']}: {r['error']}")
    if layer.startswith("link-"):
        nodes = LINK_RANKS
    if len(ranks) < nodes:
        return Finding(layer, False, f"job {state}; {len(ranks)} of {nodes} ranks reported: {log_tail(folder, layer)}")
    misplaced = placement.problems([r["placement"] for r in ranks if "placement" in r])
    if misplaced:
        return Finding(layer, False, first_of(misplaced))
    if layer.startswith("link-"):
        return judge_link(layer, ranks, folder)
    return {"hosts": judge_hosts, "staging": judge_staging, "ddp": judge_collective, "horovod": judge_collective,
            "placement": judge_placement}[layer](layer, ranks, nodes)


def first_of(problems: list[str]) -> str:
    """A row names the first problem and counts the rest (each rank's file holds its own placement)."""
    return problems[0] + (f" (and {len(problems) - 1} more problem(s) of the same job)" if len(problems) > 1 else "")


def judge_placement(layer: str, ranks: list[dict], nodes: int) -> Finding:
    """Every rank placed without a problem (judge checked): say what each got, once where they all got the same."""
    seen = [r["placement"] for r in ranks]
    said = [f"{p['cpus']} CPU(s), {p['threads']} thread(s), {p['loader_workers']} loader worker(s)" for p in seen]
    each = (f"{said[0]} a rank ({seen[0]['threads_from']})" if len(set(said)) == 1
            else "; ".join(f"rank {r}: {s}" for r, s in enumerate(said)))
    gpus = f", GPU {', '.join(str(p['gpu_index']) for p in seen)}" if "gpu_index" in seen[0] else ""
    return Finding(layer, True, f"{len(seen)} ranks on {len({p['host'] for p in seen})} hosts: {each}{gpus}")


def judge_hosts(layer: str, ranks: list[dict], nodes: int) -> Finding:
    hosts = sorted({r["host"] for r in ranks})
    if len(hosts) < nodes:
        return Finding(layer, False, f"{nodes} tasks ran on {len(hosts)} host(s): {', '.join(hosts)}")
    for r in ranks:
        if not r["own_address"] or r["own_address"].startswith("127."):
            return Finding(layer, False, f"{r['host']} resolves its own name to {r['own_address'] or 'nothing'}: "
                                         f"ranks there would advertise it; fix its /etc/hosts or DNS")
        if not r["master_address"] or r["master_address"].startswith("127."):
            return Finding(layer, False, f"on {r['host']} the rendezvous host {r['master']} resolves to "
                                         f"{r['master_address'] or 'nothing'}")
    return Finding(layer, True, "; ".join(f"{r['host']} {r['own_address']}" for r in ranks))


def judge_staging(layer: str, ranks: list[dict], nodes: int) -> Finding:
    missing = [r["host"] for r in ranks if not r["staged"]]
    where = Path(ranks[0]["path"]).parent
    source = ranks[0].get("scratch_from", "")
    scratch = f"{where} ({source})" if source.startswith("no ") else str(where)  # the /tmp fallback is said
    if missing:
        return Finding(layer, False, f"not staged on {', '.join(missing)} into {scratch}")
    return Finding(layer, True, f"staged on {nodes} nodes into {scratch}, and removed")


def judge_collective(layer: str, ranks: list[dict], nodes: int) -> Finding:
    wrong = [r["host"] for r in ranks if not r["correct"]]
    if wrong:
        return Finding(layer, False, f"wrong allreduce result on {', '.join(wrong)}")
    bandwidth, link = ranks[0].get("bus_gbit_s"), ranks[0].get("link")
    extra = f"; all_reduce bus bandwidth {bandwidth:.2f} Gbit/s" if bandwidth else ""
    if bandwidth and link:
        extra += f" = {bandwidth * 1e9 / link_bits_per_s(link):.2f} of the {link} link"
    via = f" over {ranks[0]['interface']}" if ranks[0].get("interface") else ""
    return Finding(layer, True, f"{len(ranks)} ranks on {len({r['host'] for r in ranks})} hosts{via}{extra}")


def judge_link(layer: str, ranks: list[dict], folder: Path) -> Finding:
    """The link's latency and bandwidth fitted to rank 0's points (every rank holds the slowest rank's times),
    written to folder/link_fit.json for the advisor; fails where the ranks did not sit as the layer needs or the
    times do not grow with the size."""
    from analysis.advisor import model as advisor

    r = ranks[0]
    hosts = len(set(r["hosts"]))
    wanted = 1 if layer == "link-intra" else LINK_RANKS
    if hosts != wanted:
        return Finding(layer, False, f"{r['ranks']} ranks on {hosts} host(s), {wanted} needed: the job was not "
                                     f"placed as the layer needs (see {layer}.sbatch-line)")
    try:
        record = advisor.link_record(r["points"], r["ranks"], r["hosts"], r.get("link"), r.get("device", "cpu"),
                                     r.get("cpu_model"), r.get("shared_cores"))
    except ValueError as e:
        return Finding(layer, False, f"{e} ({len(r['points'])} sizes timed)")
    advisor.write_link_fit(folder, layer.removeprefix("link-"), record)
    return Finding(layer, True, advisor.describe_link_record(record))


def judge_train(state: str, run_dir: Path, nodes: int, requeues: bool = True) -> Finding:
    manifest = read_manifest(run_dir)
    if manifest is None:
        return Finding("train", False, f"job {state}; no manifest in {run_dir} "
                                       f"({log_tail(run_dir.parents[2], 'train')})")
    hosts = manifest.get("hosts") or []
    misplaced = placement.problems(manifest.get("placement") or [])
    if misplaced:
        return Finding("train", False, first_of(misplaced))
    if manifest.get("status") != "completed" or not (run_dir / CHECKPOINT).exists():
        message = f"job {state}; run {manifest.get('status')}: {manifest.get('message', '')}"
        return Finding("train", False, message[:300])
    if len(set(hosts)) < nodes:
        return Finding("train", False, f"ranks on {len(set(hosts))} host(s), {nodes} asked for: {hosts}")
    steps = f"{TRAIN_STEPS} steps on {', '.join(hosts)}, checkpoint written"
    if not requeues:
        return Finding("train", True, steps + "; requeue-resume not checked (the profile does not requeue)")
    return judge_resume(run_dir, manifest, steps)


def judge_resume(run_dir: Path, manifest: dict, steps: str) -> Finding:
    """The rehearsed preemption: the first attempt checkpointed and stopped, the job requeued itself, the second
    attempt resumed from that checkpoint and ended the run."""
    statuses = [r["status"] for r in read_metrics(run_dir / METRICS).of("status")]
    attempts = len(manifest.get("attempts") or [])
    log = read_run_file(run_dir / LOG).decode(errors="replace") if run_file_exists(run_dir / LOG) else ""
    resumed = [line for line in log.splitlines() if line.startswith("=> resumed from the checkpoint")]
    if "preempted" not in statuses:
        return Finding("train", False, f"{steps}, but never preempted: the warning signal did not reach the ranks "
                                       "(job.sh's trap, the launcher's forwarding); see train.out")
    if attempts != 2 or not resumed:
        return Finding("train", False, f"{steps}; preempted, but {attempts} attempt(s) and "
                                       f"{'no resume' if not resumed else resumed[0]}: the job did not requeue "
                                       "itself or its restart did not resume (see train.out)")
    where = resumed[0].removeprefix("=> resumed from the checkpoint ").split(";")[0]
    return Finding("train", True, f"{steps}; preempted after {TRAIN_STEPS // 2}, requeued, resumed {where}")


# Launchers' refusals whose words name no error, and the fix each needs (quoted in the row, not left in the log)
LAUNCHER_CAUSES = (
    ("attempt to run as root", "mpirun refuses to run as root: set mpi_allow_root = true in the profile"),
    ("not enough slots available", "mpirun found too few slots: add \"--oversubscribe\" to the profile's mpi_args "
                                   "or give the job more CPUs"),
    ("invalid partition", "Slurm has no such partition: set the profile's partition (sinfo lists them)"),
)


def log_tail(folder: Path, layer: str) -> str:
    """Why a layer failed before its ranks could say: a launcher's known refusal with its fix, else the last line
    of its job log that says error, else its last line."""
    try:
        lines = [x.strip() for x in (folder / f"{layer}.out").read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "no job log"
    for words, cause in LAUNCHER_CAUSES:
        quoted = [x for x in lines if words in x.lower()]
        if quoted:
            return f"{cause} (log: {quoted[0][:160]})"
    errors = [x for x in lines if "error" in x.lower()]
    return ((errors or lines or ["empty job log"])[-1])[:200]


def render(findings: list[Finding]) -> str:
    result = {True: "pass", False: "FAIL", None: "not run"}
    rows = [f"| {f.layer} | {result[f.ok]} | {f.detail.replace('|', '/')} |" for f in findings]
    return "| layer | result | detail |\n|---|---|---|\n" + "\n".join(rows) + "\n"
