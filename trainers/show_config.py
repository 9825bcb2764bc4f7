"""`python -m trainers config CONFIG [--scale S] [--set ...] [--json]`: the merged config a run would get.

JSON: the document a run saves as config.json (every setting, experiment, scale, and `resolved`: world size,
global batch, learning rate after the scaling rule, warm-up, the per-epoch schedule). TOML: every setting as
tables, which loads back as a config (`python -m trainers train printed.toml`), with the resolved values as
comments on top -- TOML has no null and they are results of the settings, not settings.
"""
from __future__ import annotations

import json
import math
from typing import Any

import workloads
from contract.config import ALLOWED, Config, DataConfig, ModelConfig

# Settings that only one data kind reads (trainers/data/datasets.py); any other key applies to every kind.
DATA_KIND_KEYS = {"imagefolder": ("path", "decoder", "max_image_pixels"),
                  "generated": ("classes", "per_class", "val_per_class", "data_seed"),
                  "synthetic": ("synthetic_images",)}
# a plug-in's data kind (workloads/) reads its data from data.path, as many tokens of it as these say
PLUGIN_DATA_KEYS = ("path", "train_tokens", "val_tokens")
CIFAR_ONLY = ("width",)  # the CIFAR-style ResNets' first-stage channels; torchvision's ResNets have their own
# the images' sizes: a plug-in's model (workloads/) has sizes of its own (a GPT's vocabulary, context, width)
IMAGE_ONLY = (("model", "num_classes"), ("model", "width"), ("data", "image_size"))


def not_applying(doc: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(section, key) -> why, for the settings the run's data kind or model never reads."""
    kind, name = doc["data"].get("kind"), str(doc["model"].get("name", ""))
    reads = DATA_KIND_KEYS.get(kind, PLUGIN_DATA_KEYS)
    out = {("data", key): f'data.kind = "{kind}" does not read it' for keys in (*DATA_KIND_KEYS.values(),
                                                                                 PLUGIN_DATA_KEYS)
           for key in keys if key not in reads}
    if workloads.owning(name):
        out.update({where: f'model.name = "{name}" does not read it' for where in IMAGE_ONLY})
    elif not name.startswith("cifar_"):
        out.update({("model", key): f'model.name = "{name}" does not read it' for key in CIFAR_ONLY})
    return out


def _default(section: str, key: str) -> Any:
    return getattr({"data": DataConfig, "model": ModelConfig}[section](), key)


def document(cfg: Config) -> dict[str, Any]:
    """What config.json holds for this config (before a launcher picks the backend of backend = "auto")."""
    resolved = cfg.resolved()
    lr = cfg.lr
    resolved["warmup"] = "none" if lr.warmup == "none" else f"{lr.warmup}, {lr.warmup_epochs} epochs"
    return {"experiment": cfg.experiment, "scale": cfg.scale, **cfg.to_dict(), "resolved": resolved}


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string: JSON's escapes are valid TOML escapes


def to_toml(doc: dict[str, Any]) -> str:
    res = doc["resolved"]
    lines = [f"# {doc['experiment']} at the {doc['scale']} scale, merged (defaults, scales.toml, the experiment's "
             "tables, --set)", "# resolved (what follows from the settings):"]
    for key, v in res.items():
        if key == "schedule":
            continue
        lines.append(f"#   {key} = {'none' if v is None else toml_value(v)}")
    lines.append("#   schedule (lr at the start of each epoch) = " + toml_value([round(x, 6) for x in res["schedule"]]))
    skip = not_applying(doc)
    hidden = sorted(f"{s}.{k}" for (s, k) in skip if doc[s].get(k) == _default(s, k))
    if hidden:  # at their defaults they change nothing, and loading the TOML back gives them again
        lines.append(f"# left out, not read by this data kind or model (at their defaults): {', '.join(hidden)}")
    for section, values in doc.items():
        if isinstance(values, dict) and section != "resolved":
            lines += ["", f"[{section}]"]
            for k, v in values.items():
                why = skip.get((section, k))
                if why and v == _default(section, k):
                    continue
                lines.append(f"{k} = {toml_value(v)}" + (f"  # set, but {why}" if why else allowed(f"{section}.{k}")))
    return "\n".join(lines) + "\n"


def allowed(key: str) -> str:
    """The comment naming a setting's allowed values, if it has a list of them."""
    return f"  # one of {', '.join(ALLOWED[key])}" if key in ALLOWED else ""


def show(cfg: Config, as_json: bool = False) -> str:
    doc = document(cfg)
    return json.dumps(doc, indent=2) + "\n" if as_json else to_toml(doc)
