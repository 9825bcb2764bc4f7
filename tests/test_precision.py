"""How the model computes (precision, layout, passes of emulated workers, device choice), tested on the CPU."""
import json
import os
import signal

import pytest
import torch

from tests.helpers import (PHOTOS, final_state, max_difference, needs_photos, one_step_bound, records,
                           train_in_process, write_config)
from trainers import backends, compute
from trainers.backends import Launch, detect_launch
from contract.config import ConfigError, load_config


def short_run(tmp_path, name, **train):
    """A 2-epoch, 6-steps-an-epoch training of 8 emulated workers x 2 images; returns the final state."""
    assert train_in_process(short_config(tmp_path, name, **train), tmp_path, name) == 0
    return final_state(tmp_path / name / name)


def short_config(tmp_path, name, **train):
    return write_config(tmp_path / f"{name}.toml", {"train": {"workers": 8, "per_worker_batch": 2, **train}})


def same_first_step(tmp_path, reference: str, others: dict[str, dict]) -> None:
    """Each of `others` (name: train settings) differs from `reference`'s run only in the order of a sum: one step,
    held to one rounding of the update (tests/helpers.py, one_step_bound; not 2 epochs, whose amplification of a
    rounding depends on the CPU: issue #53)."""
    one = short_run(tmp_path, reference, max_steps=1)
    bound = one_step_bound(short_config(tmp_path, reference), one)
    for name, settings in others.items():
        difference = max_difference(one, short_run(tmp_path, name, max_steps=1, **settings))
        assert difference <= bound, (name, difference, bound)


# ----------------------------------------------------------------------------------------------------------------
# Emulated workers in passes
# ----------------------------------------------------------------------------------------------------------------
def test_workers_in_1_2_3_and_8_passes_take_the_same_step(tmp_path):
    # 2 passes, 3 uneven ones (3 + 3 + 2 workers), 8 passes: parameters and worker 0's running statistics
    same_first_step(tmp_path, "p8", {f"p{n}": {"workers_per_pass": n} for n in (4, 3, 1)})
    manifest = (tmp_path / "p3" / "p3" / "manifest.json").read_text()
    assert '"workers_per_pass": 3' in manifest


# Real images (the generated miniature, real photos): passes of several workers are the same SGD in exact
# arithmetic, but a pass's gradient sums its images in another order than one pass over all of them, and training
# on real images amplifies such a rounding difference about tenfold a step (a first step differs by ~1e-7; 8 workers
# of experiment 5 after one 25-step epoch: up to 0.9 in a running variance). So every grouping is checked on one
# step, where a real mistake (a worker's images, BatchNorm statistics, a pass's weight) would show at once, and
# the exact arithmetic - one worker a pass, as each DDP process computes its gradient - over whole runs against
# DDP (test_distributed.py).
REAL_DATA = {
    "generated": {"kind": "generated", "classes": 4, "per_class": 16, "val_per_class": 2, "image_size": 16},
    "photos": {"kind": "imagefolder", "path": str(PHOTOS), "image_size": 32},
}


def first_step_gradients(tmp_path, data: dict, workers_per_pass: int) -> dict[str, torch.Tensor]:
    """The gradient of the first step of 8 emulated workers x 4 images, the step's batch as the trainer reads it."""
    from trainers import loop
    from trainers.setup import build_setup

    cfg = load_config(write_config(tmp_path / f"p{workers_per_pass}.toml", {
        "data": data, "train": {"workers": 8, "workers_per_pass": workers_per_pass}}))
    launch = detect_launch()
    s, _ = build_setup(cfg, tmp_path / f"p{workers_per_pass}", backends.resolve(cfg, launch), launch, False, False)
    images, target, _ = next(iter(loop.batches(s, 0, 0)[0]))
    s.model.train()
    loop.step(s, images, target)  # on the device, normalised
    return {name: p.grad.clone() for name, p in s.backend.unwrap(s.model).named_parameters()}


@pytest.mark.parametrize("kind", ["generated", pytest.param("photos", marks=needs_photos)])
def test_passes_on_real_images_give_the_same_first_step_up_to_rounding(tmp_path, kind):
    one = first_step_gradients(tmp_path, REAL_DATA[kind], 8)
    for per_pass in (4, 3, 1):
        other = first_step_gradients(tmp_path, REAL_DATA[kind], per_pass)
        # float32 sums of up to 32 x 32 x 32 terms in another order: measured up to 1.7e-5 of the largest element;
        # a real mistake (a pass's weight of 3/8 for 1/3, a worker's images normalised with another's) is >= 1e-1
        for name, grad in one.items():
            assert (other[name] - grad).abs().max() <= 1e-4 * grad.abs().max() + 1e-8, (per_pass, name)


def test_auto_is_one_pass_on_the_cpu(tmp_path):
    short_run(tmp_path, "auto")
    assert '"workers_per_pass": 8' in (tmp_path / "auto" / "auto" / "manifest.json").read_text()


def test_largest_fitting_pass_halves_on_out_of_memory_and_on_too_high_a_peak():
    tried = []

    def try_pass(n):
        tried.append(n)
        if n > 12:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    assert compute.largest_fitting_pass(try_pass, 32) == 8 and tried == [32, 16, 8]
    tried.clear()
    peak_below_headroom = lambda: tried[-1] <= 12  # noqa: E731  (24 workers ran, but too close to the limit)
    assert compute.largest_fitting_pass(tried.append, 24, fits=peak_below_headroom) == 12 and tried == [24, 12]
    with pytest.raises(torch.cuda.OutOfMemoryError):
        compute.largest_fitting_pass(lambda n: try_pass(99), 4)


# ----------------------------------------------------------------------------------------------------------------
# Precision and layout on the CPU
# ----------------------------------------------------------------------------------------------------------------
def test_bf16_and_channels_last_train_on_the_cpu(tmp_path):
    fp32 = short_run(tmp_path, "fp32")
    bf16 = short_run(tmp_path, "bf16", precision="bf16", channels_last=True)
    difference = max_difference(fp32, bf16)
    assert 0 < difference < 0.05  # autocast really ran (not bit-identical), and it trained the same model
    epoch = records(tmp_path / "bf16" / "bf16", "epoch")[-1]
    assert all(torch.isfinite(torch.tensor(epoch[k])) for k in ("train_loss", "val_loss"))


def test_channels_last_alone_changes_the_layout_not_the_result(tmp_path):
    same_first_step(tmp_path, "nchw", {"nhwc": {"channels_last": True}})


def preempt_at(monkeypatch, step_number):
    """Send this process SIGUSR1 (as Slurm does) at the `step_number`-th training step."""
    from trainers import loop

    original, calls = loop.step, []

    def step(s, images, target):
        calls.append(1)
        if len(calls) == step_number:
            os.kill(os.getpid(), signal.SIGUSR1)
        return original(s, images, target)

    monkeypatch.setattr(loop, "step", step)


def inf_gradients_at(monkeypatch, calls):
    """Put an inf into a gradient before these optimizer steps (0-based, counted in this process), so fp16's scaler
    must skip them. Returns what GradScaler's public API shows at each step: (the scale dropped, no parameter
    changed)."""
    from trainers.backends.base import Backend

    original, seen = Backend.optimizer_step, []

    def optimizer_step(self, optimizer, scaler=None):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if len(seen) in calls:
            params[0].grad.view(-1)[0] = float("inf")
        before, weights = scaler.get_scale(), [p.detach().clone() for p in params]
        original(self, optimizer, scaler)
        seen.append((scaler.get_scale() < before, all(torch.equal(w, p) for w, p in zip(weights, params))))

    monkeypatch.setattr(Backend, "optimizer_step", optimizer_step)
    return seen


def test_fp16_records_the_steps_its_scaler_skips_and_fp32_none(tmp_path, monkeypatch):
    seen = inf_gradients_at(monkeypatch, {1, 2, 8})  # 6 steps an epoch: steps 1 and 2 of epoch 0, 2 of epoch 1
    cfg = write_config(tmp_path / "h.toml", {"train": {"precision": "fp16"}})
    assert train_in_process(cfg, tmp_path, "fp16") == 0
    dropped = [d for d, _ in seen]
    assert len(seen) == 12 and all(d == unchanged for d, unchanged in seen)  # a drop is a skipped update
    assert [i for i, d in enumerate(dropped) if d] == [1, 2, 8]  # the injected steps, no others
    run_dir = tmp_path / "h" / "fp16"
    assert [r["skipped_steps"] for r in records(run_dir, "epoch")] == [sum(dropped[:6]), sum(dropped[6:])] == [2, 1]
    assert json.loads((run_dir / "manifest.json").read_text())["skipped_steps"] == 3
    log = (run_dir / "train.log").read_text()
    assert "=> skipped 2 of 6 optimizer steps for inf/NaN gradients (fp16); loss scale now 16384" in log
    assert "=> skipped 1 of 6 optimizer steps for inf/NaN gradients (fp16); loss scale now 8192" in log
    assert "=> skipped optimizer steps for inf/NaN gradients (fp16): 3 in all (manifest skipped_steps)" in log
    monkeypatch.undo()
    fp32 = write_config(tmp_path / "f.toml")
    assert train_in_process(fp32, tmp_path, "fp32") == 0
    run_dir = tmp_path / "f" / "fp32"
    assert [r["skipped_steps"] for r in records(run_dir, "epoch")] == [0, 0]
    assert json.loads((run_dir / "manifest.json").read_text())["skipped_steps"] == 0
    assert "=> skipped" not in (run_dir / "train.log").read_text()


def test_fp16_resume_is_exact_with_the_scaler_state_and_the_skip_count(tmp_path, monkeypatch):
    cfg = write_config(tmp_path / "h.toml", {"train": {"precision": "fp16"}})
    # skipped steps before and after the cut, in its epoch and the next: the scale changes, the counts carry over
    inf_gradients_at(monkeypatch, {2, 5, 8})
    assert train_in_process(cfg, tmp_path, "whole") == 0
    monkeypatch.undo()
    inf_gradients_at(monkeypatch, {2})
    preempt_at(monkeypatch, 4)
    assert train_in_process(cfg, tmp_path, "cut") == 4
    cut = torch.load(tmp_path / "h" / "cut" / "checkpoint.pt", weights_only=True)
    assert cut["step"] == 4 and cut["scaler"]["scale"] > 0  # the loss scale went into the checkpoint
    assert (cut["epoch_skipped_steps"], cut["skipped_steps"]) == (1, 0)  # ... and the epoch's skipped step
    monkeypatch.undo()
    inf_gradients_at(monkeypatch, {5 - 4, 8 - 4})  # the resumed process starts at step 4
    assert train_in_process(cfg, tmp_path, "cut", "--resume", "auto") == 0
    whole = torch.load(tmp_path / "h" / "whole" / "checkpoint.pt", weights_only=True)
    resumed = torch.load(tmp_path / "h" / "cut" / "checkpoint.pt", weights_only=True)
    assert max_difference(whole["model"], resumed["model"]) == 0.0
    assert whole["scaler"] == resumed["scaler"] and whole["scaler"]["scale"] == 65536.0 / 8
    assert [(c["epoch_skipped_steps"], c["skipped_steps"]) for c in (whole, resumed)] == [(0, 3), (0, 3)]
    skipped = {name: [r["skipped_steps"] for r in records(tmp_path / "h" / name, "epoch")] for name in ("whole", "cut")}
    assert skipped["whole"] == skipped["cut"] == [2, 1]


def test_a_resume_takes_its_tallies_from_the_checkpoint_and_the_manifest_only_records_them(tmp_path, monkeypatch):
    """Issue 65: the skipped steps and unreadable-file counts are the TrainState's, saved in the checkpoint (the
    epoch's so far too); the manifest is written from them, never read back: an earlier attempt's manifest that
    says otherwise is overwritten as the resume starts."""
    cfg = write_config(tmp_path / "h.toml", {"train": {"precision": "fp16"}})
    inf_gradients_at(monkeypatch, {2, 7})  # 6 steps an epoch: step 2 of epoch 0, step 1 of epoch 1
    preempt_at(monkeypatch, 8)  # the checkpoint at epoch 1, iteration 2
    assert train_in_process(cfg, tmp_path, "cut") == 4
    monkeypatch.undo()
    run_dir = tmp_path / "h" / "cut"
    cut = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert (cut["epoch"], cut["step"], cut["skipped_steps"], cut["epoch_skipped_steps"]) == (1, 2, 1, 1)
    assert cut["unreadable_images"] == {"train": {"0": 0}, "val": {"0": 0}}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest.update(skipped_steps=99, unreadable_images={"train": {"0": 5}, "val": {"0": 5}})
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    assert train_in_process(cfg, tmp_path, "cut", "--resume", "auto") == 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["skipped_steps"] == 2 and [r["skipped_steps"] for r in records(run_dir, "epoch")] == [1, 1]
    assert manifest["unreadable_images"] == {"train": {"0": 0, "1": 0}, "val": {"0": 0, "1": 0}}
    assert "=> skipped optimizer steps for inf/NaN gradients (fp16): 2 in all" in (run_dir / "train.log").read_text()


def test_the_loop_waits_for_the_device_only_where_it_logs(tmp_path, monkeypatch):
    from trainers import loop

    reads = []
    original = loop.DeviceTotals.read
    monkeypatch.setattr(loop.DeviceTotals, "read", lambda self: reads.append(1) or original(self))
    cfg = write_config(tmp_path / "r.toml", {"train": {"epochs": 1, "print_freq": 4},
                                             "data": {"synthetic_images": 80}})
    assert train_in_process(cfg, tmp_path, "r") == 0
    # 10 training steps: read at steps 0, 4, 8 and the last; validation (one batch): once
    assert len(reads) == 4 + 1
    iters = records(tmp_path / "r" / "r", "iter")
    assert [r["iter"] for r in iters] == [0, 4, 8, 9]
    epoch = records(tmp_path / "r" / "r", "epoch")[-1]
    assert iters[-1]["loss_avg"] == pytest.approx(epoch["train_loss"], rel=1e-12)  # one epoch: the same mean


# ----------------------------------------------------------------------------------------------------------------
# Config mistakes: one line, exit 2
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("override, message", [
    ("train.precision=fp8", "train.precision = 'fp8' is not one of fp32, tf32, bf16, fp16"),
    ("train.precision=16", "train.precision = 16 has the wrong type"),
    ("train.channels_last=1", "train.channels_last = 1 has the wrong type"),
    ("train.compile=yes", "train.compile = 'yes' has the wrong type"),
    ("train.deterministic=0", "train.deterministic = 0 has the wrong type"),
    ("train.cudnn_benchmark=on", "train.cudnn_benchmark = 'on' has the wrong type"),
    ("train.workers_per_pass=-1", "train.workers_per_pass = -1 must be >= 0"),
    ("train.workers_per_pass=2.5", "train.workers_per_pass = 2.5 has the wrong type"),
    ("train.workers_per_pass=2 train.backend=dp", "train.backend = 'dp' has none"),  # ddp/horovod: W > processes
])
def test_each_bad_value_is_one_line_and_exit_2(tmp_path, capsys, override, message):
    sets = [arg for setting in override.split() for arg in ("--set", setting)]
    assert train_in_process(write_config(tmp_path / "c.toml"), tmp_path, "c", *sets) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


# ----------------------------------------------------------------------------------------------------------------
# Never two ranks on one GPU
# ----------------------------------------------------------------------------------------------------------------
def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)


def test_more_ranks_than_gpus_take_the_cpu_or_are_refused(tmp_path, monkeypatch):
    one_gpu(monkeypatch)
    two_ranks = Launch("torchrun", 1, 2, 1, local_world_size=2)
    auto = load_config(write_config(tmp_path / "a.toml", {"train": {"device": "auto"}}))
    assert backends.pick_device(auto, two_ranks) == torch.device("cpu")
    assert backends.pick_device(auto, Launch()) == torch.device("cuda", 0)  # one process, one GPU: the GPU
    cuda = load_config(write_config(tmp_path / "c.toml", {"train": {"device": "cuda"}}))
    with pytest.raises(ConfigError, match="2 processes on this node but 1 GPU.*never two ranks on one GPU.*"
                                          "--set train.device=cpu"):
        backends.pick_device(cuda, two_ranks)


def test_torchrun_nodes_on_localhost_share_its_gpu_so_take_the_cpu(tmp_path, monkeypatch):
    one_gpu(monkeypatch)
    auto = load_config(write_config(tmp_path / "a.toml", {"train": {"device": "auto"}}))
    # two single-process "nodes" meeting at 127.0.0.1: each sees one process on its node, both are on this one
    node = Launch("torchrun", 1, 2, 0, master_addr="127.0.0.1", master_port=29500, local_world_size=1)
    assert backends.pick_device(auto, node) == torch.device("cpu")
    remote = Launch("torchrun", 1, 2, 0, master_addr="gpu12", master_port=29500, local_world_size=1)
    assert backends.pick_device(auto, remote) == torch.device("cuda", 0)  # a real second node has its own GPU
    cuda = load_config(write_config(tmp_path / "c.toml", {"train": {"device": "cuda"}}))
    with pytest.raises(ConfigError, match="never two ranks on one GPU"):
        backends.pick_device(cuda, node)


@pytest.mark.parametrize("env, per_node", [
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, 2),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 4),
    ({"SLURM_STEP_NUM_TASKS": "6", "SLURM_PROCID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x3)",
      "SLURM_STEP_NODELIST": "n1"}, 2),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "2"}, 2),
    ({}, 1),
])
def test_launchers_tell_how_many_processes_share_the_node(env, per_node):
    assert detect_launch(env).local_world_size == per_node


# ----------------------------------------------------------------------------------------------------------------
# The GPU bench's plumbing, run on the CPU with a tiny model
# ----------------------------------------------------------------------------------------------------------------
def test_the_gpu_bench_writes_a_row_per_variant_batch_and_wrapper(tmp_path, monkeypatch):
    import json
    from types import SimpleNamespace

    from tools import bench

    monkeypatch.setattr(bench, "GPU_MODEL", "cifar_resnet8")
    monkeypatch.setattr(bench, "GPU_IMAGE_SIZE", 16)
    monkeypatch.setattr(bench, "GPU_STEPS", 2)
    monkeypatch.setattr(bench, "GPU_WARMUP", 1)
    monkeypatch.setattr(bench, "EMULATED_WORKERS", 4)
    monkeypatch.setattr(bench, "EMULATED_BATCH", 2)
    monkeypatch.setattr(bench, "EMULATED_STEPS", 2)
    out = tmp_path / "bench.json"
    args = SimpleNamespace(json=str(out), variants="fp32,bf16_channels_last", batches=(4,), skip_emulated=False)
    assert bench.run_gpu_bench(args, device="cpu") == 0
    result = json.loads(out.read_text())
    assert result["device"] == "cpu"
    assert [(r["variant"], r["wrapper"]) for r in result["rows"]] == [
        ("fp32", "single"), ("fp32", "ddp"), ("bf16_channels_last", "single"), ("bf16_channels_last", "ddp")]
    assert all(r["ratio"] > 0 for r in result["rows"]) and result["emulated"]["step_cost_ratio"] > 0
    assert set(result["variants"]) == {"fp32", "bf16_channels_last"} and result["complete"]


def test_the_gpu_bench_refuses_an_unknown_variant_in_one_line():
    from tools import bench

    with pytest.raises(SystemExit, match="unknown variant bf17; choose from fp32, bf16_channels_last, compiled"):
        bench.chosen_variants("fp32,bf17")


def test_experiment_1_gains_precision_rows_at_the_gpu_scale_only():
    from tests.helpers import REPO
    from contract.plan import expand

    config = REPO / "experiments" / "01_throughput_single_gpu" / "config.toml"
    gpu = {run.name: run.settings for run in expand(config, "gpu")}
    thesis_rows = [f"gpu-b{b}-{f}-s0" for b in (32, 64, 128) for f in ("ddp", "horovod")]
    assert all("train.precision" not in gpu[name] for name in thesis_rows)  # the thesis's rows stay fp32
    assert gpu["gpu-b128-ddp-tf32-s0"]["train.precision"] == "tf32"
    assert gpu["gpu-b256-ddp-bf16-cl-s0"]["train.channels_last"] is True
    assert gpu["gpu-b256-ddp-bf16-cl-compiled-s0"]["train.compile"] is True
    for scale in ("thesis", "local"):
        assert all(load_config(config, scale).train.precision == "fp32" and "train.precision" not in run.settings
                   for run in expand(config, scale))


def test_deterministic_mode_trains_on_the_cpu_as_the_default_does(tmp_path):
    same_first_step(tmp_path, "plain", {"det": {"deterministic": True}})  # global pooling as a mean: the same numbers


@pytest.mark.slow  # torch.compile's first compilation takes minutes of CPU
def test_a_compiled_model_trains_as_the_eager_one(tmp_path):
    settings = {"workers": 2, "workers_per_pass": 1, "epochs": 1}  # passes: the compiled graph sees both states
    eager = write_config(tmp_path / "eager.toml", {"train": settings})
    compiled = write_config(tmp_path / "compiled.toml", {"train": {**settings, "compile": True}})
    assert train_in_process(eager, tmp_path, "e") == 0 and train_in_process(compiled, tmp_path, "c") == 0
    assert max_difference(final_state(tmp_path / "eager" / "e"), final_state(tmp_path / "compiled" / "c")) <= 1e-4
