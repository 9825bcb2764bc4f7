"""Telemetry: the sampler's fields, NVML absent or failing, and a real training's util records drawn as the
thesis's utilisation figures (22, 23, 27) by the analysis."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import psutil  # noqa: E402
import pytest  # noqa: E402

from tests.helpers import records, train_in_process, write_config  # noqa: E402
from trainers import telemetry  # noqa: E402

UTIL_FIELDS = {"kind", "time", "t", "host", "rank", "cpu_process_pct", "cpu_system_pct", "mem_process_gb",
               "mem_system_pct", "gpus"}
GPU_FIELDS = {"index", "nvml_index", "util_pct", "mem_used_gb", "power_w"}


# ----------------------------------------------------------------------------------------------------------------
# The sampler
# ----------------------------------------------------------------------------------------------------------------
def test_process_cpu_counts_the_children_it_sees():
    cpu = telemetry.ProcessTreeCpu(psutil.Process())
    burn = "import time\nwhile time.process_time() < 0.3: pass\nprint('done', flush=True)\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        pct, mem_gb = cpu.sample()
        assert cpu.seen[child.pid] >= 0.28  # (clock ticks of 10 ms) the child's CPU seconds are in the process figure
        assert 0 < pct <= 100 and mem_gb > 0
    finally:
        child.kill()
        child.wait()


class FakeNvml(types.SimpleNamespace):
    """pynvml's calls the sampler makes, for two GPUs; `fail_after` samples, every call raises."""

    class NVMLError(Exception):
        pass

    def __init__(self, init_error: Exception | None = None, fail_after: int | None = None, count: int = 2):
        super().__init__(calls=0)
        self.init_error, self.fail_after, self.count = init_error, fail_after, count

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}{h}{h}a-0000"

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise self.NVMLError("GPU is lost")
        return types.SimpleNamespace(gpu=50 + h)

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=(h + 1) * 2 ** 30)

    def nvmlDeviceGetPowerUsage(self, h):
        if h == 1:
            raise self.NVMLError("not supported")
        return 250_000


def test_gpu_fields_from_nvml(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    lines = []
    sample = telemetry.Sampler(60, rank=3, warn=lines.append).sample()
    assert set(sample) == UTIL_FIELDS - {"kind", "t"} and sample["rank"] == 3 and not lines
    assert sample["gpus"] == [{"index": 0, "nvml_index": 0, "util_pct": 50.0, "mem_used_gb": 1.0, "power_w": 250.0},
                              {"index": 1, "nvml_index": 1, "util_pct": 51.0, "mem_used_gb": 2.0, "power_w": None}]


@pytest.mark.parametrize("visible, nvml_indices", [
    (None, [0, 1, 2, 3]), ("2,3", [2, 3]), ("3,1", [3, 1]), ("GPU-222,1", [2, 1]), ("1,9,2", [1]), ("", []),
    ("-1", [])])
def test_gpu_fields_follow_cuda_visible_devices(monkeypatch, visible, nvml_indices):
    # A job given GPUs 2 and 3 of a shared node records those two, numbered as the job's CUDA sees them (0, 1);
    # like CUDA, an unknown entry hides it and every entry after it.
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(count=4))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    lines = []
    gpus = telemetry.Sampler(60, rank=0, warn=lines.append).sample()["gpus"]
    assert [(g["index"], g["nvml_index"]) for g in gpus] == list(enumerate(nvml_indices))
    assert [g["util_pct"] for g in gpus] == [50.0 + i for i in nvml_indices]
    assert len(lines) == (0 if nvml_indices else 1)


def test_nvml_absent_or_failing_leaves_cpu_figures_and_one_line(monkeypatch, capsys):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(init_error=OSError("libnvidia-ml.so.1 not found")))
    lines = []
    sampler = telemetry.Sampler(60, rank=0, warn=lines.append)
    assert sampler.sample()["gpus"] == [] and len(lines) == 1 and "CPU and memory only" in lines[0]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_after=2))
    sampler = telemetry.Sampler(60, rank=0, warn=lines.append)
    assert len(sampler.sample()["gpus"]) == 2
    for _ in range(3):  # the driver goes away: CPU fields go on, one line says so
        sample = sampler.sample()
        assert sample["gpus"] == [] and sample["cpu_system_pct"] >= 0
    assert capsys.readouterr().err.count("NVML failed") == 1


def test_no_sampler_when_disabled_or_not_local_rank_0():
    assert telemetry.start_sampler(0.0, rank=0, local_rank=0) is None
    assert telemetry.start_sampler(5.0, rank=1, local_rank=1) is None


# ----------------------------------------------------------------------------------------------------------------
# A real training -> util records -> the analysis's figures
# ----------------------------------------------------------------------------------------------------------------
def train_quality_run(tmp_path: Path, experiment: str, telemetry_s: float) -> Path:
    """A tiny real run of 32 emulated workers, in a folder named like the experiment (as a study writes it)."""
    folder = tmp_path / "experiments" / experiment
    folder.mkdir(parents=True)
    cfg = write_config(folder / "config.toml", {"train": {"workers": 32, "per_worker_batch": 1, "epochs": 2},
                                                "telemetry": {"interval_s": telemetry_s}})
    assert train_in_process(cfg, tmp_path / "runs", "w32-s0", "--scale", "local") == 0
    return tmp_path / "runs" / experiment / "w32-s0"


def test_a_real_run_records_util_and_the_report_draws_figures_22_23_27(tmp_path):
    from analysis import catalogue as ct
    from analysis.experiments.quality import THESIS_UTILISATION, plot_utilisation, utilisation_rows
    from analysis.report import build_figures
    from analysis.runs import load_study

    runs = [train_quality_run(tmp_path, name, 0.05) for name in ("06_linear_scaling_stepping_warmup",
                                                                    "07_stepping_warmup_small_batch")]
    for run_dir in runs:
        util = records(run_dir, "util")
        assert util, "the sampler's last sample at the end makes at least one"
        assert all(set(r) == UTIL_FIELDS and r["gpus"] == [] and r["t"] >= 0 and r["rank"] == 0 for r in util)
        assert all(0 <= r["cpu_process_pct"] <= 100 and 0 <= r["cpu_system_pct"] <= 100 for r in util)
    df = load_study(tmp_path / "runs")
    rows = df[df["kind"] == "util"]
    assert set(rows["device"]) == {"cpu process", "cpu system"}
    written, skipped = build_figures(ct.inputs(df, None), tmp_path / "figures", THESIS_UTILISATION)
    # emulated workers stand for PyTorch and Horovod alike: Figures 22 and 23 would be one image twice
    assert {p.stem for p in written} == {f.name for f in THESIS_UTILISATION} - {"fig23_util_exp6_horovod"}
    assert skipped == ["fig23_util_exp6_horovod: the same emulated runs as fig22_util_exp6_pytorch (drawn once)"]
    exp6, note = utilisation_rows(df, 6, "horovod+pytorch")
    assert "emulated" in note  # the local scale's one computation stands for the DDP and the Horovod row
    ax = plot_utilisation(exp6)
    assert len(ax.get_lines()) == 2  # one series per run and device: the process's CPU and the node's
    labels = [t.get_text() for t in ax.get_legend().get_texts()]  # a colour per run, a line style per device
    assert labels == ["w32-s0", "cpu process (this run's, with its loader workers)", "cpu system (the whole node)"]
    plt.close(ax.figure)


def test_telemetry_off_writes_no_util_records(tmp_path):
    run_dir = train_quality_run(tmp_path, "06_linear_scaling_stepping_warmup", 0.0)
    assert records(run_dir, "util") == []
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"


@pytest.mark.slow
def test_two_nodes_samples_reach_rank_0s_metrics(tmp_path):
    """Two torchrun 'nodes' on localhost, one rank each: both sample, rank 0 writes both nodes' util records."""
    from tests.helpers import REPO, trainer_env
    from trainers.backends import free_port

    cfg = write_config(tmp_path / "n.toml", {"train": {"backend": "ddp", "epochs": 2},
                                             "telemetry": {"interval_s": 0.05}})
    port = str(free_port())
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
         "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port, "-m", "trainers", "train",
         str(cfg), "--out", str(tmp_path), "--run-name", "two"],
        env=trainer_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for node in (0, 1)]
    for node in nodes:
        assert node.wait(timeout=600) == 0, node.stderr.read()[-3000:]
    util = records(tmp_path / "n" / "two", "util")
    assert {r["rank"] for r in util} == {0, 1}
    assert all(set(r) == UTIL_FIELDS for r in util)


def test_the_node_figure_is_right_on_the_sampler_thread_first_sample():
    """psutil.cpu_percent keeps a baseline per thread: a sampler built on one thread and sampling on another
    must still see the CPU this process burnt in between (the bug: a first figure of 0 on a busy node)."""
    import threading
    import time

    sampler = telemetry.Sampler(3600, rank=0, warn=lambda line: None)
    start = time.process_time()
    while time.process_time() - start < 0.3:  # CPU seconds, not wall: the same work on any machine
        pass
    got = []
    worker = threading.Thread(target=lambda: got.append(sampler.sample()))
    worker.start()
    worker.join()
    assert got[0]["cpu_system_pct"] > 0 and got[0]["cpu_process_pct"] > 0
