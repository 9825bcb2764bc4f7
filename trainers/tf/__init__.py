"""The TensorFlow trainer: the thesis's third framework in the throughput experiments 1-3 (`train.framework =
"tensorflow"`), started as `python -m trainers.tf train ...` in processes of its own.

Torch and TensorFlow never share a process (triton after TensorFlow segfaults in LLVM's start-up): nothing here
imports torch, and only bench.py, models.py and strategies.py import tensorflow.
"""
