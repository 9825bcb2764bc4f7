#!/bin/bash
# Call 2 on the same warm machine (2026-11-27): (a) two DDP ranks on the one GPU with train.workers = 2, so the
# refusal is the GPU's; (b) the cpu decoder's real-JPEG row again with the training process's threads lowered,
# to test whether 16 torch threads + 15 loader processes on 16 CPUs is what holds it at 0.5 x synthetic.
set -u
export PYTHONUNBUFFERED=1
R=/tmp/r2; mkdir -p $R
python3 -m pip install -q --no-index --no-deps --no-cache-dir .device/whl/*.whl 2>&1 | tail -2
EXP1=experiments/01_throughput_single_gpu/config.toml
timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m trainers train $EXP1 --scale gpu \
  --set train.workers=2 --set train.per_worker_batch=64 --set 'train.backend="ddp"' --set 'data.kind="synthetic"' \
  --set bench.batches=20 --set 'train.device="cuda"' --out /tmp/pl2 --run-name two > $R/two-ranks.log 2>&1
echo "two ranks on one GPU (workers 2, device cuda): exit $?"; grep -h "^error" $R/two-ranks.log | sort -u
# the same case through cluster-check's placement probe: flagged, naming the ranks and the fix
timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m tools cluster-probe placement \
  --dir /tmp/probe --loader-workers 8 > $R/probe.log 2>&1; echo "placement probe, 2 ranks: exit $?"
python3 -c "import json,glob;from contract.placement import problems;print('\n'.join(problems([json.load(open(f))['placement'] for f in sorted(glob.glob('/tmp/probe/placement/rank*.json'))])))" 2>&1 | tee $R/probe-problems.txt
P=/tmp/p256
if [ ! -d $P/train ]; then
  for split in train val; do for c in ants bees; do for k in $(seq 0 79); do
    mkdir -p /tmp/photos/$split && cp -al .device/photos/train/$c /tmp/photos/$split/$c$k; done; done; done
  python3 -c "from pathlib import Path; from trainers.data.imagenet import resize_copy; resize_copy(Path('/tmp/photos'), Path('$P'), 256)"
fi
ROW=(--scale gpu --set train.per_worker_batch=256 --set 'train.backend="single"' --set 'train.precision="bf16"'
     --set train.channels_last=true --set train.seed=0 --set bench.batches=100 --set bench.warmup_batches=15
     --set 'data.kind="imagefolder"' --set "data.path=\"$P\"" --set 'data.decoder="cpu"' --out /tmp/j)
for tw in "16 15" "1 15" "4 12"; do set -- $tw
  timeout 150 python3 -m trainers train $EXP1 "${ROW[@]}" --set train.threads=$1 --set data.loader_workers=$2 \
    --run-name t$1-w$2 > $R/t$1-w$2.log 2>&1
  python3 -c "
import json; r=[json.loads(l) for l in open('/tmp/j/01_throughput_single_gpu/t$1-w$2/metrics.jsonl')]
b=[x for x in r if x['kind']=='bench'][-1]; print('threads $1, loader workers $2: %.0f img/s, waiting for data %.1f %%' % (b['images_per_s_steady'], 100*b['data_share']))"
done
tar -C $R -czf $OUT/results2.tar.gz .
