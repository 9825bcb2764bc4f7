#!/usr/bin/env bash
# The more-steps pilot (results/more_steps_pilot/README.md): the local miniature at 72 epochs instead of 18, so the
# 32-worker runs take 4,500 optimizer steps instead of 1,125; warm-up and lr drops scaled with the epochs.
# Run from the repository root after `make setup`: bash results/more_steps_pilot/run.sh SEED  (~32 min on 2 cores)
set -euo pipefail
seed="${1:?usage: bash results/more_steps_pilot/run.sh SEED}"
out=results/more_steps_pilot/runs
common=(--scale local --out "$out" --set train.epochs=72 --set 'lr.milestones=[24, 48, 64]' --set train.print_freq=1000
        --set "train.seed=$seed")
# train EXPERIMENT RUN SETTINGS...: one run, its console output in its folder as the study runner keeps it
train() {
    mkdir -p "$out/$(basename "$1")/$2"
    OMP_NUM_THREADS=1 .venv/bin/python -m trainers train "$1" --run "$2" "${@:3}" "${common[@]}" \
        > "$out/$(basename "$1")/$2/console.log" 2>&1
}

# the 1-worker baseline (experiment 5's, lr 0.025) beside the two 32-worker runs (lr 0.8), one core each
train experiments/05_linear_scaling baseline-w1-s$seed --set train.workers=1 &
train experiments/06_linear_scaling_stepping_warmup stepping4-w32-s$seed --set train.workers=32 --set lr.warmup_epochs=4
train experiments/05_linear_scaling nowarmup-w32-s$seed --set train.workers=32
wait
