"""Cluster profiles, sbatch command lines and slurm/job.sh's command construction (fast; no Slurm needed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from slurm.profiles import ProfileError, expand, load_profile, profile_env, sbatch_argv

ROOT = Path(__file__).resolve().parents[1]
JOB_SH = ROOT / "slurm" / "job.sh"


@pytest.mark.parametrize("name", ["local", "generic", "taito"])
def test_profiles_load(name):
    p = load_profile(name, environ={})
    assert p.name == name
    assert p.mpi_launcher in ("mpirun", "srun")


def test_taito_reproduces_the_thesis_scripts():
    p = load_profile("taito", environ={"IMAGENET_TAR": "/scratch/ilsvrc2012-torch-resized-new.tar"})
    # Appendix 8/12/14: full 4-GPU nodes, exclusive, all memory.
    argv = sbatch_argv(p, "experiments/08_x/slurm.sbatch", nodes=4, tasks_per_node=4, gpus_per_node=4,
                       job_name="4-node-16-gpu", time_limit="13:00:00", output="o.%j",
                       env={"BACKEND": "horovod"}, train_args=["cfg.toml", "--set", "lr.milestones=[30,60,80]"])
    assert argv[:5] == ["sbatch", "-N", "4", "--ntasks-per-node", "4"]
    for a in ("-p", "gpu", "--cpus-per-task", "7", "--gres=gpu:p100:4", "--exclusive", "--mem=0",
              "13:00:00", "--requeue", "--signal=B:USR1@600"):
        assert a in argv
    export = next(a for a in argv if a.startswith("--export="))
    assert export.startswith("--export=ALL,")
    assert "DATA_TAR=/scratch/ilsvrc2012-torch-resized-new.tar" in export
    assert "DATA_SUBDIR=ilsvrc2012-torch" in export and "SCRATCH_VAR=TMPDIR" in export
    assert "BACKEND=horovod" in export
    # The trainer's arguments follow the script unchanged (commas included).
    assert argv[-4:] == ["experiments/08_x/slurm.sbatch", "cfg.toml", "--set", "lr.milestones=[30,60,80]"][-4:]
    # Appendix 1: one GPU on a shared node, --mem=60G.
    one = sbatch_argv(p, "s", 1, 1, 1, "j", None, "o", {})
    assert "--gres=gpu:p100:1" in one and "--mem=60G" in one and "--exclusive" not in one
    assert "24:00:00" in one                                   # the profile's default limit


def test_generic_and_local_profiles():
    g = load_profile("generic", environ={"SLURM_PARTITION": "a100"})
    argv = sbatch_argv(g, "s", 2, 4, 4, "j", "1:00:00", "o", {})
    assert "a100" in argv and "--gres=gpu:4" in argv
    assert load_profile("generic", environ={}).partition == "gpu"
    loc = load_profile("local", environ={})
    argv = sbatch_argv(loc, "s", 1, 2, 0, "j", "1", "o", {})
    assert not any(a.startswith("--gres") for a in argv) and "-p" not in argv
    env = profile_env(loc)
    assert env["MPI_ALLOW_ROOT"] == "1" and env["MPI_ARGS"] == "--oversubscribe -mca mpi_yield_when_idle 1"


def test_profile_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('partition = "gpu"\ngpus = 4\n')
    with pytest.raises(ProfileError, match="unknown key 'gpus'"):
        load_profile(str(bad))
    bad.write_text('gpus_per_node = "4"\n')
    with pytest.raises(ProfileError, match="gpus_per_node must be int"):
        load_profile(str(bad))
    with pytest.raises(ProfileError, match="unknown cluster profile 'nope'"):
        load_profile("nope")
    p = load_profile("taito", environ={})
    with pytest.raises(ProfileError, match="4 GPUs a node"):
        sbatch_argv(p, "s", 1, 8, 8, "j", None, "o", {})
    with pytest.raises(ProfileError, match="commas"):
        sbatch_argv(p, "s", 1, 1, 1, "j", None, "o", {"TRAIN_ARGS": "--set a=[1,2]"})
    for err in (ProfileError("x"),):
        assert "\n" not in str(err)


def test_account_qos_and_constraint_are_profile_keys_and_absent_when_empty(tmp_path):
    prof = tmp_path / "site.toml"
    prof.write_text('account = "${ACC}"\nqos = "debug"\nconstraint = "a100|h100"\n')
    argv = sbatch_argv(load_profile(str(prof), environ={"ACC": "proj1"}), "s", 1, 1, 0, "j", None, "o", {})
    assert {"--account=proj1", "--qos=debug", "--constraint=a100|h100"} <= set(argv)
    argv = sbatch_argv(load_profile(str(prof), environ={}), "s", 1, 1, 0, "j", None, "o", {})
    assert "--account=" not in " ".join(argv)  # an unset variable gives no option, not an empty one


def test_generic_reads_account_qos_constraint_and_gpus_per_node_from_the_environment():
    env = {"SLURM_ACCOUNT": "myproj", "SLURM_QOS": "normal", "SLURM_CONSTRAINT": "v100", "GPUS_PER_NODE": "8"}
    g = load_profile("generic", environ=env)
    assert (g.account, g.qos, g.constraint, g.gpus_per_node) == ("myproj", "normal", "v100", 8)
    assert "--gres=gpu:8" in sbatch_argv(g, "s", 1, 8, 8, "j", None, "o", {})
    bare = load_profile("generic", environ={})
    assert (bare.account, bare.qos, bare.constraint, bare.gpus_per_node) == ("", "", "", 4)
    argv = sbatch_argv(bare, "s", 1, 4, 4, "j", None, "o", {})
    assert not any(a.startswith(("--account", "--qos", "--constraint")) for a in argv)


@pytest.mark.parametrize("value", ["eight", "-2", "4.5", " "])
def test_a_gpus_per_node_variable_that_is_no_whole_number_is_one_line(value):
    with pytest.raises(ProfileError, match=r"gpus_per_node = '\$\{GPUS_PER_NODE:-4\}' is .*not a whole number") as e:
        load_profile("generic", environ={"GPUS_PER_NODE": value})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["generic", "node", "taito"])
def test_a_profile_reads_the_variables_its_reads_line_names_and_no_others(name):
    """The `# Reads:` line of a profile lists what a user may set; the values read exactly those."""
    text = (ROOT / "slurm" / "clusters" / f"{name}.toml").read_text()
    said = set(next(line for line in text.splitlines() if line.startswith("# Reads:")).split()[2:])
    values = {k: v for k, v in tomllib.loads(text).items() if k not in ("scratch", "description")}
    read = set(re.findall(r"\$\{?(\w+)", " ".join(str(v) for v in values.values())))
    assert read == said


def test_generic_thesis_dry_run_follows_account_and_gpus_per_node(capsys, monkeypatch, tmp_path):
    """SLURM_ACCOUNT=myproj GPUS_PER_NODE=8 make exp6 SCALE=thesis LAUNCHER=slurm CLUSTER=generic DRY_RUN=1"""
    from studies.run import run_study

    monkeypatch.setenv("IMAGENET_DIR", "/data/ilsvrc2012")
    monkeypatch.setenv("SLURM_ACCOUNT", "myproj")
    monkeypatch.setenv("GPUS_PER_NODE", "8")
    exp6 = ROOT / "experiments" / "06_linear_scaling_stepping_warmup"
    assert run_study(exp6, scale="thesis", launcher="slurm", cluster="generic", dry_run=True, out=tmp_path) == 0
    out = capsys.readouterr().out
    for nodes, workers in [(1, 8), (2, 16), (3, 24), (4, 32)]:  # 8 GPUs a node: half the thesis's nodes
        assert f"thesis-w{workers}-s0: horovod+pytorch (horovod), {nodes} node(s) x 8 process(es)" in out
        assert f"sbatch -N {nodes} --ntasks-per-node 8 -p gpu --account=myproj --cpus-per-task 8 --gres=gpu:8" in out
    monkeypatch.delenv("SLURM_ACCOUNT")
    assert run_study(exp6, scale="thesis", launcher="slurm", cluster="generic", dry_run=True, out=tmp_path) == 0
    assert "--account" not in capsys.readouterr().out


def test_a_run_with_more_processes_a_node_than_the_profiles_gpus_is_one_line(monkeypatch, tmp_path):
    from contract.config import ConfigError
    from studies.run import run_study

    monkeypatch.setenv("IMAGENET_DIR", "/data/ilsvrc2012")
    monkeypatch.setenv("GPUS_PER_NODE", "2")  # experiment 3 runs 4 processes a node, as on the thesis's nodes
    exp3 = ROOT / "experiments" / "03_throughput_distributed_data_parallel"
    with pytest.raises(ConfigError, match="is 4 processes a node; the profile's nodes have 2 GPUs"):
        run_study(exp3, scale="thesis", launcher="slurm", cluster="generic", dry_run=True, out=tmp_path)


def test_expand():
    env = {"A": "1", "EMPTY": ""}
    assert expand("${A}-$A-${B:-two}-${EMPTY:-d}-${B}", env) == "1-1-two-d-"


# ---- slurm/job.sh, without Slurm: source it and print the command it would launch --------------------------

def _job_cmd(env: dict[str, str], *args: str) -> str:
    script = f'source "{JOB_SH}"; _build_cmd "$@"; printf "%s\\n" "${{_CMD[@]}}"'
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    r = subprocess.run(["bash", "-c", script, "job", *args], env={**base, **env}, capture_output=True,
                       text=True, check=True)
    return " ".join(r.stdout.split("\n")).strip()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_job_sh_commands(tmp_path):
    subprocess.run(["bash", "-n", str(JOB_SH)], check=True)
    ddp = _job_cmd({"BACKEND": "ddp", "PYTHON": "py"}, "cfg.toml", "--run", "r")
    assert ddp == "srun --kill-on-bad-exit=1 py -m trainers train cfg.toml --run r"
    hvd = _job_cmd({"BACKEND": "horovod", "SLURM_NTASKS": "8", "MPI_ARGS": "-oversubscribe", "PYTHON": "py"},
                   "cfg.toml")
    assert hvd.startswith("mpirun -np 8 -bind-to none -map-by slot -x NCCL_DEBUG=INFO -x PATH "
                          "-mca pml ob1 -mca btl ^openib -oversubscribe")
    assert hvd.endswith("py -m trainers train cfg.toml")
    pmix = _job_cmd({"BACKEND": "horovod", "MPI_LAUNCHER": "srun", "PYTHON": "py"}, "c")
    assert pmix.startswith("srun --mpi=pmix")
    # A restart resumes; staged data and the shared-file rendezvous are passed as --set.
    again = _job_cmd({"SLURM_RESTART_COUNT": "2", "DATA_PATH": "/tmp/d", "DDP_INIT": "file",
                      "INIT_DIR": str(tmp_path), "SLURM_JOB_ID": "7", "PYTHON": "py"}, "c")
    assert again.endswith(f"c --set data.path=/tmp/d --set train.init_method=file://{tmp_path}/init.7.2 "
                          "--resume auto")
    assert _job_cmd({"TRAIN_ARGS": "c --run x", "PYTHON": "py"}).endswith("train c --run x")
    assert "--resume" not in _job_cmd({"RESUME": "never", "SLURM_RESTART_COUNT": "1", "PYTHON": "py"}, "c")


def test_job_sh_rendezvous_port_is_the_trainers_formula_and_differs_per_job_and_restart():
    from trainers.rendezvous import job_port

    def port(env):
        r = subprocess.run(["bash", "-c", f'source "{JOB_SH}"; set_rendezvous; echo $MASTER_ADDR $MASTER_PORT'],
                           env={"PATH": os.environ["PATH"], "MASTER_ADDR": "h1", **env}, capture_output=True,
                           text=True, check=True)
        addr, p = r.stdout.split()
        assert addr == "h1"
        return int(p)

    envs = [{"SLURM_JOB_ID": str(j), "SLURM_RESTART_COUNT": str(r), "CHAIN_DEPTH": str(c)}
            for j in (1, 2, 3999, 123457) for r in (0, 1) for c in (0, 2)]
    ports = [port(env) for env in envs]
    assert ports == [job_port(env) for env in envs]  # one formula: a srun-started rank without job.sh agrees
    assert len(set(ports)) == len(envs) and all(10000 <= p < 50000 for p in ports)
    assert job_port({"SLURM_JOB_ID": "7"}) == 10070 and job_port({"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "3",
                                                                  "CHAIN_DEPTH": "1"}) == 10074
    assert port({"SLURM_JOB_ID": "9", "MASTER_PORT": "12345"}) == 12345 == job_port({"MASTER_PORT": "12345"})
    from trainers.backends import detect_launch

    srun_rank = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1", "SLURM_JOB_ID": "3999", "SLURM_RESTART_COUNT": "1",
                 "SLURM_STEP_NODELIST": "h1", "MASTER_ADDR": "h1"}
    assert detect_launch(srun_rank).master_port == port(srun_rank) == 49991


def test_time_limits_in_slurms_forms_and_a_short_jobs_warning_signal():
    from slurm.profiles import job_signal, limit_seconds

    assert [limit_seconds(t) for t in ("15", "15:30", "1:00:00", "1-2", "1-2:3", "1-2:3:4")] == \
        [900, 930, 3600, 93600, 93780, 93784]
    with pytest.raises(ProfileError, match="not one of Slurm's forms"):
        limit_seconds("15 minutes")
    assert job_signal("USR1@600", "24:00:00") == "USR1@600"   # a long job: the profile's lead
    assert job_signal("USR1@600", "15") == "USR1@225"         # a smoke job: a quarter of its time
    assert job_signal("USR1@600", "UNLIMITED") == "USR1@600"
    p = load_profile("taito", environ={})
    argv = sbatch_argv(p, "s", 1, 1, 1, "j", "15", "o", {})
    assert "--signal=B:USR1@225" in argv and "JOB_SIGNAL=B:USR1@225" in argv[-2]  # a successor job warned alike


def test_every_profile_key_is_documented_in_the_users_guide_and_no_other():
    import dataclasses

    from slurm.profiles import Profile

    guide = (ROOT / "docs" / "cluster.md").read_text()
    table = {m for m in re.findall(r"^\| `(\w+)` \|", guide, re.M)}
    keys = {f.name for f in dataclasses.fields(Profile)} - {"name"}  # name is the file's: no key
    assert table == keys
    assert "## Check the path first: make cluster-check" in guide


CPU_CLUSTER = """partition = "debug"
gpus_per_node = 0
time_limit = "00:30:00"
mpi_allow_root = true
"""


def test_a_cpu_cluster_derives_each_ranks_cpus_and_skips_tensorflow_at_planning(capsys, monkeypatch, tmp_path):
    """Issue 47: a CPU cluster's profile with cpus_per_task = 0 gets each rank's CPUs from cpus_per_node (the dry
    run says what each rank will get); TensorFlow rows without TensorFlow are skipped with the local study's line
    and never reach sbatch."""
    from studies import slurm as slurm_study
    from studies.run import run_study

    monkeypatch.setattr(slurm_study, "tf_skip_line", lambda plan: "skipped: TensorFlow is not installed here"
                        if plan.cfg.train.framework == "tensorflow" else None)
    profile = tmp_path / "cpu.toml"
    profile.write_text(CPU_CLUSTER + "cpus_per_node = 2\n")
    exp3 = ROOT / "experiments" / "03_throughput_distributed_data_parallel"
    assert run_study(exp3, scale="local", launcher="slurm", cluster=str(profile), dry_run=True, out=tmp_path) == 0
    out = capsys.readouterr().out
    assert "sbatch --exclusive -N 2 --ntasks-per-node 2 -p debug --cpus-per-task 1 " in out  # 2 CPUs over 2 ranks a node
    assert "sbatch --exclusive -N 2 --ntasks-per-node 1 -p debug --cpus-per-task 2 " in out
    assert "#   each rank: 1 CPU(s) (--cpus-per-task), as many threads" in out
    assert out.count("#   skipped: TensorFlow is not installed here") == 6 and "tensorflow" not in " ".join(
        line for line in out.splitlines() if line.startswith("sbatch"))
    profile.write_text(CPU_CLUSTER)  # the nodes' CPUs unknown: no --cpus-per-task, and the dry run says the rule
    assert run_study(exp3, scale="local", launcher="slurm", cluster=str(profile), dry_run=True, out=tmp_path) == 0
    out = capsys.readouterr().out
    assert "--cpus-per-task" not in out and "#   each rank: its node's CPUs over the node's 2 rank(s)" in out


def test_a_cpu_clusters_quality_runs_span_nodes_by_ranks_per_node(capsys, monkeypatch, tmp_path):
    """gpus_per_node = 0 with ranks_per_node = 2: 8 Horovod ranks on 4 nodes, not 8 on one."""
    from studies.run import run_study

    monkeypatch.setenv("IMAGENET_DIR", "/data/ilsvrc2012")
    profile = tmp_path / "cpu.toml"
    profile.write_text(CPU_CLUSTER + "ranks_per_node = 2\ncpus_per_node = 4\n")
    exp6 = ROOT / "experiments" / "06_linear_scaling_stepping_warmup"
    assert run_study(exp6, scale="thesis", launcher="slurm", cluster=str(profile), dry_run=True, out=tmp_path) == 0
    out = capsys.readouterr().out
    assert "thesis-w8-s0: horovod+pytorch (horovod), 4 node(s) x 2 process(es)" in out
    assert "sbatch -N 16 --ntasks-per-node 2 -p debug --cpus-per-task 2 " in out  # 32 workers


def test_a_slurm_study_prints_its_closing_table_once_nothing_is_left_to_submit(capsys, monkeypatch):
    """Issue 47 item 4: with LAUNCHER=slurm the closing table never printed; a rerun that submits nothing prints it,
    and the last line says which case this was."""
    from types import SimpleNamespace

    from studies import slurm as slurm_study

    shown = []
    monkeypatch.setattr(slurm_study, "print_comparison", lambda plans, study: shown.append(plans))
    study = SimpleNamespace(experiment=Path("experiments/03_throughput_distributed_data_parallel"))
    slurm_study.closing(study, ["a", "b"], submitted=2)
    last = capsys.readouterr().out.splitlines()[-1]
    assert not shown and last.startswith("03_throughput_distributed_data_parallel: 2 job(s) submitted; once squeue")
    slurm_study.closing(study, ["a", "b"], submitted=0)
    assert shown == [["a", "b"]]
    assert capsys.readouterr().out.splitlines()[-1].endswith("the table above is the study's closing table")
