"""A GPT-style decoder (nanoGPT's GPT-2 shapes, written here) trained on byte-level tokens of a text corpus.

    model.py    the decoder, its size presets and its model FLOPs a token (PaLM's appendix B)
    corpus.py   a folder of text -> train.bin / val.bin (flat uint16 tokens) and a dataset of context windows
    prepare.py  python -m workloads.gpt.prepare SRC_DIR OUT_DIR
"""
