"""A TensorFlow run's processes on this machine (train.framework = "tensorflow", trainers/tf/), and the line that
skips it where TensorFlow is not installed. Its processes run `python -m trainers.tf`, never the PyTorch trainer:
torch and TensorFlow never share a process.

  horovod  horovodrun with Gloo, as the Horovod+PyTorch rows;
  mwms     the study starts the P workers itself, each told its rank, the world size and a fresh port in the
           environment torchrun would give it (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_PORT), from
           which the worker builds TF_CONFIG (trainers/tf/cluster.py); under Slurm, srun's environment.
"""
from __future__ import annotations

from trainers.rendezvous import free_port
from trainers.tf.available import skip_reason


def mwms_commands(ranks: int, trainer: list[str]) -> list[list[str]]:
    """One process a MultiWorkerMirroredStrategy worker, each told its place as torchrun would tell it."""
    port = free_port()
    return [["env", f"RANK={r}", f"WORLD_SIZE={ranks}", f"LOCAL_RANK={r}", f"LOCAL_WORLD_SIZE={ranks}",
             "MASTER_ADDR=127.0.0.1", f"MASTER_PORT={port}", *trainer] for r in range(ranks)]


def tf_skip_line(plan) -> str | None:
    """The progress line of a TensorFlow run that cannot run here; None for any other run, or one that can."""
    if plan.cfg.train.framework != "tensorflow":
        return None
    reason = skip_reason(plan.backend)
    return f"skipped: {reason}" if reason else None
