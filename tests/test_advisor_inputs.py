"""Issue 64, the third hostile round: one validator of the advisor's inputs (analysis/advisor/model.py). A link_fit.json
that is no object, a latency or bandwidth that is no positive number, a step file without a step, a machine of
negative GPUs: each is one line naming the file or value and what to do, exit 2, nothing written before it."""
import json

import pytest

from analysis.advisor import model as advisor
from analysis.advisor.model import InputError, Link, Step
from tests.test_advisor import local_cluster_parts


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert "| ddp |" not in captured.out  # no table printed before or beside the refusal
    return captured.err


def damage_fit(root, change) -> str:
    """The recorded link fit under root, changed by `change` (a document, or a function of the fits)."""
    path = next(root.glob("local-*")) / advisor.LINK_FIT
    fits = json.loads(path.read_text())
    path.write_text(json.dumps(change(fits) if callable(change) else change))
    return str(path)


def set_inter(key, value):
    def change(fits):
        fits["inter"][key] = value
        return fits
    return change


@pytest.mark.parametrize("change, said", [
    ([1, 2], "holds a JSON list, not an object: it should hold an object of its intra and inter links"),
    ("not a fit", "holds a JSON str, not an object"),
    (lambda fits: {**fits, "inter": [1]}, "inter = [1] is not an object with latency_s and bytes_per_s"),
    (set_inter("latency_s", "abc"), "inter.latency_s = 'abc' is not a finite number"),
    (set_inter("latency_s", -1e-6), "inter.latency_s = -1e-06 must be at least 0"),
    (set_inter("bytes_per_s", 0), "inter.bytes_per_s = 0 must be above 0"),
    (set_inter("bytes_per_s", -5), "inter.bytes_per_s = -5 must be above 0"),
    (set_inter("bytes_per_s", None), "inter.bytes_per_s = None is not a finite number"),
    (set_inter("bytes_per_s", True), "inter.bytes_per_s = True is not a finite number"),
])
def test_a_damaged_link_fit_is_one_line_naming_the_file_and_value(tmp_path, monkeypatch, capsys, change, said):
    from suite.__main__ import main

    root, step = local_cluster_parts(tmp_path, monkeypatch)
    path = damage_fit(root, change)
    assert main(["advise", "--cluster", "local", "--step", str(step), "--check-root", str(root), "--no-probe"]) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"error: advise --cluster local: {path}") and said in err, err
    assert "make cluster-check LAYERS" in err or "make cluster-check" in err


def test_the_report_passes_over_a_damaged_link_fit_instead_of_failing(tmp_path, monkeypatch):
    from analysis.advisor.runs import matching_links

    root, _ = local_cluster_parts(tmp_path, monkeypatch)
    damage_fit(root, [1, 2])
    facts = {"placement": {"hosts": 1}, "cpu_model": None, "link": None, "hosts": ["n1"]}
    assert matching_links(facts, root) is None


@pytest.mark.parametrize("key, value, said", [
    ("whole_step_s", 0, "whole_step_s = 0 must be above 0"),
    ("forward_s", "abc", "forward_s = 'abc' is not a finite number"),
    ("backward_s", -0.5, "backward_s = -0.5 must be at least 0"),
    ("batch", 0, "batch = 0 must be a whole number >= 1"),
    ("gradient_bytes", None, "gradient_bytes = None must be a whole number >= 0"),
    ("input_images_per_s", -3, "input_images_per_s = -3 must be above 0"),
])
def test_a_step_file_without_a_usable_step_is_one_line_naming_it(tmp_path, monkeypatch, capsys, key, value, said):
    from analysis.__main__ import main

    _, step = local_cluster_parts(tmp_path, monkeypatch)
    record = json.loads(step.read_text())
    step.write_text(json.dumps({**record, key: value}))
    out = tmp_path / "validation.md"
    assert main(["advise", "--validate", "--out", str(out), "--step", str(step)]) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"error: analysis advise: {step}: {said}; time the step again: python -m tools step-split")
    assert not out.exists()  # nothing written before the refusal


def test_a_step_file_that_is_a_list_is_one_line(tmp_path, capsys):
    from analysis.__main__ import main

    step = tmp_path / "step.json"
    step.write_text("[0.1, 0.2]")
    assert main(["advise", "--step", str(step)]) == 2
    assert f"{step} holds a JSON list, not an object: it should hold a step" in one_error_line(capsys)


@pytest.mark.parametrize("argv, said", [
    (["--gpus-per-node", "-4"], "--gpus-per-node = -4 must be a whole number >= 1 (make advise: GPUS_PER_NODE="),
    (["--gpus-per-node", "0"], "--gpus-per-node = 0 must be a whole number >= 1"),
    (["--nodes", "1,-2"], "--nodes = -2 must be a whole number >= 1"),
    (["--input-images-per-s", "-100"], "--input-images-per-s = -100.0 must be above 0"),
    (["--input-images-per-s", "nan"], "--input-images-per-s = nan is not a finite number"),
])
def test_a_machine_of_no_gpus_or_nodes_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, argv, said):
    """make advise STEP=... GPUS_PER_NODE=-4 printed -16 GPUs and -7,604 img/s and exited 0."""
    from analysis.__main__ import main

    _, step = local_cluster_parts(tmp_path, monkeypatch)
    out = tmp_path / "validation.md"
    assert main(["advise", "--validate", "--out", str(out), "--step", str(step), *argv]) == 2
    assert said in one_error_line(capsys)
    assert not out.exists()


def test_a_good_step_and_machine_still_predict_and_write_the_validation(tmp_path, monkeypatch, capsys):
    from analysis.__main__ import main

    _, step = local_cluster_parts(tmp_path, monkeypatch)
    out = tmp_path / "validation.md"
    assert main(["advise", "--validate", "--out", str(out), "--step", str(step), "--gpus-per-node", "4"]) == 0
    printed = capsys.readouterr().out
    assert out.exists() and printed.count("| ddp |") == 4  # 1 GPU, and 1, 2, 4 nodes of 4
    assert "| ddp | -" not in printed


def test_links_and_steps_built_in_code_are_held_to_the_same_rules():
    assert Link(0.0, 1e9).message_s(1e9) == 1.0  # no latency is a link
    for latency, rate in ((0, 0), (0, -5), ("abc", 1e9), (-1, 1e9), (0, float("inf"))):
        with pytest.raises(InputError):
            Link(latency, rate)
    with pytest.raises(InputError, match="forward_s \\+ backward_s \\+ optimizer_s = 0.0 must be above 0"):
        Step(0.0, 0.0, 0.0, batch=32, gradient_bytes=0)
    with pytest.raises(InputError, match="threads = 0"):
        Step(0.1, 0.2, 0.0, batch=32, gradient_bytes=0, threads=0)
