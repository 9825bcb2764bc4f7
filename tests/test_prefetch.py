"""Batches on the device (data/prefetch.py) and the loop's time split: waiting for data is data time."""
import time

import pytest
import torch

from tests.helpers import records, write_config
from trainers import backends, data
from contract.config import load_config
from trainers import loop
from trainers.setup import build_setup


def make_trainer(tmp_path, **data_settings):
    cfg = load_config(write_config(tmp_path / "c.toml", {"train": {"epochs": 1, "checkpoint": False},
                                                         "data": data_settings}))
    launch = backends.detect_launch()
    return build_setup(cfg, tmp_path / "run", backends.resolve(cfg, launch), launch, resume=False, echo=False)


def test_device_batches_on_the_cpu_are_the_loaders_batches_moved_and_normalised(tmp_path):
    raw = [(torch.full((2, 4, 4, 3), 255, dtype=torch.uint8), torch.tensor([1, 2]), [7])]
    images, target, skipped = next(iter(data.DeviceBatches(raw, torch.device("cpu"))))
    assert images.shape == (2, 3, 4, 4) and images.dtype == torch.float32  # uint8 HWC: normalised, as to_device
    assert torch.equal(images, data.to_device(raw[0][0], torch.device("cpu")))
    assert target.tolist() == [1, 2] and skipped == [7]


class SlowLoader:
    """A loader that takes `delay` seconds before each batch: a data path slower than the step."""

    def __init__(self, loader, delay: float):
        self.loader, self.delay = loader, delay

    def __iter__(self):
        for batch in self.loader:
            time.sleep(self.delay)
            yield batch

    def __len__(self):
        return len(self.loader)


def test_a_slow_loader_shows_as_data_time_in_the_epoch_record(tmp_path):
    s, state = make_trainer(tmp_path)
    delay = 0.2
    try:
        s.train_batches.loader = SlowLoader(s.train_batches.loader, delay)
        loop.fit(s, state)
    finally:
        s.stop.restore()
        s.backend.close()
        s.run.close()
    epoch = records(tmp_path / "run", "epoch")[-1]
    steps = len(s.train_sampler)
    # every step waited `delay` at least for its batch: certain, whatever the machine's speed
    assert epoch["data_s"] >= steps * delay
    step_s = epoch["data_s"] + epoch["compute_s"] + epoch["comm_s"]
    assert epoch["data_share"] == pytest.approx(epoch["data_s"] / step_s)


def test_the_waiting_for_data_hint_never_suggests_the_decoder_already_in_use():
    """The H200's gpu-decoder row (results/gpu_checks/h200-2026-11-26) waited 58.6 % and was told to use the gpu
    decoder; the hint names only what the run does not already do."""
    from trainers.tallies import data_wait_line

    assert data_wait_line(0.05, "cpu") == "=> waiting for data: 5.0 % of step time"
    assert data_wait_line(0.3, "cpu").endswith('more data.loader_workers or data.decoder = "gpu" or "dali" would help')
    assert data_wait_line(0.586, "gpu").endswith('more data.loader_workers or data.decoder = "dali" would help')
    assert data_wait_line(0.3, "dali").endswith("; more data.loader_workers would help")
    assert data_wait_line(0.3, None).endswith("; more data.loader_workers would help")  # no files decoded
