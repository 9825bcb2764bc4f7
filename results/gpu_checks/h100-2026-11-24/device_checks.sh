#!/bin/bash
# The GPU checks of issues 9, 10 and 13, in two calls of the device tool (each under its 10-minute limit):
#   bash device_checks.sh 1   probe, the GPU tests, `trainers bench` fp32 and bf16 + channels_last, emulated step
#   bash device_checks.sh 2   compiled bench rows, real JPEGs vs synthetic data, experiment 1's thesis rows
# Run in the repo root on the GPU machine; writes under $OUT/<phase>. Packages the machine lacks (psutil, simplejpeg,
# nvidia-ml-py, pytest) come as unpacked wheels in .device/ (ignored), 120 of the shared photos in .device/photos (the tool carries 64 MiB) (val/ reuses them: only the training steps are timed).
PHASE=$1
PYV=$(python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
export PYTHONPATH=$PWD:$PWD/.device/py$PYV:$PWD/.device/common
R=$OUT/$PHASE; mkdir -p "$R"
log() { echo "== $(date -u +%T) $*"; }
train() {  # NAME [--set ...]: experiment 1's config at the gpu scale, one process, bf16 + channels_last, batch 256
  local name=$1; shift
  timeout 110 python3 -m trainers train experiments/01_throughput_single_gpu/config.toml --scale gpu --out "$R/runs" \
    --run-name "$name" --set train.per_worker_batch=256 --set 'train.backend="single"' \
    --set 'train.precision="bf16"' --set train.channels_last=true --set train.seed=0 "$@" 2>&1 | tail -4
}
if [ "$PHASE" = 1 ]; then
  log probe
  { nvidia-smi; nproc; free -g; python3 -V
    python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__, torch.version.cuda, torch.cuda.get_device_name())"
    python3 -c "import psutil, simplejpeg, pynvml, pytest, pandas, numpy, PIL; print('imports ok')"
    lscpu | head -16; } > "$R/machine.txt" 2>&1
  head -60 "$R/machine.txt"
  log GPU tests
  timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -25 | tee "$R/test_gpu.txt"
  log bench fp32, bf16 + channels_last, emulated
  timeout 290 python3 -m trainers bench --variants fp32,bf16_channels_last --json "$R/bench_gpu.json" 2>&1 | tail -16
else
  log bench compiled at batch 256
  timeout 250 python3 -m trainers bench --variants compiled --batches 256 --skip-emulated \
    --json "$R/bench_gpu_compiled.json" 2>&1 | tail -6
  log real JPEGs vs synthetic
  P=/tmp/photos
  for split in train val; do for c in ants bees; do for k in $(seq 0 79); do
    mkdir -p $P/$split && cp -al .device/photos/train/$c $P/$split/$c$k; done; done; done
  train b256-bf16-cl-synthetic
  train b256-bf16-cl-jpeg-gpu8 --set 'data.kind="imagefolder"' --set "data.path=\"$P\"" --set 'data.decoder="gpu"' --set data.loader_workers=8
  train b256-bf16-cl-jpeg-cpu8 --set 'data.kind="imagefolder"' --set "data.path=\"$P\"" --set 'data.decoder="cpu"' --set data.loader_workers=8
  log experiment 1, the thesis rows with DDP
  timeout 150 python3 -m trainers study experiments/01_throughput_single_gpu --scale gpu --out "$R/runs" \
    --only gpu-b32-ddp-s0 gpu-b64-ddp-s0 gpu-b128-ddp-s0 2>&1 | tail -8
fi
log done
