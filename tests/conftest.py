"""Fixtures shared by the test modules."""
from tests.slurm_helpers import slurm_cluster  # noqa: F401  (one local Slurm cluster for the whole session)
