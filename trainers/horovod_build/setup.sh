#!/usr/bin/env bash
# Build and install Horovod 0.28.1 (PyTorch extension) into a virtual environment.
#
#   bash trainers/horovod_build/setup.sh [VENV]        (default VENV=.venv)
#
# One variable picks CPU or GPU collectives:
#   HOROVOD_GPU=auto   (default) nccl when `nvidia-smi -L` lists a GPU, else none
#   HOROVOD_GPU=none   CPU only: Gloo (and MPI when Open MPI is present) for all collectives
#   HOROVOD_GPU=nccl   GPU cluster: NCCL allreduce/broadcast on GPUs; needs the real CUDA
#                      toolkit (CUDA_HOME, default /usr/local/cuda) and NCCL
#                      (HOROVOD_NCCL_HOME if it is not in the default search paths)
# HOROVOD_TENSORFLOW=auto (default): when TensorFlow is installed in VENV (make setup-tf), build its part too, in
# the same build as PyTorch's; if that part fails, Horovod is built again with PyTorch alone (one line says why), so
# the Horovod+PyTorch rows survive. HOROVOD_TENSORFLOW=0: PyTorch only.
# Optional: HOROVOD_BUILD_CUDA_CC_LIST (default: the local GPUs' compute capability with
# nccl, 75 with none), HOROVOD_WITHOUT_MPI_BUILD=1 to build Gloo only, HOROVOD_FORCE=1 to
# rebuild even when an installed Horovod already supports PyTorch.
#
# Why the environment looks like this (no Horovod source is patched):
#  - torch >= 2.1 headers need C++20 while horovod/torch/CMakeLists.txt forces C++14:
#    cxx20.cmake (a CMake toolchain file, passed with CMAKE_TOOLCHAIN_FILE) appends
#    -std=gnu++20 after CMake's own -std flag.
#  - the torch wheel is a CUDA build (+cuXXX), so Horovod's build looks for a CUDA
#    toolkit even for a CPU-only Horovod; /usr/local/bin/nvcc may be a wrapper script
#    from which CMake and torch guess the CUDA root wrongly, so the root is given
#    explicitly (HOROVOD_CUDA_HOME / CUDA_HOME).
#  - TensorFlow >= 2.19 with Horovod 0.28.1 (tf_headers.sh): xla_mpi_ops.cc includes highwayhash and farmhash
#    headers that TF's wheel ships under include/external/, not on its include path, and
#    tensorflow/compiler/xla/client/xla_builder.h, which moved to xla/hlo/builder/ (Horovod's main branch
#    knows; 0.28.1 does not): the include path gets those folders and a one-line stand-in for the moved header.
set -euo pipefail

HOROVOD_VERSION=0.28.1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-.venv}"
# the log beside the venv it builds into: two clones building at once never write one log
log="${HOROVOD_BUILD_LOG:-$venv/horovod-build.log}"

say() { echo "[setup-horovod] $*"; }
die() { echo "[setup-horovod] ERROR: $*" >&2; exit 1; }

[ -x "$venv/bin/python" ] || die "no Python in '$venv' (run 'make setup' first)"
py="$venv/bin/python"
pip=("$py" -m pip)

# The gate is a direct import of horovod.torch, which is what the trainers need.
# (`horovodrun --check-build` answers from a forked child per framework and, under
# load, once reported PyTorch missing from a good build: it is printed, not trusted.)
has_pytorch() { "$py" -c 'import horovod.torch as hvd; assert hvd.gloo_built()' 2>/dev/null; }
# TensorFlow's gate runs in a process of its own: never TF and torch in one process (triton after TF segfaults)
has_tensorflow() { "$py" -c 'import horovod.tensorflow as hvd; assert hvd.gloo_built()' 2>/dev/null; }
tf_installed() { "$py" -c 'import importlib.util as u; assert u.find_spec("tensorflow")' 2>/dev/null; }
want_tf=0
if [ "${HOROVOD_TENSORFLOW:-auto}" != 0 ] && tf_installed; then want_tf=1; fi
import_error() { "$py" -c 'import horovod.torch as hvd; assert hvd.gloo_built(), "Gloo not built"' 2>&1 | tail -1; }

# 0. Already there? -------------------------------------------------------------
if [ "${HOROVOD_FORCE:-0}" != 1 ] && has_pytorch && { [ "$want_tf" = 0 ] || has_tensorflow; }; then
    # (not a $( [ ... ] && echo ) inside the assignment: its status would end the script under set -e)
    frameworks="PyTorch"
    if [ "$want_tf" = 1 ]; then frameworks="PyTorch and TensorFlow"; fi
    say "Horovod $("$py" -c 'import horovod; print(horovod.__version__)') with $frameworks already installed in $venv; nothing to do"
    exit 0
fi
"$py" -c 'import torch' 2>/dev/null || die "torch is not installed in $venv (run 'make setup' first)"

# 1. CPU or GPU collectives -----------------------------------------------------
gpu="${HOROVOD_GPU:-auto}"
if [ "$gpu" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        gpu=nccl
    else
        gpu=none
    fi
fi
case "$gpu" in none|nccl) ;; *) die "HOROVOD_GPU must be auto, none or nccl (got '$gpu')";; esac

# 2. Open MPI (optional: Horovod also runs on Gloo alone) ------------------------
have_mpi() { command -v mpicxx >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; }
if ! have_mpi && [ "${HOROVOD_WITHOUT_MPI_BUILD:-0}" != 1 ] && [ "$(id -u)" = 0 ] \
        && command -v apt-get >/dev/null 2>&1; then
    say "installing Open MPI (apt-get)"
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
        # Another installer may hold the dpkg lock; wait and retry.
        if { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                --no-install-recommends openmpi-bin libopenmpi-dev; } >>"$log" 2>&1; then
            break
        fi
        say "apt-get failed (attempt $attempt; lock held by another installer?), retrying in 15 s"
        sleep 15
    done
fi
if have_mpi && [ "${HOROVOD_WITHOUT_MPI_BUILD:-0}" != 1 ]; then
    export HOROVOD_WITH_MPI=1
    mpi_note="MPI+Gloo"
else
    export HOROVOD_WITHOUT_MPI=1
    mpi_note="Gloo only (no Open MPI found)"
fi

# 3. Build environment ------------------------------------------------------------
cuda_home="${HOROVOD_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}"
export CMAKE_TOOLCHAIN_FILE="$here/cxx20.cmake"
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1
export HOROVOD_CPU_OPERATIONS=GLOO
export HOROVOD_CUDA_HOME="$cuda_home" CUDA_HOME="$cuda_home"
if [ "$gpu" = nccl ]; then
    [ -x "$cuda_home/bin/nvcc" ] || die "HOROVOD_GPU=nccl needs a CUDA toolkit at $cuda_home (set CUDA_HOME)"
    export HOROVOD_GPU_OPERATIONS=NCCL
    if [ -z "${HOROVOD_BUILD_CUDA_CC_LIST:-}" ]; then
        cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd, -)"
        export HOROVOD_BUILD_CUDA_CC_LIST="${cc:-70,80,90}"
    fi
else
    unset HOROVOD_GPU_OPERATIONS HOROVOD_GPU_ALLREDUCE HOROVOD_GPU_BROADCAST || true
    # torch is a CUDA wheel, so Horovod's CMake still compiles its small CUDA part;
    # 75 is the oldest architecture recent nvcc accepts.
    export HOROVOD_BUILD_CUDA_CC_LIST="${HOROVOD_BUILD_CUDA_CC_LIST:-75}"
fi
if [ -n "${MAKEFLAGS:-}" ]; then :; else export MAKEFLAGS="-j$(nproc 2>/dev/null || echo 2)"; fi

build() {  # build WHAT: pip-install Horovod with the environment above (WHAT: its frameworks, for the line)
    say "building Horovod $HOROVOD_VERSION: $1, CPU ops GLOO, $mpi_note, GPU ops ${HOROVOD_GPU_OPERATIONS:-none}" \
        "(CUDA root $cuda_home, CC ${HOROVOD_BUILD_CUDA_CC_LIST}); log: $log"
    say "compiling (about 3 minutes on 2 cores, 6-8 with TensorFlow) ..."
    local start=$(date +%s)
    "${pip[@]}" install --no-build-isolation --no-cache-dir --force-reinstall --no-deps "horovod==$HOROVOD_VERSION" \
        >>"$log" 2>&1 || return 1
    say "built in $(( $(date +%s) - start )) s"
}
first_error() { grep -m1 -E 'error:|Error:|CMake Error' "$log" | cut -c1-200 || true; }

say "build dependencies"
"${pip[@]}" install -q cloudpickle psutil pyyaml packaging wheel cffi >>"$log" 2>&1 \
    || die "could not install build dependencies (cloudpickle psutil pyyaml packaging wheel cffi); see $log"
tf_note=""
if [ "$want_tf" = 1 ]; then
    source "$here/tf_headers.sh"  # HOROVOD_WITH_TENSORFLOW and the include path of TF >= 2.19 (above)
    if ! build "PyTorch and TensorFlow" || ! has_tensorflow; then
        mv "$log" "$log.tensorflow"  # the failed build's log, kept for the line below
        tf_note="the TensorFlow part failed ($(log="$log.tensorflow" first_error)); Horovod is rebuilt with PyTorch \
alone, so the Horovod+TF rows are skipped; its log: $log.tensorflow"
        say "$tf_note"
        unset HOROVOD_WITH_TENSORFLOW CPLUS_INCLUDE_PATH
        export HOROVOD_WITHOUT_TENSORFLOW=1
    fi
else
    export HOROVOD_WITHOUT_TENSORFLOW=1
fi
if [ "$want_tf" = 0 ] || [ -n "$tf_note" ]; then
    build "PyTorch" || die "pip install horovod==$HOROVOD_VERSION failed (first error: $(first_error)); full log: $log"
fi

# 4. Verify ---------------------------------------------------------------------
if ! has_pytorch; then
    die "Horovod installed but 'import horovod.torch' fails: $(import_error); see $log"
fi
"$venv/bin/horovodrun" --check-build 2>/dev/null | sed -n '/Available Frameworks/,$p' \
    | sed 's/^/[setup-horovod]   /' || true
if [ "$want_tf" = 1 ] && [ -z "$tf_note" ]; then
    say "OK: Horovod $HOROVOD_VERSION with PyTorch and TensorFlow in $venv"
else
    say "OK: Horovod $HOROVOD_VERSION with PyTorch in $venv${tf_note:+ (not TensorFlow: $tf_note)}"
fi
