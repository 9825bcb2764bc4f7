"""The TensorFlow trainer: the thesis's third framework in the throughput experiments 1-3 (`train.framework =
"tensorflow"`), started as `python -m trainers.tf train ...` in processes of its own.

Torch and TensorFlow never share a process (importing triton after TensorFlow segfaults in LLVM's start-up, both
bundle one): nothing here imports torch, and nothing outside this package imports tensorflow. Only `bench.py`,
`models.py` and `strategies.py` import it; `cluster.py` (TF_CONFIG from the launcher) and `available.py` (is it
installed?) are plain Python, which the study and the tests import.
"""
