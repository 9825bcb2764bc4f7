"""The one door every Slurm client the suite starts goes through (sbatch, squeue, sinfo, sacct, scancel, scontrol).

    clients = Clients.of(profile)     # a cluster's clients; nothing is checked or started yet
    clients.check()                   # before anything is written: NoConfiguration (one line) without a config
    r = clients.run(["sinfo", "-h"], capture_output=True, text=True, timeout=60)
    job = clients.submit(argv).job    # sbatch's job id, or None: its exit code or its output said it failed

Why a door: a Slurm client that finds no slurm.conf it can read (SLURM_CONF unset, none at /etc/slurm/slurm.conf)
looks its controller up in DNS (the _slurmctld._tcp SRV records of configless Slurm). Off a cluster that is a name
lookup nobody asked for, and the client fails after it anyway. So no client starts without a configuration it can
read, unless the cluster's profile declares the site configless (`configless`: DNS SRV records, or the
--conf-server that the site's slurmd / sackd fetch it from); then the suite says once which it relies on.

The trainer's two calls inside a job (trainers/rendezvous.py's `scontrol show hostnames`, trainers/setup.py's
`scancel --batch`) and slurm/job.sh's srun do not come here: they run inside an allocation, on a node whose slurmd
has a configuration, and the trainer's floor cannot import this one (docs/architecture.md).
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

# where Slurm's clients look when SLURM_CONF is unset (Debian's and most sites' builds)
DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
DNS_SRV = "dns-srv"  # a profile's `configless`: the clients find the controller by the site's DNS SRV records
# a profile's other `configless` form: the --conf-server list the site's daemons fetch the configuration from, each
# with its port (slurmctld's, usually 6817), so that a word ("yes", "DNS-SRV") is never taken for a host name
CONF_SERVER = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*:\d{1,5}(?:,[A-Za-z0-9][A-Za-z0-9.-]*:\d{1,5})*")


class NoConfiguration(ValueError):
    """No Slurm configuration this machine can read, and no configless site declared; the message is one line."""


def configless_error(value: str) -> str:
    """Why a profile's `configless` value is none of its forms ("" where it is one)."""
    if value in ("", DNS_SRV):
        return ""
    if CONF_SERVER.fullmatch(value) and all(0 < int(p.partition(":")[2]) <= 65535 for p in value.split(",")):
        return ""
    return (f"configless = {value!r} is neither {DNS_SRV!r} (the site's _slurmctld._tcp DNS SRV records) nor the "
            "--conf-server list HOST:PORT[,HOST:PORT] (\"\": the site has a slurm.conf)")


def relies_on(configless: str) -> str:
    """The one line a configless site's command says before its first client starts."""
    how = ("DNS SRV records (_slurmctld._tcp) name the controller" if configless == DNS_SRV else
           f"the site's slurmd / sackd fetch the configuration from the --conf-server {configless}")
    return (f"slurm: no slurm.conf here (SLURM_CONF unset, {DEFAULT_CONF} unreadable); relying on the profile's "
            f"configless site: {how}")


def readable(path: Path) -> bool:
    try:
        with open(path, "rb"):
            return path.is_file()
    except OSError:
        return False


def configuration(configless: str = "", environ: Mapping[str, str] | None = None) -> str | None:
    """The slurm.conf Slurm's clients will read, or None where the profile declares the site configless; the check
    every client start goes through (Clients.run). NoConfiguration, one line saying what to do, where neither."""
    env = os.environ if environ is None else environ
    named = env.get("SLURM_CONF", "")
    if named:  # the clients read this file or nothing: a configless site does not make a wrong SLURM_CONF right
        if readable(Path(named)):
            return named
        raise NoConfiguration(f"SLURM_CONF={named} is not a file this user can read, so no Slurm client is started: "
                              f"point SLURM_CONF at the cluster's slurm.conf (the local cluster's: `make cluster` "
                              f"prints it)")
    if readable(DEFAULT_CONF):
        return str(DEFAULT_CONF)
    if configless:
        return None
    raise NoConfiguration(f"no Slurm configuration here (SLURM_CONF is unset and {DEFAULT_CONF} cannot be read), so "
                          f"no Slurm client is started (it would look the controller up in DNS): set SLURM_CONF to "
                          f"the cluster's slurm.conf, or `make cluster` for the local cluster (CLUSTER=local then "
                          f"finds it); a configless site says so in its profile (configless, docs/cluster.md)")


@dataclass(frozen=True)
class Submission:
    """What one sbatch call came to: its job id, or None where it failed (its exit code, or no job id printed)."""
    job: str | None
    returncode: int
    said: str  # sbatch's last line (its error where it failed)


@dataclass
class Clients:
    """A cluster's Slurm clients: each start checked against configuration() first."""
    configless: str = ""
    env: Mapping[str, str] | None = None  # the clients' whole environment (None: this process's)
    said: bool = field(default=False, repr=False)  # the configless line is said once a command

    @classmethod
    def of(cls, profile, env: Mapping[str, str] | None = None) -> Clients:
        return cls(getattr(profile, "configless", ""), env)

    def check(self) -> None:
        """NoConfiguration before anything is done where no client could start; a configless site's source said."""
        if configuration(self.configless, self.env) is None and not self.said:
            print(relies_on(self.configless), flush=True)
        self.said = True

    def run(self, argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
        """Start one client (subprocess.run's keywords), only where check() passes."""
        self.check()
        return subprocess.run(list(argv), env=None if self.env is None else dict(self.env), **kw)

    def submit(self, argv: Sequence[str], **kw) -> Submission:
        """`sbatch --parsable ARGV[1:]`: counted as submitted only where sbatch exits 0 and prints a job id."""
        argv = [argv[0], "--parsable", *(a for a in argv[1:] if a != "--parsable")]
        r = self.run(argv, capture_output=True, text=True, **kw)
        m = re.fullmatch(r"(\d+)(?:;\S+)?", r.stdout.strip())  # "123" or "123;cluster"
        said = ((r.stderr or "").strip() or (r.stdout or "").strip() or "no message").splitlines()[-1]
        return Submission(m.group(1) if m and r.returncode == 0 else None, r.returncode, said)
