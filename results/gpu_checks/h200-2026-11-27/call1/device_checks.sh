#!/bin/bash
# One call of the device tool, 2026-11-27 (session 21): the GPU parts of issues #47 and #51.
#  1. issue #51: one worker's step split into forward, backward and optimizer (python -m tools step-split), ResNet-50
#     at the thesis's batch 128 in fp32 and at 256 in bf16 + channels_last: the advisor's measured parts.
#  2. issue #47: placement on the GPU: two ranks on the one GPU refused in one line; one rank's manifest records
#     its CPUs, threads, loader workers and GPU (index, UUID); placement.problems flags two ranks on one UUID.
#  3. issue #47: make gpu-check's real-JPEG rows on the suite's prepared format (--resize 256) with loader workers
#     from the allocation, against 0.9 x synthetic.
# Run from the repo root on the GPU machine with .device/ carried: simplejpeg's cp312 wheel (no package index
# there) and the shared photos' train/ (ants, bees), hard-linked 80 times a class into 160 classes.
set -u
export PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R
python3 -m pip install -q --no-index --no-deps --no-cache-dir .device/whl/*.whl 2>&1 | tail -2
{ nvidia-smi; nproc; free -g; python3 -V
  python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  lscpu | head -16; } > $R/machine.txt 2>&1
head -12 $R/machine.txt
echo "== 1. step split"
python3 -m tools step-split --scale gpu --batch 128 --json $R/step-b128-fp32.json 2>/dev/null
python3 -m tools step-split --scale gpu --batch 256 --precision bf16 --channels-last --json $R/step-b256-bf16-cl.json 2>/dev/null
echo "== 2. placement on the GPU"
EXP1=experiments/01_throughput_single_gpu/config.toml
ROW=(--scale gpu --set train.per_worker_batch=64 --set 'train.backend="ddp"' --set 'data.kind="synthetic"'
     --set bench.batches=20 --set bench.warmup_batches=5 --out /tmp/pl)
timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m trainers train $EXP1 "${ROW[@]}" \
    --set 'train.device="cuda"' --run-name two > $R/placement-two-ranks.log 2>&1
echo "two ranks on one GPU, train.device = cuda: exit $?" | tee -a $R/placement-two-ranks.log
grep -h "^error" $R/placement-two-ranks.log | sort -u
timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m trainers train $EXP1 "${ROW[@]}" \
    --run-name one > $R/placement-one-rank.log 2>&1
echo "one rank: exit $?"
python3 - > $R/placement-record.txt 2>&1 <<'PY'
import json
from contract.placement import problems
m = json.load(open("/tmp/pl/01_throughput_single_gpu/one/manifest.json"))
print("manifest placement:", json.dumps(m.get("placement"), indent=1))
print("problems of the run as recorded:", problems(m["placement"]))
two = [dict(m["placement"][0]), dict(m["placement"][0], local_rank=1)]
print("problems of two ranks holding that GPU:", problems(two))
PY
cat $R/placement-record.txt
echo "== 3. real JPEGs, prepared format, loader workers from the allocation"
P=/tmp/photos
for split in train val; do for c in ants bees; do for k in $(seq 0 79); do
  mkdir -p $P/$split && cp -al .device/photos/train/$c $P/$split/$c$k; done; done; done
echo "photos: $(find $P/train -type f | wc -l) training files"
timeout 420 python3 -m tools gpu-check --checks jpegs --data $P --resize 256 --out $R
echo "gpu-check exit $?"
cat $R/*/README.md
tar -C $R -czf $OUT/results.tar.gz .
ls -la $OUT
