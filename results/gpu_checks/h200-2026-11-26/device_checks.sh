#!/bin/bash
# One call of the device tool, 2026-11-26 (session 19): what the H100 lease of 2026-11-24 left unverified on a GPU,
# in the time one short lease holds: the real-JPEG rows of `make gpu-check` (is the gpu decoder's NaN gone after
# trainers/data/gpu.py's drain?), then tests/test_gpu.py (never run on a GPU: the H100's run lacked simplejpeg).
# Run from the repo root on the GPU machine, with .device/ carried: simplejpeg's cp312 wheel (the machine has no
# package index) and the shared photos' train/ (ants, bees), hard-linked 80 times a class into 160 classes.
set -u
python3 -m pip install -q --no-index --no-deps --no-cache-dir .device/whl/*.whl 2>&1 | tail -2
{ nvidia-smi; nproc; free -g; python3 -V
  python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  python3 -c "import psutil, simplejpeg, pynvml, pytest, pandas, scipy, timm; print('imports ok')"
  lscpu | head -16; } > "$OUT/machine.txt" 2>&1
head -25 "$OUT/machine.txt"
P=/tmp/photos
for split in train val; do for c in ants bees; do for k in $(seq 0 79); do
  mkdir -p $P/$split && cp -al .device/photos/train/$c $P/$split/$c$k; done; done; done
echo "photos: $(find $P/train -type f | wc -l) training files"
export PYTHONUNBUFFERED=1
timeout 540 python3 -m tools gpu-check --checks jpegs,tests --data $P --out "$OUT"
echo "gpu-check exit $?"
