"""Fixtures shared by the test modules, and the machine each test run saw."""
import os

from tests.slurm_helpers import slurm_cluster  # noqa: F401  (one local Slurm cluster for the whole session)


def pytest_report_header(config) -> list[str]:
    """The CPU the numbers came from (issue #53: a rounding bound held on one CPU model failed on another): the
    model, the instruction sets torch's and oneDNN's kernels use, and the cores, at the top of every report."""
    import torch

    from trainers.compute import cpu_description

    cpu = cpu_description()
    return [f"cpu: {cpu['model']} ({os.cpu_count()} cores); torch {torch.__version__} kernels "
            f"{cpu['torch_capability']}, oneDNN {cpu['onednn_isa'] or 'unknown'}"]
