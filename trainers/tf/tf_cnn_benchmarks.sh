#!/usr/bin/env bash
# make tf-cnn-benchmarks: the thesis's own Horovod+TensorFlow benchmark, opt-in and never in CI.
#
#   bash trainers/tf/tf_cnn_benchmarks.sh [VENV]
#
# Fetches tensorflow/benchmarks' tf_cnn_benchmarks at a pinned commit into a gitignored folder (TF_CNN_DIR, default
# .tf_cnn_benchmarks/; needs internet access to GitHub, so run it on a machine that has it) and runs its ResNet-50
# as the thesis's appendices did (--model resnet50 --num_batches 200, --variable_update horovod under horovodrun),
# so a cluster can be compared with published tf_cnn_benchmarks results. It is third-party code: fetched at the
# user's request, never vendored into this repository. Unmaintained since 2023 (tf.compat.v1 graph mode); it runs
# with tf-keras (TF_USE_LEGACY_KERAS=1), about 1 image/s on a CPU.
#
# Variables: TF_CNN_NP (processes, default 1; more run under horovodrun with Gloo), TF_CNN_BATCH (per-device batch,
# default 32, the thesis's 32/64/128), TF_CNN_DATA (a TFRecord ImageNet folder, as the thesis's; default synthetic).
# The log goes to results/tf_cnn_benchmarks/ (gitignored); `python -m analysis` reads it (analysis/logs.py).
set -euo pipefail

COMMIT=8fb79079265933ad39bea628b777af662f5bf15d  # tensorflow/benchmarks master, 2023-10-05, its last commit
REPO_URL=https://github.com/tensorflow/benchmarks.git
venv="${1:-.venv}"
py="$venv/bin/python"
dir="${TF_CNN_DIR:-.tf_cnn_benchmarks}"
np="${TF_CNN_NP:-1}" batch="${TF_CNN_BATCH:-32}"
say() { echo "[tf-cnn-benchmarks] $*"; }

if [ "$(git -C "$dir" rev-parse HEAD 2>/dev/null)" != "$COMMIT" ]; then
    say "fetching tensorflow/benchmarks at $COMMIT into $dir"
    mkdir -p "$dir"
    git -C "$dir" init -q
    git -C "$dir" fetch -q --depth 1 "$REPO_URL" "$COMMIT" \
        || { say "ERROR: could not fetch $REPO_URL (no internet access here?); run it where GitHub is reachable" >&2; exit 1; }
    git -C "$dir" checkout -q FETCH_HEAD
fi
data=(); [ -n "${TF_CNN_DATA:-}" ] && data=(--data_dir "$TF_CNN_DATA" --data_name imagenet)
device=(); command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' \
    || device=(--device cpu --data_format NHWC)
bench=("$py" "$dir/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py" --model resnet50 --batch_size "$batch"
       --num_batches 200 "${data[@]}" "${device[@]}")
if [ "$np" -gt 1 ]; then
    bench=("$venv/bin/horovodrun" -np "$np" -H "localhost:$np" --gloo "${bench[@]}" --variable_update horovod)
fi
mkdir -p results/tf_cnn_benchmarks
log="results/tf_cnn_benchmarks/resnet50-b$batch-np$np$([ -n "${TF_CNN_DATA:-}" ] || echo -synthetic).log"
say "${bench[*]}  (log: $log)"
TF_USE_LEGACY_KERAS=1 "${bench[@]}" 2>&1 | tee "$log"
grep -q '^total images/sec' "$log" && say "done: $(grep -m1 '^total images/sec' "$log")"
