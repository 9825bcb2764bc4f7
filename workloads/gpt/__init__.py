"""A GPT-style decoder (nanoGPT's GPT-2 shapes, written here) trained on byte-level tokens of a text corpus.

    sizes.py    the presets and their arithmetic: parameters, model FLOPs a token (PaLM's appendix B); no torch
    model.py    the decoder
    corpus.py   a folder of text -> train.bin / val.bin (flat uint16 tokens) and a dataset of context windows
    prepare.py  python -m workloads.gpt.prepare SRC_DIR OUT_DIR
    build.py    what the trainer builds a run from (workloads/__init__.py lists it): model, data, batches, FLOPs

Declared here without torch: the model names, the data kind ("tokens": data.path a prepared corpus folder, or at
the local scale, empty, Debian's python3.11-doc prepared on first use) and the tokens a sample (the context).
"""
from workloads import Workload
from workloads.gpt.sizes import PRESETS

WORKLOAD = Workload(
    name="gpt",
    models=tuple(PRESETS),
    data_kinds=("tokens",),
    tokens_per_sample={name: sizes.context for name, sizes in PRESETS.items()},
    builder="workloads.gpt.build",
)
