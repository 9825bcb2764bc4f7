"""Whether the TensorFlow trainer can run here, asked without importing TensorFlow (the asking process may hold
torch: the study runner does): the packages' files, not their imports."""
from __future__ import annotations

import importlib.util
from pathlib import Path

SETUP_HINT = "run `make setup-tf`"


def tensorflow_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("tensorflow", "tf_keras"))


def horovod_has_tensorflow() -> bool:
    """Horovod's TensorFlow ops library is there: a build with TensorFlow (make setup-tf) leaves it, one without
    does not (its Python files are there either way)."""
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(any(Path(folder, "tensorflow").glob("mpi_lib*.so")) for folder in spec.submodule_search_locations)


def skip_reason(backend: str) -> str | None:
    """Why a TensorFlow run of this backend cannot run here (one line), or None when it can."""
    if not tensorflow_installed():
        return f"TensorFlow is not installed here ({SETUP_HINT})"
    if backend == "horovod" and not horovod_has_tensorflow():
        return f"Horovod is not built with TensorFlow here ({SETUP_HINT})"
    return None
