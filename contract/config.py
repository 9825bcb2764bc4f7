"""Configuration: TOML files validated into frozen dataclasses.

Every key defaults to what the thesis ran (ResNet-50, ILSVRC-2012, 90 epochs, per-GPU batch 128, SGD with momentum
0.9 and weight decay 1e-4, lr 0.1 per 256 images, /10 every 30 epochs), so a config holds only what differs.
Layers, later wins: defaults <- the experiment's top-level tables <- experiments/scales.toml[scale] <- the
experiment's [scale.<scale>] tables <- `--set section.key=value`. A mistake a user can make is one `ConfigError`
line that says what to fix, raised before any process group or data is touched.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import workloads
from contract import lr as lr_policy

SCALES = ("local", "gpu", "node", "thesis")
BACKENDS = ("auto", "single", "emulated", "ddp", "fsdp", "hsdp", "horovod", "dp", "mwms")
# The backends that start a process a rank (torchrun, horovodrun, srun); the others train in one process.
DISTRIBUTED_BACKENDS = ("ddp", "fsdp", "hsdp", "horovod", "mwms")
# PyTorch's FSDP2: parameters, gradients and optimizer state sharded over all ranks, or within nodes (hsdp)
SHARDING_BACKENDS = ("fsdp", "hsdp")
# What trains: PyTorch (trainers/loop.py) or TensorFlow (trainers/tf/, its own processes: the thesis's third
# framework). TensorFlow runs the throughput benchmark only, with Horovod's gradient tape or TF's own
# MultiWorkerMirroredStrategy ("mwms"), on synthetic data, ResNet-50 or the local scale's CIFAR ResNets.
FRAMEWORKS = ("pytorch", "tensorflow")
TF_BACKENDS = ("horovod", "mwms")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
# Tables in an experiment's config.toml that are not trainer settings.
NON_TRAINER_TABLES = ("study", "scale")
# The models trainers/models.py builds: torchvision's ImageNet ResNets by name, the CIFAR-style ResNets by depth.
IMAGENET_RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101")
CIFAR_RESNET_DEPTHS = {"cifar_resnet8": 8, "cifar_resnet14": 14, "cifar_resnet20": 20}
MODELS = (*IMAGENET_RESNETS, *CIFAR_RESNET_DEPTHS)
# The data kinds the built-in vision workload reads: ILSVRC-2012 folders, the generated miniature, random tensors.
# The plug-in workloads (workloads/) declare their own models and data kinds, and train on synthetic data too.
VISION_DATA_KINDS = ("imagefolder", "generated", "synthetic")
TF_MODELS = ("resnet50", *CIFAR_RESNET_DEPTHS)  # the Keras models trainers/tf/models.py builds alike
MAX_GENERATED_SIZE = 512  # px: the generated data set is a miniature (32 px at the local scale)
# Upper bounds of sizes and counts: far above anything the thesis or the miniature runs, far below what fills a disk
# or memory before the first epoch (10^9 images a class wrote 2 GB of cache; 2^63 epochs exhausted memory).
LIMITS = {
    "train.epochs": 10_000,  # the thesis 90, the local scale 72, the longest study 360
    "train.workers": 1_024,  # the thesis 1-32 GPUs
    "train.per_worker_batch": 8_192,  # the thesis 32-256
    "train.max_steps": 100_000_000,  # 90 ImageNet epochs at 1 GPU are 0.9M steps
    "data.image_size": 1_024,  # ImageNet crops 224
    "data.classes": 100_000,
    "data.per_class": 100_000,  # the local scale 160
    "data.val_per_class": 100_000,
    "data.synthetic_images": 2_000_000,  # ImageNet's 1.28M an epoch
    "data.max_image_pixels": 1_000_000_000,  # Pillow's bomb limit is 89.5 Mpx; a gigapixel image is 3 GB decoded
    "model.num_classes": 100_000,
    "model.width": 1_024,
    "bench.batches": 1_000_000,
    "bench.warmup_batches": 1_000_000,
    # torch's generators take 64 bits: the seed plus an epoch, a rank or a study's seed index must still fit
    "train.seed": 2**63 - 1,
}
# train.cpu_isa: the CPU kernels' instruction set, pinned through the two variables ATen and oneDNN read when they
# first dispatch (so they must be in the environment before torch starts). "" = the CPU's best (unpinned).
# A committed reference reruns bit-identically on a newer CPU only with the reference's ISA (and threads).
CPU_ISAS = {
    "default": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
}
MAX_GENERATED_IMAGES = 2_000_000  # training and validation images of the generated set (~1 KB each at 32 px)


class ConfigError(ValueError):
    """A user's mistake in a config, an override or the launch; its message is one line that says what to fix."""


class DataError(ValueError):
    """A data problem the user must fix (missing folder, bad arguments); one clear line. Here, beside ConfigError,
    so the study runner and the tools catch it without importing the data module (and torch)."""


class BatchTooLarge(ConfigError):
    """A global batch larger than the generated training set (check_batch_fits): a QUICK study leaves such a run
    out with a line (its 800 images hold no batch of 1,024); a full study refuses it."""


# ----------------------------------------------------------------------------------------------------------------
# The schema
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelConfig:
    name: str = "resnet50"  # torchvision resnet18/34/50/101, cifar_resnet8/14/20 for the local scale, or a plug-in's
    num_classes: int = 1000  # the ResNets' outputs (a plug-in's model has its own: a GPT's vocabulary)
    width: int = 16  # first-stage channels of the CIFAR-style ResNets


@dataclass(frozen=True)
class DataConfig:
    kind: str = "imagefolder"  # ILSVRC-2012 folders, the generated miniature, random tensors, or a plug-in's (ALLOWED)
    path: str = ""  # the ILSVRC-2012 root holding train/ and val/ (imagefolder); a plug-in's data (gpt: a corpus)
    image_size: int = 224
    loader_workers: int = 4  # the thesis's 4 loader threads per GPU
    val_mode: str = "every_rank"  # the thesis's scripts validate the full set on every rank; or "sharded"
    # imagefolder: "cpu" (decode only the crop, uint8), "gpu" (nvJPEG), "pil" (torchvision's) or "dali" (NVIDIA DALI)
    decoder: str = "cpu"
    max_image_pixels: int = 89_478_485  # larger images (by their header) count as unreadable: Pillow's bomb limit
    # the generated dataset (made on first use into .cache/; see trainers/data/generate.py)
    classes: int = 100
    per_class: int = 200
    val_per_class: int = 50
    data_seed: int = 0
    synthetic_images: int = 2560  # images per epoch of the synthetic kind
    # > 0: this share of each class's training images (its last ones, at least one) is held out of training and
    # validated on instead of the validation set: a tuning run's selection set, so rates chosen on it never see the
    # validation set (a share, not a count: the same row holds at every scale and in QUICK's small set)
    holdout_share: float = 0.0
    # A token kind's (a plug-in's corpus, workloads/gpt/): > 0, an epoch trains on this many tokens of the training
    # split, in windows spread evenly over all of it (the same windows every epoch: a budget in tokens, as per_class
    # is the generated set's in images), and validation reads this many of the validation split, spread the same
    # way; 0: all of the split. A study's token budget a run is train_tokens x train.epochs at every worker count.
    train_tokens: int = 0
    val_tokens: int = 0


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 90
    per_worker_batch: int = 128
    workers: int = 1  # data-parallel workers (GPUs in the thesis; emulated workers at the local scale)
    backend: str = "auto"
    seed: int = 0
    print_freq: int = 10
    device: str = "auto"  # auto: the GPU where there is one
    threads: int = 0  # torch intra-op threads per process; 0 = torch's default
    init_method: str = ""  # "" = env:// from the launcher; "file:///shared/path" = the thesis's shared-file init
    checkpoint: bool = True
    # how the model computes (trainers/compute.py); the thesis's P100s ran strict fp32
    precision: str = "fp32"  # "fp32" (IEEE, TF32 off) | "tf32" | "bf16" / "fp16" (autocast; fp16 with a grad scaler)
    channels_last: bool = False  # NHWC memory layout (tensor cores' native layout)
    compile: bool = False  # torch.compile the (wrapped) model
    cudnn_benchmark: bool = True  # cuDNN autotuning, as the thesis's scripts; off under deterministic
    deterministic: bool = False  # deterministic kernels: a resumed GPU run ends bit-identical (slower)
    workers_per_pass: int = 0  # emulated workers per forward/backward; 0 = auto (all on CPU, what fits on a GPU)
    cpu_isa: str = ""  # the CPU kernels' instruction set: "" (the CPU's best) | "default" | "avx2" | "avx512"
    # A smoke run (QUICK=1 at the ImageNet scales): stop after this many optimizer steps in all, the epoch they end in
    # validated on as many batches and recorded as the last; 0 = the whole schedule. The schedule is the full run's.
    max_steps: int = 0
    # > 0: the run ends, completed, after the first epoch whose validation top-1 (percent) reaches this: a steps-to-
    # target study needs nothing later, and with no decay tied to the run's length the epochs before are unchanged
    stop_at_top1: float = 0.0
    # > 0: also evaluate every this many optimizer steps inside an epoch (an `eval` record each; a run with
    # stop_at_top1 ends at the first such evaluation that reaches it): steps to a target counted at k steps, not epochs
    eval_every: int = 0
    framework: str = "pytorch"  # one of FRAMEWORKS: "tensorflow" is trainers/tf/'s benchmark (TF_BACKENDS)


# sgd as the thesis ran; the large-batch ones of experiment 12; adamw, the GPT workload's (experiment 15)
OPTIMIZERS = ("sgd", "lars", "lamb", "radam", "adamw")


@dataclass(frozen=True)
class OptimConfig:
    name: str = "sgd"  # one of OPTIMIZERS (trainers/optimizers.py builds them)
    momentum: float = 0.9  # sgd, lars
    weight_decay: float = 1e-4
    trust_coefficient: float = 0.001  # lars: the trust ratio's coefficient (You et al. 2017)
    exclude_bn_bias: bool = True  # lars, lamb, adamw: norm and bias tensors neither adapted nor decayed
    beta1: float = 0.9  # lamb, radam, adamw: Adam's averaging of the gradient
    beta2: float = 0.999  # lamb, radam, adamw: and of its square


@dataclass(frozen=True)
class LrConfig:
    base: float = 0.1  # per `base_batch` images: pytorch/examples' 0.1 at 256
    base_batch: int = 256
    scaling: str = "none"  # "none" (naive) | "linear" (Goyal et al.) | "sqrt"
    warmup: str = "none"  # "none" | "stepping" (app. 9) | "gradual" (app. 13, 15) | "goyal" (per iteration)
    warmup_epochs: int = 5
    decay: str = "step"  # "step" (/10 every step_every epochs) | "milestones" | "poly" (to 0 over the run) | "none"
    step_every: int = 30
    milestones: tuple[int, ...] = (30, 60, 80)
    gamma: float = 0.1
    power: float = 2.0  # decay = "poly": target x (1 - progress) ** power after warm-up (the LARS papers' 2)


# The thesis read the running-mean batch time printed at training batch 199 (0-based): the benchmark mode reads its
# rate there (trainers/bench.py), the analysis reads upstream logs and runs there (analysis/numbers.py).
THESIS_BATCH_INDEX = 199


@dataclass(frozen=True)
class BenchConfig:
    batches: int = 0  # > 0: benchmark mode, time this many training batches instead of training
    warmup_batches: int = 0  # untimed batches before them


@dataclass(frozen=True)
class HorovodConfig:
    fp16_allreduce: bool = False  # the thesis turned compression off for a fair comparison
    batches_per_allreduce: int = 1  # local gradient accumulation; large values isolate compute from communication
    timeline: bool = False  # write a Horovod Timeline into the run folder


@dataclass(frozen=True)
class TelemetryConfig:
    interval_s: float = 5.0  # seconds between utilisation samples (trainers/telemetry.py); 0 = no sampler


# The values a setting may take, declared once: `validate` refuses any other naming these, and `python -m trainers
# config` prints them beside the setting.
ALLOWED: dict[str, tuple[str, ...]] = {
    "model.name": (*MODELS, *workloads.models()),
    "data.kind": (*VISION_DATA_KINDS, *workloads.data_kinds()),
    "data.val_mode": ("every_rank", "sharded"),
    "data.decoder": ("cpu", "gpu", "pil", "dali"),
    "train.backend": BACKENDS,
    "train.framework": FRAMEWORKS,
    "train.device": ("auto", "cpu", "cuda"),
    "train.precision": PRECISIONS,
    "train.cpu_isa": ("", *CPU_ISAS),
    "optim.name": OPTIMIZERS,
    "lr.scaling": lr_policy.SCALINGS,
    "lr.warmup": lr_policy.WARMUPS,
    "lr.decay": lr_policy.DECAYS,
}

SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "optim": OptimConfig,
    "lr": LrConfig,
    "bench": BenchConfig,
    "horovod": HorovodConfig,
    "telemetry": TelemetryConfig,
}


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    lr: LrConfig = field(default_factory=LrConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    horovod: HorovodConfig = field(default_factory=HorovodConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    experiment: str = "run"
    scale: str = "thesis"

    # ---- what follows from the settings (saved as config.json "resolved") -------------------------------------
    @property
    def global_batch(self) -> int:
        return self.train.workers * self.train.per_worker_batch * self.horovod.batches_per_allreduce

    def lr_policy(self) -> lr_policy.Policy:
        lr = self.lr
        per_worker = self.train.per_worker_batch * self.horovod.batches_per_allreduce
        same = ("warmup", "warmup_epochs", "decay", "step_every", "milestones", "gamma", "power")  # as [lr] says
        return lr_policy.Policy(target=lr_policy.scaled_lr(lr.base, lr.base_batch, self.global_batch, lr.scaling),
                                start=lr_policy.single_worker_lr(lr.base, lr.base_batch, per_worker),
                                epochs=self.train.epochs, **{name: getattr(lr, name) for name in same})

    def framework(self, backend: str | None = None) -> str:
        """What the run measures: Horovod+PyTorch, PyTorch (DDP, DP, one process) or emulated workers; or
        Horovod+TensorFlow and TensorFlow (its MultiWorkerMirroredStrategy)."""
        backend = backend or self.train.backend
        if self.train.framework == "tensorflow":
            return "horovod+tensorflow" if backend == "horovod" else "tensorflow"
        return {"horovod": "horovod+pytorch", "emulated": "emulated"}.get(backend, "pytorch")

    def to_dict(self) -> dict[str, Any]:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    def resolved(self, backend: str | None = None) -> dict[str, Any]:
        policy = self.lr_policy()
        return {
            "world_size": self.train.workers,
            "global_batch": self.global_batch,
            "lr": policy.target,
            "warmup_start_lr": policy.start if self.lr.warmup in ("gradual", "goyal") else None,
            "framework": self.framework(backend),
            "backend": backend or self.train.backend,
            "schedule": lr_policy.schedule(policy, self.train.epochs),
        }


# ----------------------------------------------------------------------------------------------------------------
# Loading and overriding
# ----------------------------------------------------------------------------------------------------------------
UTF8_BOM = b"\xef\xbb\xbf"  # what some editors (Windows Notepad) put before UTF-8 text; tomllib reads it as a key


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; pass an experiments/NN_name/config.toml") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a folder; pass an experiments/NN_name/config.toml") from None
    bom = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
    try:
        return tomllib.loads(data[bom:].decode())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None
    except UnicodeDecodeError as e:  # TOML is UTF-8 text
        raise ConfigError(f"{path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start + bom}); "
                          "save it as UTF-8") from None


def find_scales_file(config_path: Path) -> Path | None:
    """experiments/scales.toml: the settings every experiment shares at a scale (the miniature's model, data...)."""
    for folder in config_path.resolve().parents:
        candidate = folder / "scales.toml"
        if candidate.is_file():
            return candidate
    return None


def parse_override(text: str) -> tuple[str, str, Any]:
    """`section.key=value` -> (section, key, value); the value is read as TOML, else taken as a bare string."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"--set {text!r}: write section.key=value, e.g. --set train.epochs=2")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return section, key, value


def merge(into: dict[str, dict[str, Any]], tables: dict[str, Any], origin: str) -> None:
    for section, values in tables.items():
        if section in NON_TRAINER_TABLES:
            continue
        if section not in SECTIONS:
            raise ConfigError(f"unknown section [{section}] in {origin}; known: {', '.join(SECTIONS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"{section} in {origin} must be a table of settings, not {values!r}")
        into.setdefault(section, {}).update(values)


def check_type(section: str, key: str, value: Any, default: Any) -> Any:
    """Coerce what is safe (int -> float, list -> tuple) and refuse the rest with one line."""
    where = f"{section}.{key}"
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, tuple):
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        value = tuple(value) if ok else value
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(f"{where} = {value!r} has the wrong type; expected {type(default).__name__} like {default!r}")
    return value


def build(values: dict[str, dict[str, Any]], experiment: str, scale: str, need_data: bool = True,
          expand: bool = True) -> Config:
    """The sections' values as a validated Config. expand: $VARIABLES in data.path read here; a study's plan keeps
    them as written, so each run reads them where it starts (a node-local path)."""
    sections = {}
    for name, cls in SECTIONS.items():
        defaults = cls()
        given = values.get(name, {})
        known = {f.name for f in dataclasses.fields(cls)}
        for key in given:
            if key not in known:
                raise ConfigError(f"unknown key {name}.{key}; known keys of [{name}]: {', '.join(sorted(known))}")
        typed = {k: check_type(name, k, v, getattr(defaults, k)) for k, v in given.items()}
        if expand and name == "data" and "path" in typed:  # "$IMAGENET_DIR", "${TMPDIR}/ilsvrc2012"
            typed["path"] = os.path.expandvars(typed["path"])
        sections[name] = dataclasses.replace(defaults, **typed)
    cfg = Config(**sections, experiment=experiment, scale=scale)
    validate(cfg, need_data)
    return cfg


def load_config(path: str | Path, scale: str = "local", overrides: list[str] = (), need_data: bool = True,
                settings: dict[str, Any] | None = None, expand: bool = True) -> Config:
    """Read an experiment's config at a scale, apply `--set` overrides, then a study run's own `settings`
    ("section.key" -> value, as [study] declares them), validate. need_data=False: for commands that only print
    (schedule, config, a plan priced by `make cost`), an empty data.path is not an error."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.toml"
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    document = read_toml(path)
    values: dict[str, dict[str, Any]] = {}
    merge(values, document, str(path))
    scales_file = find_scales_file(path)
    if scales_file is not None:
        shared = read_toml(scales_file).get(scale, {})
        merge(values, shared, f"{scales_file} [{scale}]")
    merge(values, document.get("scale", {}).get(scale, {}), f"{path} [scale.{scale}]")
    for text in overrides:
        section, key, value = parse_override(text)
        merge(values, {section: {key: value}}, f"--set {text}")
    for dotted, value in (settings or {}).items():
        section, key = dotted.split(".", 1)
        merge(values, {section: {key: value}}, f"the study's {dotted}")
    experiment = path.parent.name if path.name == "config.toml" else path.stem  # experiments/05_x/config.toml: 05_x
    return build(values, experiment, scale, need_data, expand)


def chosen_backend(cfg: Config, launcher: str = "none", world_size: int = 1) -> str:
    """train.backend, or for "auto" what the launch implies: Horovod under horovodrun, DDP for several processes,
    emulated workers for W > 1 in one process, else one worker alone. A study plans with no launch yet (the
    defaults); the trainer asks again under its launcher."""
    if cfg.train.backend != "auto":
        return cfg.train.backend
    if launcher == "horovodrun":
        return "horovod"
    if world_size > 1:
        return "ddp"
    return "emulated" if cfg.train.workers > 1 else "single"


# What a node may still say of a run resolved before it started (slurm/job.sh): where its copy of the data is, and
# how its ranks meet. Neither enters the fingerprint (contract/fingerprint.py IGNORED): the run stays the plan's.
WHERE_IT_RUNS = ("data.path", "train.init_method")


def load_planned(path: Path, overrides: list[str] = ()) -> Config:
    """A run's config.json, written by the study that planned it: the run exactly as planned, with `--set` only for
    WHERE_IT_RUNS."""
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: a study writes a run's config.json as it starts the run "
                          "(python -m suite study ...); to train from an experiment give its config.toml") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} is not a readable config.json ({e}); re-plan the run with its study") from None
    if not isinstance(document, dict):  # valid JSON, but a list or a number: no section to read
        raise ConfigError(f"{path} holds a JSON {type(document).__name__}, not an object of sections; re-plan the "
                          "run with its study") from None
    if document.get("scale") not in SCALES:
        raise ConfigError(f"{path}: scale = {document.get('scale')!r} is not one of {', '.join(SCALES)}; the file "
                          "was edited after its study planned it: re-plan the run with its study")
    cfg = from_dict(document, overrides, str(path))
    check_resolved(path, document, cfg)
    return cfg


def check_resolved(path: Path, document: dict[str, Any], cfg: Config) -> None:
    """What a planned config.json says follows from its settings ("resolved": global batch, rate, schedule...) is
    what they give. The trainer trains the settings, so a file edited by hand would train one run and read as
    another; one line names the first value that differs."""
    written = document.get("resolved")
    if not isinstance(written, dict):
        raise ConfigError(f"{path} has no resolved section; re-plan the run with its study")
    given = json.loads(json.dumps(cfg.resolved(written.get("backend")), default=list))
    for key, value in given.items():  # a key added since the file was written is not an edit
        if key in written and written[key] != value:
            raise ConfigError(f"{path}: resolved.{key} = {written.get(key)!r}, but its settings give {value!r}; the "
                              "file was edited after its study planned it: re-plan the run with its study")


def from_dict(document: dict[str, Any], overrides: list[str] = (), origin: str = "the saved config.json") -> Config:
    """Rebuild a Config from a run folder's config.json (a planned run, --resume, the analysis); `--set` overrides
    only for WHERE_IT_RUNS."""
    values: dict[str, dict[str, Any]] = {}
    merge(values, {k: v for k, v in document.items() if k in SECTIONS}, origin)
    for text in overrides:
        section, key, value = parse_override(text)
        if f"{section}.{key}" not in WHERE_IT_RUNS:
            raise ConfigError(f"--set {text}: {origin} is a resolved run; only {' and '.join(WHERE_IT_RUNS)} may be "
                              "set where it runs (change the experiment's config or the study's --set and re-plan)")
        merge(values, {section: {key: value}}, f"--set {text}")
    return build(values, document.get("experiment", "run"), document.get("scale", "thesis"))


# ----------------------------------------------------------------------------------------------------------------
# Validation: impossible values are refused here, not ten hours into a run
# ----------------------------------------------------------------------------------------------------------------
# Sizes, counts and rates that must be > 0, and those that must be >= 0 (the others have lines of their own below)
POSITIVE = ("train.epochs", "train.per_worker_batch", "train.workers", "train.print_freq", "model.num_classes",
            "model.width", "data.image_size", "data.max_image_pixels", "lr.base", "lr.base_batch", "lr.step_every",
            "lr.gamma", "lr.power", "horovod.batches_per_allreduce", "optim.trust_coefficient")
NOT_NEGATIVE = ("optim.momentum", "optim.weight_decay", "train.seed", "data.data_seed", "telemetry.interval_s",
                "data.train_tokens", "data.val_tokens")


def value_of(cfg: Config, where: str) -> Any:
    section, key = where.split(".")
    return getattr(getattr(cfg, section), key)


def positive(where: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{where} = {value} must be > 0")


def not_negative(where: str, value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ConfigError(f"{where} = {value} must be >= 0")


def cpu_isa_env(cpu_isa: str) -> dict[str, str]:
    """The environment that pins the CPU kernels' instruction set (empty: unpinned)."""
    return dict(CPU_ISAS.get(cpu_isa, {}))


def check_writable(folder: Path) -> None:
    """The run folder can be made and written: probed in its nearest existing parent, which is left as it was."""
    blocked = blocking_path(folder)
    if blocked:
        path, why = blocked
        link = f"remove the link (rm {path}) or " if path.is_symlink() else ""
        raise ConfigError(f"output folder {folder} cannot be made: {why}; {link}pick another --out or --run")
    parent = Path(folder).absolute()
    while not parent.exists():
        parent = parent.parent
    try:
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as e:
        raise ConfigError(f"output folder {folder} cannot be written ({parent}: {e.strerror}); "
                          "pick another --out") from None


def blocking_path(folder: Path) -> tuple[Path, str] | None:
    """What keeps `folder` from being a folder, or None: the nearest of it and its parents that is there is a file,
    or a symbolic link that leads to no folder -- one to a path that does not exist (making the folder then fails
    with "File exists") or a loop (opening it fails with "Too many levels of symbolic links"). (path, why)."""
    for path in (Path(folder).absolute(), *Path(folder).absolute().parents):
        if path.is_dir():  # follows links: a link to a folder is one
            return None
        if path.is_symlink():
            target = os.readlink(path)
            try:
                os.stat(path)
            except OSError as e:
                return path, (f"{path} is a symbolic link that loops ({path} -> {target})" if e.errno == errno.ELOOP
                              else f"{path} is a symbolic link to {target}, which does not exist")
            return path, f"{path} is a symbolic link to {target}, which is a file"
        if os.path.lexists(path):
            return path, f"{path} is a file"
    return None


def validate(cfg: Config, need_data: bool = True) -> None:
    """Refuse a config that cannot run, in one line, before any folder or data is made (in this order)."""
    for where, allowed in ALLOWED.items():
        if value_of(cfg, where) not in allowed:
            raise ConfigError(f"{where} = {value_of(cfg, where)!r} is not one of {', '.join(allowed)}")
    check_workload_data(cfg)
    check_ranges(cfg)
    check_data_sizes(cfg)
    check_train_choices(cfg.train)
    for where in ("optim.beta1", "optim.beta2"):
        if not 0.0 <= value_of(cfg, where) < 1.0:
            raise ConfigError(f"{where} = {value_of(cfg, where)} must be in [0, 1)")
    if cfg.data.loader_workers < 0 or cfg.train.threads < 0:
        raise ConfigError("data.loader_workers and train.threads must be >= 0")
    check_schedule(cfg.lr, cfg.train.epochs)
    check_bench_data_and_backend(cfg, need_data)
    check_tensorflow(cfg)


def check_workload_data(cfg: Config) -> None:
    """A model trains on its workload's data kinds (and synthetic data): a plug-in's on those it declares, the
    built-in vision models on images."""
    owner = workloads.owning(cfg.model.name)
    kinds = (*owner.data_kinds, "synthetic") if owner else VISION_DATA_KINDS
    if cfg.data.kind not in kinds:
        raise ConfigError(f"model.name = {cfg.model.name!r} trains on data.kind {' or '.join(map(repr, kinds))}, "
                          f"not {cfg.data.kind!r}")


def check_tensorflow(cfg: Config) -> None:
    """What the TensorFlow trainer (trainers/tf/) can run, and the one backend only it has."""
    t = cfg.train
    if t.framework != "tensorflow":
        if t.backend == "mwms":
            raise ConfigError("train.backend = 'mwms' is TensorFlow's MultiWorkerMirroredStrategy: set "
                              "train.framework = 'tensorflow' too")
        return
    if t.backend not in TF_BACKENDS:
        choices = " or ".join(map(repr, TF_BACKENDS))
        raise ConfigError(f"train.framework = 'tensorflow' trains with train.backend = {choices}, not {t.backend!r}")
    unsupported = [(cfg.bench.batches > 0, "bench.batches > 0 (it runs the throughput benchmark only)"),
                   (cfg.data.kind == "synthetic", "data.kind = 'synthetic'"),
                   (cfg.model.name in TF_MODELS, f"model.name one of {', '.join(TF_MODELS)}"),
                   (t.precision == "fp32", "train.precision = 'fp32'"),
                   (not (t.compile or t.channels_last), "train.compile and train.channels_last off"),
                   (t.workers_per_pass == 0, "train.workers_per_pass = 0 (a process a worker, none emulated)"),
                   (t.max_steps == 0, "train.max_steps = 0")]
    for ok, needed in unsupported:
        if not ok:
            raise ConfigError(f"train.framework = 'tensorflow' needs {needed}")


def check_ranges(cfg: Config) -> None:
    """POSITIVE, then LIMITS (before any folder or cache is written), then NOT_NEGATIVE."""
    for where in POSITIVE:
        positive(where, value_of(cfg, where))
    d = cfg.data
    if d.kind == "generated" and d.image_size > MAX_GENERATED_SIZE:  # a typo (3200 for 32): terabytes of JPEGs
        raise ConfigError(f"data.image_size = {d.image_size} is too large for the generated data set "
                          f"(at most {MAX_GENERATED_SIZE} px)")
    for where, limit in LIMITS.items():
        if value_of(cfg, where) > limit:
            raise ConfigError(f"{where} = {value_of(cfg, where)} is more than this suite's limit of {limit:,}; "
                              "use a smaller value")
    for where in NOT_NEGATIVE:
        not_negative(where, value_of(cfg, where))


def check_train_choices(t: TrainConfig) -> None:
    if t.max_steps < 0:
        raise ConfigError(f"train.max_steps = {t.max_steps} must be >= 0 (0 = no cap: the whole schedule)")
    if not 0 <= t.stop_at_top1 <= 100:
        raise ConfigError(f"train.stop_at_top1 = {t.stop_at_top1} must be a top-1 in percent, 0-100 (0 = never stop)")
    if t.eval_every < 0:
        raise ConfigError(f"train.eval_every = {t.eval_every} must be >= 0 (0 = evaluate once an epoch, at its end)")
    if t.workers_per_pass < 0:
        raise ConfigError(f"train.workers_per_pass = {t.workers_per_pass} must be >= 0 (0 = as many as fit)")
    if t.workers_per_pass and t.backend in ("single", "dp"):  # ddp/horovod: emulated workers when W > processes
        raise ConfigError(f"train.workers_per_pass splits emulated workers into passes; train.backend = "
                          f"{t.backend!r} has none (use backend = 'emulated', 'ddp' or 'horovod', or leave it 0)")


def check_schedule(lr: LrConfig, epochs: int) -> None:
    """The warm-up fits the run, and the milestones increase and lie inside it."""
    if lr.warmup != "none" and not 0 < lr.warmup_epochs < epochs:
        raise ConfigError(
            f"lr.warmup_epochs = {lr.warmup_epochs} must be between 1 and train.epochs - 1 = {epochs - 1}"
        )
    not_negative("lr.warmup_epochs", lr.warmup_epochs)  # without a warm-up too: a -1 would be a silent typo
    if lr.decay == "milestones":
        if list(lr.milestones) != sorted(set(lr.milestones)):
            raise ConfigError(f"lr.milestones = {list(lr.milestones)} must increase strictly")
        late = [m for m in lr.milestones if not 0 < m < epochs]
        if late:
            raise ConfigError(
                f"lr.milestone {late[0]} is beyond the last epoch ({epochs - 1}); lower it or raise train.epochs"
            )


def check_bench_data_and_backend(cfg: Config, need_data: bool) -> None:
    """The benchmark's counts, the data path where data is needed, and the backend's settings: the rendezvous's
    form, one worker for `single`, [horovod] only for Horovod. The config on its own, where it runs unseen (that is
    trainers/checks.py's check_launch)."""
    t, d = cfg.train, cfg.data
    if cfg.bench.batches < 0 or cfg.bench.warmup_batches < 0:
        raise ConfigError("bench.batches and bench.warmup_batches must be >= 0")
    if need_data and d.kind == "imagefolder" and not d.path:
        raise ConfigError("data.path is empty; set it to the ILSVRC-2012 root (holding train/ and val/)")
    if t.init_method and not t.init_method.startswith(("file://", "tcp://", "env://")):
        raise ConfigError(f"train.init_method = {t.init_method!r} must start with file://, tcp:// or env://")
    if t.backend in ("single",) and t.workers != 1:
        raise ConfigError(f"train.backend = 'single' runs one worker, but train.workers = {t.workers}")
    if t.backend != "horovod" and cfg.horovod != HorovodConfig():
        raise ConfigError("[horovod] settings need train.backend = 'horovod'")


def check_data_sizes(cfg: Config) -> None:
    """The generated / synthetic data set's sizes, against each other and the model (before anything is made)."""
    d, m = cfg.data, cfg.model
    if d.kind == "generated":
        for where, value in [("data.classes", d.classes), ("data.per_class", d.per_class),
                             ("data.val_per_class", d.val_per_class)]:
            positive(where, value)
        images = d.classes * (d.per_class + d.val_per_class)
        if images > MAX_GENERATED_IMAGES:
            raise ConfigError(f"the generated data set would hold {images:,} images (data.classes x (per_class + "
                              f"val_per_class)); at most {MAX_GENERATED_IMAGES:,}: lower data.per_class")
        if d.classes > m.num_classes:
            raise ConfigError(f"data.classes = {d.classes} is more than model.num_classes = {m.num_classes}; "
                              f"the model must have an output for every class (raise model.num_classes)")
    if d.kind == "synthetic":
        positive("data.synthetic_images", d.synthetic_images)
    check_holdout(d)
    check_batch_fits(cfg)


def held_out_count(share: float, images: int) -> int:
    """How many of a class's `images` a held-out split of `share` takes: its floor, at least one (0 for no split)."""
    return max(1, int(share * images)) if share > 0 else 0


def check_holdout(d: DataConfig) -> None:
    """A held-out split needs labelled training images to hold out, and some left to train on."""
    share = d.holdout_share
    if not 0 <= share < 1:
        raise ConfigError(f"data.holdout_share = {share} must be a share of each class's images in [0, 1) "
                          "(0 = no held-out split)")
    if share and d.kind == "synthetic":
        raise ConfigError("data.holdout_share needs labelled images (data.kind generated or imagefolder); "
                          "synthetic data has nothing to hold out")
    if share and d.kind == "generated" and held_out_count(share, d.per_class) >= d.per_class:
        raise ConfigError(f"data.holdout_share = {share} leaves no training image of the {d.per_class} a class "
                          "(data.per_class); hold out a smaller share")


def check_batch_fits(cfg: Config) -> None:
    """A global batch larger than the generated training set is one step an epoch at a huge rate: a mistake, not a
    run. (Synthetic data is for timing, where any size will do.)"""
    d = cfg.data
    images = d.classes * (d.per_class - held_out_count(d.holdout_share, d.per_class))
    benchmark = cfg.bench.batches > 0  # timed steps on a repeated loader
    if d.kind == "generated" and not benchmark and cfg.global_batch > images:
        raise BatchTooLarge(f"the global batch ({cfg.global_batch} = train.workers x train.per_worker_batch) is larger "
                          f"than the {images:,} training images; lower train.per_worker_batch or train.workers")
