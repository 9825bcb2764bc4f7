"""Fixtures shared by the test modules."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slurm_helpers import slurm_cluster  # noqa: E402,F401  (one local Slurm cluster for the whole session)
