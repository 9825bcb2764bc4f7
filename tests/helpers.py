"""Shared helpers for the tests: tiny configs and running the trainer as a user would."""
from __future__ import annotations

import functools
import json
import os
import struct
import textwrap
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from contract.reader import read_manifest
from trainers.backends import free_port
from trainers.show_config import toml_value

REPO = Path(__file__).resolve().parents[1]
# real photos beside the project (never needed: tests that use them skip without them)
PHOTOS = REPO.parent / "shared" / "data" / "hymenoptera_data"
needs_photos = pytest.mark.skipif(not PHOTOS.is_dir(), reason=f"no real photos at {PHOTOS}")

TINY = {
    "model": {"name": "cifar_resnet8", "num_classes": 10, "width": 8},
    "data": {"kind": "synthetic", "image_size": 16, "loader_workers": 0, "synthetic_images": 48},
    # device pinned: tests that compare runs must not see one pick the GPU and the other the CPU (test_gpu.py asks
    # for "cuda" itself)
    "train": {"epochs": 2, "per_worker_batch": 4, "workers": 2, "seed": 3, "print_freq": 1, "threads": 1,
              "device": "cpu"},
    "lr": {"base": 0.05, "base_batch": 8},
}


def pinned_version(package: str) -> str | None:
    """The version pyproject.toml pins `package` to (None if it pins none)."""
    import tomllib

    for dep in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        name, _, version = dep.partition("==")
        if name.strip().lower() == package:
            return version.strip()
    return None


def pillow_levels() -> int:
    """Grey levels a comparison with Pillow's pixels may differ by: none with the pinned Pillow and torch (the
    resize reproduces Pillow 13's rounding exactly), one under another build (SITE_TORCH=1, a GPU image's own
    stack), where Pillow's fixed-point rounding or torch's uint8 arithmetic may move a pixel by one level."""
    import PIL

    same = PIL.__version__ == pinned_version("pillow") and torch.__version__.split("+")[0] == pinned_version("torch")
    return 0 if same else 1


def write_config(path: Path, overrides: dict | None = None) -> Path:
    """A config file from TINY with `overrides` ({section: {key: value}}) merged in."""
    sections = {k: dict(v) for k, v in TINY.items()}
    for section, values in (overrides or {}).items():
        sections.setdefault(section, {}).update(values)
    lines = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def trainer_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_", "HOROVOD_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    # the repo first, the caller's path kept: HPC module systems and GPU images put packages on PYTHONPATH
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=path, **extra)
    return env


def run(args: list[str], timeout: int = 300, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=env or trainer_env(), cwd=REPO, **kw
    )


def train(config: Path, out: Path, run_name: str, *extra: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "trainers", "train", str(config), "--out", str(out), "--run", run_name, *extra],
               timeout=timeout)


def torchrun(nproc: int, config: Path, out: Path, run_name: str, *extra: str, timeout: int = 300):
    return run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                "--master-port", str(free_port()), "-m", "trainers", "train", str(config),
                "--out", str(out), "--run-name", run_name, *extra], timeout=timeout)


@functools.lru_cache(maxsize=None)
def mpirun_cannot_launch() -> str | None:
    """Why `mpirun` can't start even one local process here (not installed; no rsh/ssh agent...), or None."""
    if shutil.which("mpirun") is None:
        return "Open MPI's mpirun is not installed; run `make setup-horovod` as root"
    try:
        result = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "1", sys.executable, "-c",
                                 "pass"], capture_output=True, text=True, timeout=120, env=trainer_env())
    except subprocess.TimeoutExpired:
        return "mpirun -np 1 did not finish in 120 s"
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in (result.stderr + result.stdout).splitlines() if line.strip(" -*\t")]
    return f"mpirun cannot launch here: {lines[0][:160] if lines else f'exit {result.returncode}'}"


def final_state(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoint.pt", weights_only=True)["model"]


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].numel())


# Two runs that differ only in the order of a sum (workers grouped in other passes or ranks, another memory layout)
# are compared after ONE step: training amplifies a rounding step after step at a rate set by the CPU's kernels
# (issue #53: 5.3e-5 on an Intel Xeon, 1.5e-3 on an AMD EPYC for the same 2-epoch run), so a bound on a many-step
# difference holds only on the CPU it was tuned on. After one step the difference is one rounding of the update:
# recursive summation of n float32 terms errs by at most (n - 1) 2^-24 of their absolute sum, about 4e-7 for 8
# workers, so 1e-4 of the largest update leaves room for 250x cancellation between the terms (the update is their
# mean, the error scales with their magnitudes), while a real mistake (a worker's images dropped or counted twice, a
# weight of 1/4 for 1/8) moves the update by 1/8 or more.
ROUNDING = 1e-4


def initial_parameters(config) -> dict[str, torch.Tensor]:
    """The parameters every run of this config starts from: the trainer seeds torch with train.seed, then builds
    the model (rank 0's, broadcast to the others)."""
    from contract.config import load_config
    from trainers.models import build_model

    cfg = load_config(config)
    torch.manual_seed(cfg.train.seed)
    return {name: p.detach().clone() for name, p in build_model(cfg.model).named_parameters()}


def one_step_bound(config, after_one_step: dict[str, torch.Tensor]) -> float:
    """ROUNDING times the step's largest change of a parameter. (The running statistics come from the forward
    pass alone, the same arithmetic on both sides: they are held to the same bound, though they move further.)"""
    before = initial_parameters(config)
    return ROUNDING * max_difference({k: after_one_step[k] for k in before}, before)


def records(run_dir: Path, kind: str) -> list[dict]:
    import json

    return [r for r in map(json.loads, open(run_dir / "metrics.jsonl")) if r["kind"] == kind]


def train_in_process(config: Path, out: Path, run_name: str, *extra: str) -> int:
    """The CLI in this process (no torch import per call): the fast tests' way to train."""
    from trainers.__main__ import main

    return main(["train", str(config), "--out", str(out), "--run", run_name, *extra])


# EventAccumulator in a process of its own: its tf.io.gfile would import TensorFlow where it is installed, and
# TensorFlow beside this process's torch can crash. Purging off, so a step written twice would be read twice.
READ_BACK = textwrap.dedent("""
    import json, sys
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0}, purge_orphaned_data=False)
    acc.Reload()
    print(json.dumps({tag: [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)]
                      for tag in acc.Tags()["scalars"]}))
""")


def read_back(run_dir) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar of a run folder's event files, as TensorBoard reads them: {tag: [(step, wall time, value)]}."""
    done = subprocess.run([sys.executable, "-c", READ_BACK, str(run_dir)], capture_output=True, text=True,
                          check=True, timeout=120)
    return {tag: [tuple(point) for point in points] for tag, points in json.loads(done.stdout).items()}


def f32(value: float) -> float:
    """A value as an event file stores it (a scalar's simple_value is a 32-bit float)."""
    return struct.unpack("f", struct.pack("f", value))[0]


def started_before(run_dirs, declared_at: str) -> list[str]:
    """The runs (their folders) whose first attempt started before `declared_at` (ISO 8601): a run the
    declaration cannot have preceded. A folder without a readable manifest start counts as such too."""
    when = pd.Timestamp(declared_at)
    early = []
    for run_dir in run_dirs:
        manifest = read_manifest(run_dir) or {}
        starts = [a.get("start") for a in manifest.get("attempts", [])] + [manifest.get("start")]
        starts = [pd.Timestamp(s) for s in starts if s]
        if not starts or min(starts) < when:
            early.append(str(run_dir))
    return early
