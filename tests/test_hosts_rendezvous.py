"""Across hosts, without a cluster: the rendezvous interface derived on each node, the one-line errors of a name
that resolves to loopback or not at all, the private /24 the local cluster picks, and how a study is submitted to
nodes that share one machine (tests/test_slurm_hosts.py runs all of it on real namespace hosts)."""
import dataclasses
import ipaddress
import os
import re

import pytest

from contract.config import ConfigError
from trainers import launch as launch_module
from trainers.backends import Launch, bind_gloo_towards
from trainers.launch import Route, interface_towards

TWO_HOSTS = Launch("slurm", rank=1, world_size=2, local_rank=0, master_addr="n1", master_port=10010,
                   local_world_size=1)


@pytest.fixture
def no_gloo_ifname(monkeypatch):
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)


def test_loopback_is_its_own_interface():
    assert interface_towards("127.0.0.1") == Route("127.0.0.1", "127.0.0.1", "lo")


def test_one_host_leaves_gloo_alone(monkeypatch, no_gloo_ifname):
    monkeypatch.setattr(launch_module, "interface_towards", lambda addr: pytest.fail("no lookup on one host"))
    bind_gloo_towards("127.0.0.1", TWO_HOSTS)  # torchrun "nodes" on localhost
    bind_gloo_towards("n1", Launch("slurm", 0, 2, 0, "n1", 1, local_world_size=2))  # every rank on this node
    assert "GLOO_SOCKET_IFNAME" not in os.environ


def test_across_hosts_gloo_binds_the_interface_that_reaches_the_rendezvous(monkeypatch, no_gloo_ifname):
    monkeypatch.setattr(launch_module, "interface_towards", lambda addr: Route("10.213.0.2", "10.213.0.3", "eth0"))
    bind_gloo_towards("n1", TWO_HOSTS)
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth0"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "ib0")  # the user's own choice wins
    bind_gloo_towards("n1", TWO_HOSTS)
    assert os.environ["GLOO_SOCKET_IFNAME"] == "ib0"


def test_a_rendezvous_name_on_loopback_or_unresolved_is_one_line(monkeypatch, no_gloo_ifname):
    monkeypatch.setattr(launch_module, "interface_towards", lambda addr: Route("127.0.1.1", "127.0.0.1", "lo"))
    with pytest.raises(ConfigError, match=r"rank 1: the rendezvous host 'n1' resolves to loopback \(127.0.1.1\)") as e:
        bind_gloo_towards("n1", TWO_HOSTS)
    assert "\n" not in str(e.value) and "/etc/hosts" in str(e.value)
    monkeypatch.setattr(launch_module, "interface_towards", lambda addr: None)
    with pytest.raises(ConfigError, match="rank 1: the rendezvous host 'n1' does not resolve on"):
        bind_gloo_towards("n1", TWO_HOSTS)


def test_the_local_cluster_picks_a_slash_24_nothing_here_uses():
    from slurm.netns import NetnsError, pick_subnet

    used = [ipaddress.ip_network("10.213.0.0/24"), ipaddress.ip_network("10.213.1.7/32"),
            ipaddress.ip_network("192.0.2.0/24")]
    assert pick_subnet(used) == ipaddress.ip_network("10.213.2.0/24")
    with pytest.raises(NetnsError, match="no free /24"):
        pick_subnet([ipaddress.ip_network("10.213.0.0/16")])


def test_a_throughput_study_on_shared_nodes_runs_one_job_at_a_time(capsys, tmp_path):
    """The local cluster's nodes share this machine's cores: one throughput job at a time (a singleton dependency
    on one job name), and each rank gets the threads a local run's rank gets; a real cluster's profile (generic)
    gives each throughput job whole nodes instead (issue 63), and its ranks their allocation's threads."""
    from studies.run import run_study
    from tests.helpers import REPO

    from trainers.tf.available import skip_reason

    exp3 = REPO / "experiments" / "03_throughput_distributed_data_parallel"
    assert run_study(exp3, launcher="slurm", cluster="local", dry_run=True, out=tmp_path) == 0  # none run yet
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("sbatch")]
    # the 6 TensorFlow rows (issue 37) are submitted only where they can run (issue 47), skipped with a line else
    tf_rows = {backend: 3 * (skip_reason(backend) is None) for backend in ("horovod", "mwms")}
    assert len(lines) == 6 + sum(tf_rows.values())
    assert out.count("#   skipped: ") == 6 - sum(tf_rows.values())
    assert all(line.startswith("sbatch --dependency=singleton ") and " -J scaling-throughput " in line
               and "--exclusive" not in line for line in lines)
    assert out.count("timed alone: one throughput job at a time (--dependency=singleton, job name "
                     "scaling-throughput): the profile's nodes share one machine's cores (shared_machine)") == len(lines)
    four_ranks = next(line for line in lines if "n2-ddp-t2-s0/slurm-%j.out" in line)
    threads = max(1, (os.cpu_count() or 1) // 4)  # 4 ranks share the machine's cores, as in a local run
    assert re.search(rf",OMP_NUM_THREADS={threads}[,' ]", four_ranks)  # ' ends the quoted --export=
    assert run_study(exp3, scale="thesis", launcher="slurm", cluster="generic", dry_run=True, out=tmp_path) == 0
    out = capsys.readouterr().out
    assert "--dependency" not in out and "OMP_NUM_THREADS" not in out
    sbatch = [line for line in out.splitlines() if line.startswith("sbatch")]
    assert sbatch and all(line.startswith("sbatch --exclusive ") for line in sbatch)
    assert out.count("timed alone: whole nodes (--exclusive)") == len(sbatch)


def test_a_profile_whose_partitions_refuse_exclusive_runs_throughput_jobs_one_at_a_time(tmp_path, capsys):
    from slurm.profiles import load_profile
    from studies.slurm import timed_alone

    generic = load_profile("generic")
    argv = ["sbatch", "-N", "2", "-J", "03-n2-ddp-s0", "-o", "o", "job.sbatch"]
    refused = dataclasses.replace(generic, exclusive_throughput=False)
    alone, line = timed_alone(argv, refused, None)
    assert alone == ["sbatch", "--dependency=singleton", "-N", "2", "-J", "scaling-throughput", "-o", "o",
                     "job.sbatch"]
    assert line.endswith("job name scaling-throughput): the profile's exclusive_throughput = false")
    # a cluster-check that found the hosts on one machine wins over a profile that allows --exclusive
    alone, line = timed_alone(argv, generic, "cluster-check found the nodes share 2 cores (generic-x)")
    assert alone[1] == "--dependency=singleton" and "--exclusive" not in alone and line.endswith("(generic-x)")


def test_a_jobs_rendezvous_is_never_inherited_from_the_submitting_shell(monkeypatch):
    """--export=ALL would carry a MASTER_ADDR/MASTER_PORT left in the shell (a login node's, an earlier run's) into
    every job, so jobs sharing a node collided on one port: they go in empty, and job.sh derives them on the node."""
    from slurm.profiles import load_profile, sbatch_argv

    monkeypatch.setenv("MASTER_ADDR", "login1")
    monkeypatch.setenv("MASTER_PORT", "41845")
    argv = sbatch_argv(load_profile("local"), "job.sbatch", nodes=2, tasks_per_node=1, gpus_per_node=0,
                       job_name="j", time_limit=None, output="o")
    export = next(a for a in argv if a.startswith("--export="))[len("--export="):].split(",")
    assert "MASTER_ADDR=" in export and "MASTER_PORT=" in export
    chosen = sbatch_argv(load_profile("local"), "job.sbatch", nodes=2, tasks_per_node=1, gpus_per_node=0,
                         job_name="j", time_limit=None, output="o", env={"MASTER_PORT": "29500"})
    assert "MASTER_PORT=29500" in next(a for a in chosen if a.startswith("--export="))  # asked for: kept
