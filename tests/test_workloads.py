"""The workload seam (issue 66): plug-ins declared without torch and found by a loop, the contract's names and data
kinds from their declarations, the GPT workload's batches and data refusals, the bench record's rates and peaks,
and emulated workers over a model whose targets are a row a token."""
import subprocess
import sys

import pytest
import torch

import workloads
from contract.config import ALLOWED, MODELS, VISION_DATA_KINDS, ConfigError, DataError, build
from contract.invariants import check_run
from contract.machine import peak_flops
from contract.runfolder import workload_rates
from tests.helpers import REPO, trainer_env
from trainers import workload
from trainers.backends.emulated import EmulatedWorkers
from workloads.gpt import build as gpt, corpus
from workloads.gpt.sizes import PRESETS, flops_per_token

GPT_LOCAL = {"model": {"name": "gpt_local"}, "data": {"kind": "synthetic", "synthetic_images": 8},
             "train": {"seed": 3, "device": "cpu"}}


def config(sections: dict = GPT_LOCAL, scale: str = "local", **data):
    values = {name: dict(v) for name, v in sections.items()}
    values["data"] = {**values.get("data", {}), **data}
    return build(values, "gpt", scale)


# ---- the declarations and the contract ---------------------------------------------------------------------------
def test_the_gpt_workload_is_found_by_the_loop_and_declares_its_context_as_tokens_a_sample():
    (gpt_workload,) = [w for w in workloads.declared() if w.name == "gpt"]
    assert gpt_workload.models == ("gpt_local", "gpt2_124m") and gpt_workload.data_kinds == ("tokens",)
    assert workloads.owning("gpt2_124m") is gpt_workload and workloads.owning("resnet50") is None
    assert workloads.tokens_per_sample("gpt_local") == 128 and workloads.tokens_per_sample("gpt2_124m") == 1024
    assert workloads.tokens_per_sample("resnet50") is None
    assert set(workloads.models()) <= set(ALLOWED["model.name"]) and not set(workloads.models()) & set(MODELS)
    assert set(workloads.data_kinds()) <= set(ALLOWED["data.kind"])
    assert not set(workloads.data_kinds()) & set(VISION_DATA_KINDS)


def test_the_declarations_and_the_contract_load_no_torch():
    code = ("import sys, workloads, contract.config, contract.invariants; workloads.declared(); "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, env=trainer_env(), timeout=120).returncode == 0


@pytest.mark.parametrize("model, kind, words", [
    ("gpt_local", "generated", "model.name = 'gpt_local' trains on data.kind 'tokens' or 'synthetic', not 'generated'"),
    ("cifar_resnet8", "tokens", "trains on data.kind 'imagefolder' or 'generated' or 'synthetic', not 'tokens'"),
])
def test_a_model_on_another_workload_s_data_is_one_line(model, kind, words):
    with pytest.raises(ConfigError, match=words):
        build({"model": {"name": model}, "data": {"kind": kind}}, "x", "local")


def test_what_gpt_cannot_train_is_a_config_error_of_the_trainer():
    w = workload.of(config(GPT_LOCAL))
    with pytest.raises(ConfigError, match="channels_last is a layout of images"):
        w.check(config({**GPT_LOCAL, "train": {**GPT_LOCAL["train"], "channels_last": True}}))
    assert workload.of(config({"model": {"name": "cifar_resnet8"}, "data": {"kind": "synthetic"}})) is workload.VISION


# ---- the arithmetic of the bench record ---------------------------------------------------------------------------
def test_workload_rates_are_images_per_second_times_a_sample_s_tokens_and_flops_over_the_peak():
    rates = workload_rates(10.0, 128, 1_000, peak_flops=2_000.0, devices=2)
    assert rates == {"tokens_per_s": 1280.0, "model_flops_per_s": 10_000.0, "mfu": 2.5}
    assert workload_rates(10.0, None, None, None, 1) == {"tokens_per_s": None, "model_flops_per_s": None, "mfu": None}
    assert workload_rates(10.0, 128, 1_000, None, 1)["mfu"] is None  # the CPU: no peak, MFU unmeasured


def test_gpt_flops_a_sample_are_palms_a_token_times_the_context():
    cfg = config()
    assert workload.of(cfg).flops_per_sample(cfg) == 20_923_392 * 128 == flops_per_token(PRESETS["gpt_local"]) * 128


@pytest.mark.parametrize("name, precision, peak", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4e12), ("NVIDIA H100 80GB HBM3", "fp32", 66.9e12),
    ("NVIDIA H100 PCIe", "bf16", 756e12), ("NVIDIA H200", "bf16", 989.4e12), ("NVIDIA A100-SXM4-80GB", "tf32", 156e12),
    ("Tesla V100-SXM2-16GB", "bf16", None), ("NVIDIA GeForce RTX 4090", "bf16", None), (None, "fp32", None),
])
def test_a_gpu_s_peak_is_looked_up_by_its_name_and_precision(name, precision, peak):
    assert peak_flops(name, precision) == peak


def test_tokens_per_s_is_checked_against_the_model_s_tokens_a_sample():
    gpt_config, resnet_config = {"model": {"name": "gpt_local"}}, {"model": {"name": "resnet50"}}
    bench = {"kind": "bench", "images_per_s_steady": 10.0, "tokens_per_s": 1280.0}
    assert check_run(gpt_config, None, [bench]) == []
    assert check_run(gpt_config, None, [{**bench, "tokens_per_s": 1000.0}])[0].startswith("bench_tokens_agree:")
    assert check_run(gpt_config, None, [{**bench, "tokens_per_s": None}])[0].startswith("bench_tokens_agree:")
    assert check_run(resnet_config, None, [bench])[0].startswith("bench_tokens_agree:")
    assert check_run(resnet_config, None, [{**bench, "tokens_per_s": None}]) == []


# ---- the GPT workload's batches and data ----------------------------------------------------------------------------
def test_gpt_batches_flatten_the_targets_to_a_row_a_token():
    cfg, w = config(), workload.of(config())
    x, y = w.collate([(torch.arange(4), torch.arange(1, 5)), (torch.arange(4) + 10, torch.arange(11, 15))])
    assert x.shape == (2, 4) and y.tolist() == [1, 2, 3, 4, 11, 12, 13, 14]
    zeros, targets = w.dummy_batch(cfg, 3, torch.device("cpu"))
    assert zeros.shape == (3, 128) and targets.shape == (3 * 128,) and not zeros.any()
    a, b = w.synthetic_batch(cfg, 2, torch.device("cpu")), w.synthetic_batch(cfg, 2, torch.device("cpu"))
    assert torch.equal(a[0], b[0]) and torch.equal(a[0][:, 1:].reshape(-1), a[1].view(2, 128)[:, :-1].reshape(-1))


def test_synthetic_gpt_data_is_windows_fixed_by_the_seed_read_by_epoch_and_index():
    cfg = config(synthetic_images=50)
    train, val, description = workload.of(cfg).build_datasets(cfg)
    assert (len(train), len(val), description) == (50, 2, None)
    x, y, unreadable = train[(3, 7)]  # as the loader asks: (epoch, index)
    assert x.shape == y.shape == (128,) and torch.equal(x[1:], y[:-1]) and unreadable == ()
    assert torch.equal(train[(0, 7)][0], x) and not torch.equal(train[(0, 8)][0], x)


def test_a_prepared_corpus_is_read_and_described_and_one_without_its_meta_is_refused(tmp_path):
    source = tmp_path / "text"
    source.mkdir()
    for i in range(10):
        (source / f"{i:02d}.txt").write_bytes(bytes(range(32, 127)) * 3)
    meta = corpus.prepare(source, tmp_path / "corpus")
    cfg = config(kind="tokens", path=str(tmp_path / "corpus"))
    train, val, description = workload.of(cfg).build_datasets(cfg)
    # 9 files of 285 bytes and a NUL to train.bin, the 10th to val.bin: windows of 128 tokens and the next one
    assert (meta["tokens"], len(train), len(val)) == ({"train": 9 * 286, "val": 286}, 20, 2)
    assert description["sha256"] == meta["sha256"] and description["tokens"] == meta["tokens"]
    with pytest.raises(DataError, match="holds no prepared corpus"):
        workload.of(cfg).build_datasets(config(kind="tokens", path=str(source)))


@pytest.mark.parametrize("scale, path, words", [
    ("gpu", "", "data.path is empty: at the gpu scale set it to a prepared corpus folder"),
    ("local", "${NO_SUCH_CORPUS_DIR}", "names a variable that is not set here"),
])
def test_a_corpus_that_cannot_be_found_is_one_line(scale, path, words):
    cfg = config(kind="tokens", path=path, scale=scale)
    with pytest.raises(DataError, match=words):
        workload.of(cfg).build_datasets(cfg)


def test_the_local_corpus_without_its_debian_package_names_make_setup_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "DEBIAN_SOURCES", tmp_path / "absent")
    with pytest.raises(workloads.WorkloadDataError, match="run `make setup-corpus`"):
        gpt.local_corpus(tmp_path / "cache" / "corpus")


@pytest.mark.skipif(not corpus.DEBIAN_SOURCES.is_dir(), reason="make setup-corpus: no python3.11-doc here")
def test_the_local_corpus_is_prepared_on_first_use_into_the_cache(tmp_path):
    made = gpt.local_corpus(tmp_path / "corpus" / corpus.DEBIAN_PACKAGE)
    assert corpus.read_meta(made)["tokens"]["train"] > 1_000_000
    assert [p.name for p in made.parent.iterdir()] == [corpus.DEBIAN_PACKAGE]  # no staging copy left behind


# ---- emulated workers over a model without BatchNorm, targets a row a token ----------------------------------------
def test_emulated_passes_slice_a_gpt_s_samples_and_their_token_rows_alike():
    cfg = config()
    w = workload.of(cfg)
    emulated = EmulatedWorkers(torch.device("cpu"), workers=4, workers_per_pass=2)
    model = emulated.wrap_model(w.build_model(cfg))
    x, y = w.synthetic_batch(cfg, 8, torch.device("cpu"))  # 4 workers x 2 windows
    passes = list(emulated.micro_batches(x, y))
    assert [(len(a), len(b)) for a, b in passes] == [(4, 4 * 128), (4, 4 * 128)]
    for (a, b), rows in zip(passes, (slice(0, 4), slice(4, 8))):
        assert torch.equal(a, x[rows]) and torch.equal(b, y.view(8, 128)[rows].reshape(-1))
    model.train()
    assert torch.equal(model(x), model.module(x))  # no BatchNorm: the rows run as they are
