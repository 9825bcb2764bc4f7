"""A run's config fingerprint: what makes two runs the same experiment condition, seeds apart.

The fingerprint is a short hash of the resolved config (every section of config.json, the scale) without what does
not change what is trained or measured: the seed (runs of one condition differ in it), names (experiment, run),
where data and outputs live (data.path: each machine has its own copy), how often lines are printed or checkpoints
written, and launcher details (init_method). The study runner counts a run folder as done only when its fingerprint
is the plan's; the analysis averages only runs that share one. Nothing here reads a file: a run folder's
fingerprint is contract/reader.py's folder_fingerprint.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from contract.config import SECTIONS, Config, ConfigError, from_dict

# section -> keys that do not enter the fingerprint
IGNORED: dict[str, tuple[str, ...]] = {
    "train": ("seed", "print_freq", "checkpoint", "init_method",
              "workers_per_pass",  # any pass size is the same SGD step; only its rounding differs
              "cpu_isa"),  # which kernels: the same condition, rounded differently (as another machine's)
    "data": ("path",),
    "horovod": ("timeline",),
    "telemetry": ("interval_s",),  # sampling utilisation changes nothing trained
}
# section -> keys added since runs were committed, left out at the value that reproduces those runs (their default),
# so a committed run keeps the fingerprint it had; any other value is another condition
OMITTED_AT: dict[str, dict[str, Any]] = {
    "train": {"max_steps": 0,  # 0: the whole schedule; a capped (smoke) run is another condition
              "stop_at_top1": 0.0,  # 0: never stopped at a target
              "eval_every": 0,  # 0: evaluated once an epoch, at its end
              "framework": "pytorch"},  # every run before TensorFlow's was PyTorch's
    "data": {"holdout_share": 0.0,  # 0: trained on every training image, validated on the validation set
             "train_tokens": 0, "val_tokens": 0},  # 0: a token corpus's whole splits (every run before experiment 15)
}


def fingerprint_of(sections: dict[str, Any], scale: str) -> str:
    """12 hex digits of a SHA-256 over the sections (ignored keys dropped) and the scale. A benchmark run
    (bench.batches > 0) times a number of steps: its epochs, step cap and learning-rate schedule change no timing,
    so they are left out too."""
    benchmark = is_benchmark(sections)
    ignored = {**IGNORED, "train": IGNORED["train"] + ("epochs", "max_steps")} if benchmark else IGNORED
    kept = {name: {k: v for k, v in (sections.get(name) or {}).items()
                   if k not in ignored.get(name, ()) and not _at_omitted_value(name, k, v)}
            for name in SECTIONS if not (benchmark and name == "lr")}
    text = json.dumps({"scale": scale, **kept}, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def is_benchmark(sections: dict[str, Any]) -> bool:
    """Whether a config's sections (config.json's, or a resolved config's dict) are a benchmark run's: bench.batches
    > 0 times that many steps instead of training."""
    return ((sections.get("bench") or {}).get("batches") or 0) > 0


def _at_omitted_value(section: str, key: str, value: Any) -> bool:
    omitted = OMITTED_AT.get(section, {})
    return key in omitted and value == omitted[key]


def config_fingerprint(cfg: Config) -> str:
    """The fingerprint a planned run will have."""
    return fingerprint_of(json.loads(json.dumps(cfg.to_dict(), default=list)), cfg.scale)


def document_fingerprint(document: dict[str, Any]) -> str:
    """The fingerprint of a config.json's contents. Read through the current schema first, so a key added since
    the run (with the value it had then as its default) does not make an old run another condition; a document the
    schema refuses (a key since removed) is hashed as it is."""
    try:
        return config_fingerprint(from_dict(document))
    except (ConfigError, TypeError, ValueError):
        return fingerprint_of(document, str(document.get("scale")))

