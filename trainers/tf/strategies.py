"""The TensorFlow trainer's two ways to average gradients over its processes, behind one small interface:

  horovod  Horovod+TensorFlow, the thesis's: a gradient tape whose gradients Horovod allreduces (averages);
  mwms     MultiWorkerMirroredStrategy: the optimizer sums the replicas' gradients of a loss scaled by the global
           batch, which is their average.

Each builds the model and optimizer where its variables belong, makes the training step (a tf.function) and gathers
a vector from every rank (bench.py's check that the weights agree). Weight decay is PyTorch's (coupled), the
optimizer SGD with momentum, as the thesis. TRAINERS_TF_FAULT=skip-averaging (a test's fault injection): each rank
steps on its own gradients, which the end-of-run check must catch.
"""
from __future__ import annotations

import json
import os
from contextlib import nullcontext

import numpy as np
import tensorflow as tf
import tf_keras as keras

from contract.config import Config, ConfigError
from contract.lr import lr_at
from trainers.tf import cluster
from trainers.tf.cluster import tf_config
from trainers.tf.models import build_keras_model

GATHERED_BYTES = 2048  # a rank's placement record is about 200

FAULT = "TRAINERS_TF_FAULT"


def averaging_skipped() -> bool:
    return os.environ.get(FAULT) == "skip-averaging"


def cross_entropy(labels, logits):
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


class HorovodTF:
    """Horovod+TensorFlow with DistributedGradientTape (horovodrun or mpirun starts a process a rank)."""

    name = "horovod"

    def __init__(self):
        try:
            import horovod.tensorflow as hvd
        except ImportError as e:
            raise ConfigError(f"train.backend = 'horovod' with TensorFlow needs Horovod built with TensorFlow: run "
                              f"`make setup-tf` ({e})") from None
        self.hvd = hvd
        hvd.init()
        self.rank, self.world_size = hvd.rank(), hvd.size()

    def scope(self):
        return nullcontext()

    def make_step(self, model, optimizer, weight_decay: float, global_batch: int):
        hvd, variables, averaged = self.hvd, model.trainable_variables, not averaging_skipped()

        @tf.function
        def step(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(cross_entropy(labels, model(images, training=True)))
            if averaged:
                tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip([g + weight_decay * v for g, v in zip(grads, variables)], variables))
            return loss

        return step

    def start_equal(self, model) -> None:
        """Rank 0's initial weights on every rank (Horovod's broadcast_variables)."""
        self.hvd.broadcast_variables(model.variables, root_rank=0)

    def gather(self, vector: np.ndarray) -> np.ndarray:
        return self.hvd.allgather(tf.constant(vector[None, :])).numpy()

    def hosts(self) -> list[str]:
        return [str(h) for h in self.hvd.allgather_object(os.uname().nodename)]

    def gather_objects(self, obj) -> list:
        return self.hvd.allgather_object(obj)


class MultiWorkerMirrored:
    """tf.distribute.MultiWorkerMirroredStrategy, its cluster from TF_CONFIG (trainers/tf/cluster.py)."""

    name = "mwms"

    def __init__(self):
        config = tf_config(os.environ)
        if config is not None:
            os.environ["TF_CONFIG"] = json.dumps(config)
        # created before any other TensorFlow op: collectives are configured at the program's start
        ring = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=ring)
        self.rank = config["task"]["index"] if config else 0
        self.world_size = self.strategy.num_replicas_in_sync
        self.workers = config["cluster"]["worker"] if config else ["localhost"]

    def scope(self):
        return self.strategy.scope()

    def make_step(self, model, optimizer, weight_decay: float, global_batch: int):
        strategy, variables, world = self.strategy, model.trainable_variables, self.world_size
        averaged = not averaging_skipped()

        def replica(images, labels):
            with tf.GradientTape() as tape:
                per_image = cross_entropy(labels, model(images, training=True))
                loss = tf.nn.compute_average_loss(per_image, global_batch_size=global_batch)
            grads = tape.gradient(loss, variables)
            # summed over the replicas: each adds its share of the decay, so the sum is wd x weight once
            grads = [g + (weight_decay / world) * v for g, v in zip(grads, variables)]
            if averaged:
                optimizer.apply_gradients(zip(grads, variables))
            else:  # the fault: this replica's own gradient, at the scale of a mean over its batch
                optimizer.apply_gradients(zip([g * world for g in grads], variables), skip_gradients_aggregation=True)
            return loss

        @tf.function
        def step(images, labels):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=(images, labels)),
                                   axis=None)

        return step

    def start_equal(self, model) -> None:
        """Nothing to do: the strategy's variables take worker 0's initial values when they are created."""

    def gather(self, vector: np.ndarray) -> np.ndarray:
        @tf.function
        def all_gather():
            def replica():
                return tf.distribute.get_replica_context().all_gather(tf.constant(vector[None, :]), axis=0)
            return self.strategy.run(replica)

        return self.strategy.experimental_local_results(all_gather())[0].numpy()

    def gather_objects(self, obj) -> list:
        """Every rank's JSON-able obj, in rank order: its JSON's bytes padded to one length, gathered as numbers
        (the strategy gathers tensors only)."""
        data = json.dumps(obj).encode()
        if len(data) > GATHERED_BYTES:
            raise ValueError(f"an object of {len(data)} bytes to gather; at most {GATHERED_BYTES}")
        padded = np.frombuffer(data.ljust(GATHERED_BYTES), dtype=np.uint8).astype(np.float32)
        return [json.loads(bytes(row.astype(np.uint8)).rstrip()) for row in self.gather(padded)]

    def hosts(self) -> list[str]:
        """Each worker's host in rank order (a loopback address: this machine, by its name, as the other runs')."""
        hosts = [w.rsplit(":", 1)[0] for w in self.workers]
        return [os.uname().nodename if h in ("localhost", cluster.LOCAL_HOST) else h for h in hosts]


def create_strategy(cfg: Config):
    """The backend of cfg.train.backend: created first, before any other TensorFlow op (MWMS needs that)."""
    return {"horovod": HorovodTF, "mwms": MultiWorkerMirrored}[cfg.train.backend]()


def build(cfg: Config, backend):
    """The model and its SGD with momentum at the rate of the first step (the warm-up's start where there is one,
    as the PyTorch benchmark sets it), where the backend's variables belong. Returns them and the rate."""
    lr = lr_at(0, 0, 1, cfg.lr_policy())
    keras.utils.set_random_seed(cfg.train.seed)  # the initial weights: the same on every rank, seed by seed
    with backend.scope():
        model = build_keras_model(cfg.model, cfg.data.image_size)
        optimizer = keras.optimizers.SGD(learning_rate=lr, momentum=cfg.optim.momentum)
    return model, optimizer, lr
