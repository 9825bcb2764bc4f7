#!/usr/bin/env bash
# make setup-tf: TensorFlow (the thesis's third framework) in a virtual environment, optional, beside PyTorch.
#
#   bash trainers/tf/setup.sh [VENV]        (default VENV=.venv)
#
# 1. the pinned TensorFlow and tf-keras (about 2.2 GB, 1-2 minutes): `tensorflow` itself, not `tensorflow-cpu`,
#    which tf-keras would drag `tensorflow` over anyway. Torch and TF share the venv but never a process (importing
#    triton after TensorFlow segfaults in LLVM's start-up): trainers/tf/ runs in processes of its own.
# 2. Horovod rebuilt with TensorFlow and PyTorch in one build (trainers/horovod_build/setup.sh, 6-8 minutes on 2
#    cores); if its TensorFlow part fails, Horovod keeps PyTorch and one line says why. Without any Horovod, the
#    MultiWorkerMirroredStrategy rows still run.
set -euo pipefail

TF_PINS=(tensorflow==2.21.0 tf-keras==2.21.0)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-.venv}"
py="$venv/bin/python"
say() { echo "[setup-tf] $*"; }

[ -x "$py" ] || { say "ERROR: no Python in '$venv' (run 'make setup' first)" >&2; exit 1; }
installed() {  # every pin at its version (read from the packages' metadata: nothing imports TensorFlow here)
    "$py" - "${TF_PINS[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
assert all(version(name) == pinned for name, pinned in (pin.split("==") for pin in sys.argv[1:]))
PY
}
if installed; then
    say "${TF_PINS[*]} already installed in $venv"
else
    say "installing ${TF_PINS[*]} (about 2.2 GB, 1-2 minutes)"
    start=$(date +%s)
    "$py" -m pip install --quiet --disable-pip-version-check "${TF_PINS[@]}"
    say "installed in $(( $(date +%s) - start )) s"
fi
"$py" -c 'import tensorflow as tf; print("[setup-tf] TensorFlow", tf.__version__, "imports")' 2>/dev/null \
    || { say "ERROR: TensorFlow is installed but does not import: run $py -c 'import tensorflow'" >&2; exit 1; }
bash "$here/../horovod_build/setup.sh" "$venv" \
    || say "Horovod could not be built (reason above): the Horovod+TF rows are skipped, the MWMS rows still run"
