"""Cluster profiles (`slurm/clusters/<name>.toml`) and the sbatch command line a study run is submitted with.

    profile = load_profile("taito")
    argv = sbatch_argv(profile, "experiments/05_linear_scaling/slurm.sbatch", nodes=2, tasks_per_node=4,
                       gpus_per_node=4, job_name="05-w8-s0", time_limit=None, output="results/slurm/%x.%j.out",
                       env={"BACKEND": "horovod", "PYTHON": "/abs/venv/bin/python"},
                       train_args=["experiments/05_linear_scaling/config.toml", "--run", "w8-s0", "--scale", "thesis"])
    Clients.of(profile).submit(argv)   # slurm/client.py: the one door of Slurm clients; or print(shlex.join(argv))

A profile says how one cluster is used (docs/cluster.md is the guide to writing one; slurm/job.sh receives it as
the environment variables of `profile_env`). String values may name environment variables, `${VAR}` or
`${VAR:-default}`, expanded on the submitting machine, except `description` and `scratch` (resolved on the compute
node, where `$TMPDIR` is the job's own); a whole-number key may be such a string if it expands to a whole number.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from slurm.client import configless_error

CLUSTERS_DIR = Path(__file__).resolve().parent / "clusters"


class ProfileError(ValueError):
    """A profile that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Profile:
    name: str
    description: str = ""
    partition: str = ""                 # "" = the cluster's default partition
    account: str = ""                   # --account: the project the GPU hours are billed to; "" = the user's default
    qos: str = ""                       # --qos: a quality of service (e.g. a debug QoS for smoke runs); "" = default
    constraint: str = ""                # --constraint: node features (e.g. "v100|a100"); "" = any node
    gpus_per_node: int = 0              # GPUs a node has (0 = CPU-only cluster); may be "${GPUS_PER_NODE:-4}"
    gres_template: str = ""             # "gpu:p100:{n}", "gpu:{n}", "" = no --gres
    cpus_per_task: int = 0              # 0 = cpus_per_node over a node's ranks where known, else leave to Slurm
    cpus_per_node: int = 0              # the nodes' CPUs, when known: cpus_per_task = 0 is derived from it
    ranks_per_node: int = 0             # a CPU cluster (gpus_per_node = 0): at most this many ranks a node; 0 = one node
    mem: str = ""                       # --mem per node, e.g. "60G"; "" = leave to Slurm
    exclusive_full_node: bool = False   # a run using every GPU of a node gets --exclusive --mem=0 (the thesis)
    exclusive: bool = False             # every run gets the whole node: --exclusive --mem=0 (one machine, all its GPUs)
    exclusive_throughput: bool = True   # a throughput study's jobs get whole nodes (--exclusive); false where the
                                        # site's partitions refuse it: they then run one at a time (studies/slurm.py)
    gpus_per_node_option: bool = False  # ask for GPUs with --gpus-per-node=N (Slurm's GPU options) instead of --gres
    time_limit: str = ""                # default -t when the run gives none
    modules: tuple[str, ...] = ()       # `module load` these (each entry may hold several, space-separated)
    scratch: str = "$TMPDIR"            # node-local folder; "$VAR" is read on the node
    stage_data: str = ""                # tar to extract into scratch once per node; "" = none
    data_subdir: str = ""               # the dataset's folder inside the tar
    extra_sbatch: tuple[str, ...] = ()  # any other sbatch options, verbatim (e.g. "--reservation=${SLURM_RESERVATION}")
    signal: str = "USR1@120"            # sent to the batch shell that long before the time limit; "" = none
    requeue: bool = True                # preempted runs requeue themselves (and sbatch gets --requeue)
    mpi_launcher: str = "mpirun"        # how Horovod ranks start: "mpirun" | "srun"
    srun_mpi: str = "pmix"              # srun --mpi=... when mpi_launcher = "srun"
    mpi_args: tuple[str, ...] = ()      # extra mpirun arguments, e.g. "--oversubscribe"
    mpi_allow_root: bool = False        # add --allow-run-as-root when the job runs as root (test containers)
    max_restarts: int = 50              # a run stops requeueing itself after this many restarts
    shared_machine: bool = False        # the nodes are hosts on one machine (slurm/local_cluster.py): a throughput
                                        # study's jobs run one after another, each rank with a local run's threads
    configless: str = ""                # a site without slurm.conf: "dns-srv" (its DNS SRV records) or the
                                        # --conf-server HOST:PORT its daemons fetch it from (slurm/client.py)

    def gres(self, gpus: int) -> str:
        """The --gres value for `gpus` GPUs on a node, or "" when none is needed."""
        if not self.gres_template or gpus <= 0:
            return ""
        return self.gres_template.format(n=gpus)


_FIELDS = {f.name: f for f in dataclasses.fields(Profile)}
_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")


def expand(value: str, environ: Mapping[str, str] | None = None) -> str:
    """Expand `${VAR}`, `${VAR:-default}` and `$VAR` from the environment (unset -> "" or the default)."""
    env = os.environ if environ is None else environ

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        got = env.get(name, "")
        return got if got else (m.group(2) or "")

    return _VAR.sub(sub, value)


def _check_type(name: str, key: str, value):
    want = _FIELDS[key].type
    if want == "int" and isinstance(value, str) and "$" in value:
        return  # read from the environment: checked once expanded (load_profile)
    if want == "str":
        ok = isinstance(value, str)
    elif want == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and value < 0:  # a negative gpus_per_node would drop --gres from every job, max_restarts never requeue
            raise ProfileError(f"cluster profile {name}: {key} = {value!r} must be a whole number >= 0")
    elif want == "bool":
        ok = isinstance(value, bool)
    else:  # tuple[str, ...]
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if not ok:
        want = {"tuple[str, ...]": "a list of strings", "int": 'int (or a "${VAR:-default}" string)'}.get(want, want)
        raise ProfileError(f"cluster profile {name!r}: {key} must be {want}, got {value!r}")


def load_profile(name: str, environ: Mapping[str, str] | None = None) -> Profile:
    """Read slurm/clusters/<name>.toml (or a path to a .toml) into a Profile; ProfileError (one line) if invalid."""
    path = Path(name) if name.endswith(".toml") else CLUSTERS_DIR / f"{name}.toml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in CLUSTERS_DIR.glob("*.toml")))
        raise ProfileError(f"unknown cluster profile {name!r} (known: {known})")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"cluster profile {path.name}: {e}") from None
    values: dict = {"name": path.stem}
    for key, value in raw.items():
        if key not in _FIELDS or key == "name":
            raise ProfileError(f"cluster profile {path.name}: unknown key {key!r} "
                               f"(known: {', '.join(k for k in _FIELDS if k != 'name')})")
        _check_type(path.name, key, value)
        if _FIELDS[key].type == "int" and isinstance(value, str):  # "${VAR:-default}": must expand to a whole number
            raw, value = value, expand(value, environ).strip()
            if not value.isdigit():
                raise ProfileError(f"cluster profile {path.name}: {key} = {raw!r} is {value!r}, not a whole number "
                                   f"(set the variable it names to one)")
            value = int(value)
        elif isinstance(value, str) and key not in ("scratch", "description"):
            value = expand(value, environ)
        elif isinstance(value, list):
            value = tuple(x for x in (expand(v, environ).strip() for v in value) if x)
        values[key] = value
    prof = Profile(**values)
    if prof.mpi_launcher not in ("mpirun", "srun"):
        raise ProfileError(f"cluster profile {path.name}: mpi_launcher must be 'mpirun' or 'srun', "
                           f"got {prof.mpi_launcher!r}")
    if prof.gres_template and "{n}" not in prof.gres_template:
        raise ProfileError(f"cluster profile {path.name}: gres_template needs '{{n}}', got {prof.gres_template!r}")
    if configless_error(prof.configless):
        raise ProfileError(f"cluster profile {path.name}: {configless_error(prof.configless)}")
    if prof.signal and not SIGNAL.match(prof.signal):
        raise ProfileError(f"cluster profile {path.name}: signal = {prof.signal!r} is not Slurm's SIGNAL[@SECONDS] "
                           "(e.g. \"USR1@120\"), or \"\" for none")
    if prof.signal and signal_name(prof.signal) not in FORWARDED:
        raise ProfileError(f"cluster profile {path.name}: signal = {prof.signal!r} is not one slurm/job.sh catches "
                           f"and forwards to the trainer (USR1 or TERM; KILL and STOP cannot be caught, so no "
                           f"checkpoint would be written before the limit): use \"USR1@120\", or \"\" for none")
    return prof


# the signals slurm/job.sh traps and forwards (the trainer checkpoints on them), by name and by Linux number
FORWARDED = {"USR1", "TERM", "10", "15"}


def signal_name(signal: str) -> str:
    """A --signal value's signal, without SIG and the @seconds: "SIGUSR1@120" -> "USR1"."""
    return signal.partition("@")[0].removeprefix("SIG")


# Slurm's --signal: a signal's name or number, then optionally @ and the seconds before the time limit
SIGNAL = re.compile(r"^(?:SIG)?(?:[A-Z][A-Z0-9]*|\d+)(?:@\d+)?$")


def profile_env(profile: Profile) -> dict[str, str]:
    """The variables slurm/job.sh reads, as this profile sets them."""
    env: dict[str, str] = {
        "MPI_LAUNCHER": profile.mpi_launcher,
        "SRUN_MPI": profile.srun_mpi,
        "REQUEUE": "1" if profile.requeue else "0",
        "MAX_RESTARTS": str(profile.max_restarts),
    }
    if profile.modules:
        env["MODULES"] = " ".join(profile.modules)
    scratch = profile.scratch.strip()
    m = re.fullmatch(r"\$\{?(\w+)\}?", scratch)
    if m:
        env["SCRATCH_VAR"] = m.group(1)       # resolved on the node: SCRATCH=${!SCRATCH_VAR}
    elif scratch:
        env["SCRATCH"] = scratch
    if profile.stage_data:
        env["DATA_TAR"] = profile.stage_data
        if profile.data_subdir:
            env["DATA_SUBDIR"] = profile.data_subdir
    if profile.mpi_args:
        env["MPI_ARGS"] = " ".join(profile.mpi_args)
    if profile.mpi_allow_root:
        env["MPI_ALLOW_ROOT"] = "1"
    return env


def limit_seconds(limit: str) -> int:
    """Seconds of a Slurm time limit: "M", "M:S", "H:M:S", "D-H", "D-H:M" or "D-H:M:S" (sbatch's forms)."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", limit.strip())
    if not m:
        raise ProfileError(f"time limit {limit!r} is not one of Slurm's forms (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)")
    days, *rest = m.groups()
    parts = [int(x) for x in rest if x is not None]
    if days is not None:  # D-H[:M[:S]]
        h, mi, sec = parts + [0] * (3 - len(parts))
        return int(days) * 86400 + h * 3600 + mi * 60 + sec
    units = {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}[len(parts)]
    return sum(x * u for x, u in zip(parts, units))


def job_signal(signal: str, limit: str) -> str:
    """The profile's warning signal, at most a quarter of a short job's time before its end: a 15-minute smoke run
    warned 10 minutes before it would checkpoint and requeue itself after 5."""
    name, _, lead = signal.partition("@")
    if not limit or not lead.isdigit() or limit.strip().upper() in ("UNLIMITED", "INFINITE", "-1"):
        return signal
    return f"{name}@{min(int(lead), limit_seconds(limit) // 4)}"


def sbatch_argv(profile: Profile, script: str | os.PathLike, nodes: int, tasks_per_node: int, gpus_per_node: int,
                job_name: str, time_limit: str | None, output: str | os.PathLike,
                env: Mapping[str, str] | None = None, train_args: Sequence[str] = ()) -> list[str]:
    """The exact `sbatch ...` command for one run.

    env: variables for the job on top of the profile's (BACKEND, PYTHON, TRAIN_ARGS, ...), passed with
    --export=ALL,VAR=value (explicit values win over the submitting shell's). Values must not contain commas or
    newlines (sbatch splits --export at commas): pass the trainer's arguments as `train_args` instead, which go
    after the script and reach it as "$@" unchanged, requeues included."""
    if nodes < 1 or tasks_per_node < 1:
        raise ProfileError(f"nodes and tasks_per_node must be >= 1, got {nodes} and {tasks_per_node}")
    if profile.gpus_per_node and gpus_per_node > profile.gpus_per_node:
        raise ProfileError(f"cluster profile {profile.name!r} has {profile.gpus_per_node} GPUs a node; "
                           f"asked for {gpus_per_node}")
    argv = ["sbatch", "-N", str(nodes), "--ntasks-per-node", str(tasks_per_node)]
    if profile.partition:
        argv += ["-p", profile.partition]
    argv += [f"--{option}={value}" for option, value in
             (("account", profile.account), ("qos", profile.qos), ("constraint", profile.constraint)) if value]
    if profile.cpus_per_task:
        argv += ["--cpus-per-task", str(profile.cpus_per_task)]
    gres = profile.gres(gpus_per_node)
    if profile.gpus_per_node_option and gpus_per_node > 0:
        argv.append(f"--gpus-per-node={gpus_per_node}")
    elif gres:
        argv.append(f"--gres={gres}")
    if profile.exclusive or (profile.exclusive_full_node and profile.gpus_per_node
                             and gpus_per_node == profile.gpus_per_node):
        argv += ["--exclusive", "--mem=0"]        # whole node, all its memory (the thesis's 4-GPU scripts)
    elif profile.mem:
        argv.append(f"--mem={profile.mem}")
    limit = str(time_limit or profile.time_limit)
    if limit:
        argv += ["-t", limit]
    signal = job_signal(profile.signal, limit) if profile.signal else ""
    if signal:
        argv.append(f"--signal=B:{signal}")   # B: to the batch shell, which forwards it (slurm/job.sh)
    if profile.requeue:
        argv += ["--requeue", "--open-mode=append"]     # a restarted job appends to the same log
    argv += ["-J", job_name, "-o", str(output)]
    argv += list(profile.extra_sbatch)
    # The rendezvous is derived on the nodes (slurm/job.sh: the allocation's first host, a port from the job id),
    # never inherited: a MASTER_ADDR or MASTER_PORT left in the submitting shell (a login node's, an earlier run's)
    # would send every job to one address and port. --export=ALL would carry them, so they go in empty.
    # JOB_SIGNAL: the signal again, for a successor job (scontrol does not show --signal)
    merged = {"MASTER_ADDR": "", "MASTER_PORT": "", **profile_env(profile),
              **({"JOB_SIGNAL": f"B:{signal}"} if signal else {}), **(env or {})}
    for k, v in merged.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", k):
            raise ProfileError(f"bad environment variable name {k!r}")
        if "," in str(v) or "\n" in str(v):
            raise ProfileError(f"{k}={v!r}: sbatch --export cannot carry commas or newlines; "
                               f"pass trainer arguments as train_args")
    argv.append("--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in merged.items())]))
    argv.append(str(script))
    argv += [str(a) for a in train_args]
    return argv
