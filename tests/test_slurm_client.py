"""Issue 64, the third hostile round: no Slurm client without a Slurm configuration, and no failed sbatch counted as a
submitted job. Every Slurm client here is a fake on PATH that writes a marker file: no test starts a real one
(without a configuration a real one would look its controller up in DNS)."""
import ast
import os
from pathlib import Path

import pytest

from slurm import client
from slurm.client import Clients, NoConfiguration, configuration
from slurm.profiles import ProfileError, load_profile
from tests.helpers import REPO
from tests.test_run_identity import tiny_study

CLIENT_NAMES = ("sbatch", "squeue", "sinfo", "sacct", "scancel", "scontrol", "srun", "salloc")
LOCAL_PROFILE = REPO / "slurm" / "clusters" / "local.toml"


def fake_clients(tmp_path: Path, sbatch: str = "echo 4321") -> Path:
    """Fake Slurm clients first on PATH, each appending its command line to tmp_path/started; `sbatch` is the
    body of the fake sbatch after that."""
    folder, marker = tmp_path / "fake-bin", tmp_path / "started"
    folder.mkdir()
    for name in CLIENT_NAMES:
        script = folder / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{marker}"\n{sbatch if name == "sbatch" else "exit 0"}\n')
        script.chmod(0o755)
    return marker


@pytest.fixture
def no_config(tmp_path, monkeypatch):
    """A machine without a Slurm configuration (SLURM_CONF unset, no readable /etc/slurm/slurm.conf), whose PATH
    has the fake clients first; the marker file they would write."""
    marker = fake_clients(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path / 'fake-bin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(client, "DEFAULT_CONF", tmp_path / "etc" / "slurm" / "slurm.conf")
    return marker


@pytest.fixture
def a_config(tmp_path, monkeypatch):
    """A readable (fake) slurm.conf in SLURM_CONF, so the configuration check passes; clients still fakes."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=fake\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("PATH", f"{tmp_path / 'fake-bin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setattr(client, "DEFAULT_CONF", tmp_path / "etc" / "slurm" / "slurm.conf")
    return conf


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def slurm_study(tmp_path, cluster: str = "local", runs: str = "[1]") -> list[str]:
    folder = tiny_study(tmp_path, f'vary = {{ "train.workers" = {runs} }}')
    (folder / "slurm.sbatch").write_text("#!/bin/bash\n")
    return ["study", str(folder), "--launcher", "slurm", "--cluster", cluster, "--out", str(tmp_path / "runs")]


# ---- the check itself ------------------------------------------------------------------------------------------------
def test_the_configuration_is_slurm_conf_or_the_default_file_or_a_declared_configless_site(tmp_path, monkeypatch):
    monkeypatch.setattr(client, "DEFAULT_CONF", tmp_path / "none.conf")
    with pytest.raises(NoConfiguration, match="no Slurm configuration here .*set SLURM_CONF.*`make cluster`"):
        configuration("", {})
    assert configuration("dns-srv", {}) is None  # configless: the clients find it themselves
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    assert configuration("", {"SLURM_CONF": str(conf)}) == str(conf)
    monkeypatch.setattr(client, "DEFAULT_CONF", conf)
    assert configuration("", {}) == str(conf)
    for unreadable in (tmp_path / "missing.conf", tmp_path):  # a missing file, a folder
        with pytest.raises(NoConfiguration, match=f"SLURM_CONF={unreadable} is not a file this user can read"):
            configuration("dns-srv", {"SLURM_CONF": str(unreadable)})  # configless does not make it right


@pytest.mark.parametrize("value, ok", [("dns-srv", True), ("ctl1.site.org:6817", True), ("ctl1:6817,ctl2:6817", True),
                                       ("", True), ("yes", False), ("DNS-SRV", False), ("ctl", False),
                                       ("dns srv", False), ("ctl:99999", False), ("ctl:0", False), ("ctl:", False),
                                       (":6817", False), ("ctl1:6817,", False)])
def test_a_profiles_configless_is_dns_srv_or_a_conf_server_list_else_one_line(tmp_path, value, ok):
    profile = tmp_path / "site.toml"
    profile.write_text(LOCAL_PROFILE.read_text() + f"configless = {value!r}\n".replace("'", '"'))
    if ok:
        assert load_profile(str(profile)).configless == value
        return
    with pytest.raises(ProfileError, match=r"^cluster profile site.toml: configless = .* is neither 'dns-srv'"):
        load_profile(str(profile))


def test_no_module_starts_a_slurm_client_but_through_slurm_client():
    """Every subprocess call of a listed argv naming a Slurm client is slurm/client.py's; the argvs the profiles
    build (sbatch_argv) go through Clients.submit, which the tests below run. The trainer's two calls run inside a
    job (slurm/client.py's docstring)."""
    inside_a_job = {"trainers/rendezvous.py", "trainers/setup.py"}
    found = []
    for room in ("contract", "slurm", "studies", "tools", "analysis", "suite", "trainers"):
        for path in sorted((REPO / room).rglob("*.py")):
            name = str(path.relative_to(REPO))
            if name == "slurm/client.py" or name in inside_a_job:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"
                        and node.args and isinstance(node.args[0], ast.List) and node.args[0].elts
                        and isinstance(node.args[0].elts[0], ast.Constant)
                        and node.args[0].elts[0].value in CLIENT_NAMES):
                    found.append(f"{name}:{node.lineno}")
    assert not found, found


# ---- without a configuration: one line, exit 2, no client started, nothing written -----------------------------------
def test_a_slurm_study_without_a_configuration_is_one_line_and_starts_no_client(tmp_path, capsys, no_config):
    from suite.__main__ import main

    assert main(slurm_study(tmp_path)) == 2
    err = one_error_line(capsys)
    assert "no Slurm configuration here" in err and "set SLURM_CONF" in err and "make cluster" in err
    assert not no_config.exists() and not (tmp_path / "runs").exists()


def test_cluster_check_without_a_configuration_is_one_line_and_starts_no_client(tmp_path, capsys, no_config):
    from tools.__main__ import main

    assert main(["cluster-check", "--cluster", "local", "--out", str(tmp_path / "checks")]) == 2
    assert "no Slurm configuration here" in one_error_line(capsys)
    assert not no_config.exists() and not (tmp_path / "checks").exists()


def test_advise_cluster_without_a_configuration_is_one_line_and_starts_no_client(tmp_path, capsys, no_config):
    from suite.__main__ import main

    assert main(["advise", "--cluster", "local", "--no-probe", "--check-root", str(tmp_path / "checks")]) == 2
    assert "no Slurm configuration here" in one_error_line(capsys)
    assert not no_config.exists()


def test_bench_comm_across_nodes_without_a_configuration_is_one_line_and_starts_no_client(tmp_path, no_config):
    from tools.__main__ import main

    with pytest.raises(SystemExit, match="^error: no Slurm configuration here"):
        main(["bench-comm", "--cluster", "local", "--nodes", "2", "--out", str(tmp_path / "bench")])
    assert not no_config.exists() and not (tmp_path / "bench").exists()


def test_the_local_clusters_clients_need_its_slurm_conf(tmp_path, no_config):
    from slurm.local_cluster import Cluster

    cluster = Cluster(tmp_path / "c", tmp_path / "c" / "slurm.conf")  # a cluster whose folder was removed
    with pytest.raises(NoConfiguration, match=f"SLURM_CONF={tmp_path / 'c' / 'slurm.conf'} is not a file"):
        cluster.jobs()
    assert not no_config.exists()


def test_an_unreadable_slurm_conf_is_one_line_naming_it(tmp_path, capsys, no_config, monkeypatch):
    from suite.__main__ import main

    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "gone.conf"))
    assert main(slurm_study(tmp_path)) == 2
    assert f"SLURM_CONF={tmp_path / 'gone.conf'} is not a file this user can read" in one_error_line(capsys)
    assert not no_config.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("configless, said", [("dns-srv", "DNS SRV records (_slurmctld._tcp) name the controller"),
                                              ("ctl1.site.org:6817", "from the --conf-server ctl1.site.org:6817")])
def test_a_configless_site_says_once_what_it_relies_on_and_submits(tmp_path, capsys, no_config, configless, said):
    from suite.__main__ import main

    profile = tmp_path / "site.toml"
    profile.write_text(LOCAL_PROFILE.read_text() + f'configless = "{configless}"\n')
    assert main(slurm_study(tmp_path, str(profile), "[1, 2]")) == 0
    out = capsys.readouterr().out
    assert out.count("relying on the profile's configless site") == 1 and said in out
    assert no_config.read_text().count("sbatch --parsable") == 2
    assert "99_tiny: 2 job(s) submitted; once squeue" in out


# ---- every sbatch failing: nothing counted as submitted, exit 1 ------------------------------------------------------
FAILING = 'echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2\nexit 1'


@pytest.mark.parametrize("sbatch, said", [(FAILING, "sbatch exited 1: sbatch: error: Batch job submission failed"),
                                          ("exit 0", "sbatch printed no job id: no message")])
def test_a_study_whose_every_sbatch_fails_counts_none_submitted_and_exits_1(tmp_path, capsys, a_config, sbatch, said):
    from suite.__main__ import main

    marker = fake_clients(tmp_path, sbatch)
    assert main(slurm_study(tmp_path, runs="[1, 2]")) == 1
    out = capsys.readouterr().out
    assert out.count(f"#   not submitted: {said}") == 2
    assert out.splitlines()[-1].startswith("99_tiny: 0 job(s) submitted, 2 failed (sbatch's line above each)")
    assert "Submitted batch job" not in out and "every run is done" not in out
    assert marker.read_text().count("sbatch --parsable") == 2
    assert not (tmp_path / "runs").exists()  # no run left planned without a job


def test_a_study_whose_second_sbatch_fails_counts_one_of_each(tmp_path, capsys, a_config):
    from suite.__main__ import main

    count = tmp_path / "count"
    fake_clients(tmp_path, f'echo x >> "{count}"\n[ "$(wc -l < "{count}")" -eq 1 ] && echo 77 && exit 0\n{FAILING}')
    assert main(slurm_study(tmp_path, runs="[1, 2]")) == 1
    out = capsys.readouterr().out
    assert "#   Submitted batch job 77" in out and out.count("#   not submitted: sbatch exited 1") == 1
    assert out.splitlines()[-1].startswith("99_tiny: 1 job(s) submitted, 1 failed")
    planned = sorted(p.parent.name for p in (tmp_path / "runs").rglob("config.json"))
    assert len(planned) == 1  # the submitted run's folder; the failed one's taken back


@pytest.mark.parametrize("body, job", [("echo 12", "12"), ("echo '12;cluster2'", "12"), ("echo 12; exit 3", None),
                                       ("echo Submitted", None), ("exit 0", None)])
def test_clients_submit_reads_the_exit_code_and_the_job_id(tmp_path, a_config, body, job):
    fake_clients(tmp_path, body)
    got = Clients().submit(["sbatch", "job.sh"])
    assert got.job == job and got.returncode == (3 if "exit 3" in body else 0)
