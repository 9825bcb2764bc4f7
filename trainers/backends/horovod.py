"""Horovod+PyTorch: the thesis's second framework (Horovod 0.15.2 then; 0.28.1 here).

Every use of `horovod.torch` lives in this module, each line marked `# Horovod: ...` as in Horovod's examples:
hvd.init() and a GPU a rank; rank 0's parameters, buffers and optimizer state broadcast; hvd.DistributedOptimizer
(gradients averaged during backward, optionally fp16-compressed, optionally accumulated over
`horovod.batches_per_allreduce` passes); metrics summed with hvd.allreduce.

Horovod forms its world from its launcher (horovodrun, mpirun as the thesis did, srun --mpi=pmix); the launch is
checked before anything starts (backends.check_world) and Horovod's world against it after init. Timeline
(`horovod.timeline = true`): HOROVOD_TIMELINE=DYNAMIC before init, then `start_run` records into
run_dir/horovod_timeline.json; a file the launcher names wins.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.nn as nn

from trainers.launch import Launch
from trainers.backends.base import Backend, CommClock
from trainers.backends.rank_workers import RankWorkers
from contract.config import Config, ConfigError
from contract.versions import package_version

try:
    import horovod.torch as hvd  # Horovod: the PyTorch API
except ImportError as error:  # one line: trainers.backends.resolve turns it into "run `make setup-horovod`"
    first = (str(error).strip().splitlines() or ["horovod.torch cannot be imported"])[0]
    raise ImportError(first[:200]) from None

TIMELINE_FILE = "horovod_timeline.json"


class HorovodBackend(Backend):
    name = "horovod"

    def __init__(self, cfg: Config, launch: Launch, device: torch.device):
        super().__init__(cfg, launch, device)
        options = cfg.horovod
        self.timeline = options.timeline
        self.timeline_file: str | None = None
        self._timeline_started = False
        if options.timeline:
            # Horovod: the timeline machinery is only switched on by the environment at init; DYNAMIC = start later
            os.environ.setdefault("HOROVOD_TIMELINE", "DYNAMIC")
        hvd.init()  # Horovod: initialize (MPI under mpirun, Gloo under horovodrun's Gloo mode)
        self.rank, self.world_size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()  # Horovod's world
        if launch.world_size == 1:
            self.workers = hvd.size()  # else W logical workers over P ranks
        if launch.world_size > 1 and hvd.size() != launch.world_size:
            size = hvd.size()
            hvd.shutdown()
            raise ConfigError(
                f"Horovod formed a world of {size} but the {launch.launcher} launch has {launch.world_size} processes; "
                "start the horovod backend with `horovodrun -np N` or `mpirun -np N` (srun only with --mpi=pmix)"
            )
        if device.type == "cuda":
            index = hvd.local_rank() % torch.cuda.device_count()
            torch.cuda.set_device(index)  # Horovod: pin this process to its local GPU
            self.device = torch.device("cuda", index)
        self.fp16_allreduce = options.fp16_allreduce
        # W logical workers over P ranks (W > P): W/P emulated workers in this rank, their passes accumulated
        # locally before the one allreduce of the step (rank_workers.py)
        if self.workers > self.world_size:  # (batches_per_allreduce > 1 with it is refused before launch)
            self.local = RankWorkers(self.device, self.rank, self.world_size, self.workers, cfg.train.workers_per_pass)
            self.workers_per_pass = self.local.workers_per_pass
        # Horovod's example reads batch_size * batches_per_allreduce images a step and allreduces once after that
        # many backward passes of batch_size each: global batch = size * per_worker_batch * batches_per_allreduce.
        self.backward_passes_per_step = self.local.passes() if self.local else options.batches_per_allreduce
        self.batch_multiplier = options.batches_per_allreduce
        launcher_timeline = os.environ.get("HOROVOD_TIMELINE", "")
        if launcher_timeline and launcher_timeline != "DYNAMIC":
            self.timeline_file = launcher_timeline  # given by the launcher; Horovod records it from init

    # ---- the Backend interface ----------------------------------------------------------------------------------
    def wrap_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)  # Horovod needs no model wrapper: the optimizer does the allreduce
        return self.local.wrap_model(model) if self.local else model  # this rank's workers' own BatchNorms

    def micro_batches(self, images: torch.Tensor, target: torch.Tensor):
        if not self.local:
            return super().micro_batches(images, target)
        # Horovod: backward_passes_per_step = the passes, so their gradients accumulate before one allreduce
        return self.local.micro_batches(images, target)

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        # Horovod: fp16 compression halves the bytes on the wire; the thesis turned it off for a fair comparison
        compression = hvd.Compression.fp16 if self.fp16_allreduce else hvd.Compression.none
        distributed = hvd.DistributedOptimizer(  # Horovod: allreduce (average) the gradients during backward
            optimizer,
            named_parameters=model.named_parameters(),
            compression=compression,
            backward_passes_per_step=self.backward_passes_per_step,  # Horovod: local accumulation
            op=hvd.Average,
        )
        time_synchronize(distributed, self.comm)
        return distributed

    def broadcast_initial_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        # Horovod's broadcast_optimizer_state "initialises" an empty optimizer with one step on zero gradients, which
        # with weight decay moves the weights and fills momentum buffers (w -= lr*wd*w, buf = wd*w): a run would no
        # longer match DDP. A fresh optimizer has nothing to broadcast, so only a resumed one is broadcast, before the
        # parameters so that rank 0's weights overwrite anything that initialisation step touched.
        if self.any_rank(len(optimizer.state_dict()["state"]) > 0):
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)  # Horovod: rank 0's momentum buffers and lr
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # Horovod: rank 0's parameters and buffers

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        with self.comm.timing():
            return hvd.allreduce_(tensor, op=hvd.Sum)  # Horovod: sums of correct/total, not means of means

    def any_rank(self, flag: bool) -> bool:
        t = torch.tensor([1.0 if flag else 0.0])
        with self.comm.timing():
            return bool(hvd.allreduce_(t, op=hvd.Sum).item() > 0)  # Horovod: CPU tensor, any collective backend

    def barrier(self) -> None:
        hvd.barrier()  # Horovod

    def optimizer_step(self, optimizer: torch.optim.Optimizer, scaler=None) -> None:
        if scaler is None:
            optimizer.step()
            return
        optimizer.synchronize()  # Horovod: the allreduce finishes before the scaler reads the gradients for inf/NaN
        with optimizer.skip_synchronize():  # Horovod: ... and is not started again by step()
            scaler.step(optimizer)
        scaler.update()

    def gather_objects(self, obj) -> list:
        return hvd.allgather_object(obj)  # Horovod: every rank's object, in rank order

    def start_run(self, run_dir: str | Path) -> None:
        """Called on every rank once the run folder is known: start the Horovod Timeline there when asked."""
        if not self.timeline or self.timeline_file is not None:
            return
        self.timeline_file = str(Path(run_dir) / TIMELINE_FILE)
        hvd.start_timeline(self.timeline_file)  # Horovod: only the coordinator (rank 0) writes the file
        self._timeline_started = True

    def close(self) -> None:
        if not hvd.is_initialized():
            return
        if self._timeline_started:
            hvd.stop_timeline()  # Horovod: flush and close the timeline file
            self._timeline_started = False
        hvd.shutdown()  # Horovod

    def hosts(self) -> list[str]:
        return hvd.allgather_object(socket.gethostname())  # Horovod; rank order: which host each rank ran on

    def describe(self) -> dict:
        info = super().describe()
        info["horovod"] = {
            "version": package_version("horovod"),
            "controller": "mpi" if hvd.mpi_enabled() else "gloo",  # Horovod
            "nccl_built": bool(hvd.nccl_built()),  # Horovod
            "fp16_allreduce": self.fp16_allreduce,
            "batches_per_allreduce": self.batch_multiplier,
            "timeline": self.timeline_file,
        }
        return info


def time_synchronize(optimizer: torch.optim.Optimizer, clock: CommClock) -> None:
    """Count the time step() waits in synchronize() for the gradient allreduces (launched during backward, so this is
    the part backward did not hide) as communication."""
    synchronize = optimizer.synchronize

    def timed_synchronize() -> None:
        with clock.timing():
            synchronize()  # Horovod: wait for every outstanding allreduce of this step

    optimizer.synchronize = timed_synchronize  # step() calls self.synchronize()
