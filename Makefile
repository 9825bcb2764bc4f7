# The scaling-study suite. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SCALE ?= local
LAUNCHER ?= local
CLUSTER ?= local
QUICK ?=
SEEDS ?=
DRY_RUN ?=
JOBS ?=
HOROVOD ?= auto
STUDY_ARGS = --scale $(SCALE) --launcher $(LAUNCHER) --cluster $(CLUSTER) $(if $(QUICK),--quick) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(DRY_RUN),--dry-run) $(if $(JOBS),--jobs $(JOBS))

.DEFAULT_GOAL := help
EXPERIMENTS := $(addprefix exp,1 2 3 4 5 6 7 8 9)
.PHONY: help setup setup-horovod horovod-if-possible setup-cluster test test-fast report bench bench-step bench-comm noise-scale clean $(EXPERIMENTS)

help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_%-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'
	@printf "  \033[36m%-14s\033[0m %s\n" "exp1 ... exp9" "Run experiment N as a study, e.g. make exp3 (the main command)"
	@echo "  Variables: SCALE=local|gpu|thesis LAUNCHER=local|slurm CLUSTER=<slurm/clusters profile> QUICK=1 SEEDS=N JOBS=N DRY_RUN=1 HOROVOD=0"

setup: $(VENV)/.installed ## Create .venv with the pinned dependencies (fast when nothing changed)

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e .
	@touch $@

setup-horovod: setup ## Build Horovod 0.28.1 (Gloo+MPI on CPU; HOROVOD_GPU=nccl on a GPU cluster) into .venv
	bash trainers/horovod_build/setup.sh $(VENV)

# Experiments 1-3 compare DDP with Horovod, so they build Horovod first when it can be built (once, ~3 minutes).
# Not with HOROVOD=0 or DRY_RUN, nor for a real cluster (LAUNCHER=slurm, CLUSTER other than local): on its login node
# build it for the GPUs yourself (HOROVOD_GPU=nccl make setup-horovod). A failed build costs only the Horovod rows.
REAL_CLUSTER = $(and $(filter slurm,$(LAUNCHER)),$(filter-out local,$(CLUSTER)))
AUTO_HOROVOD = $(if $(or $(filter 0,$(HOROVOD)),$(DRY_RUN),$(REAL_CLUSTER)),,yes)
horovod-if-possible: setup
	$(if $(AUTO_HOROVOD),bash trainers/horovod_build/setup.sh $(VENV) \
	    || echo "make: Horovod could not be built (reason above); the study skips its Horovod rows")

setup-cluster: ## Install Slurm and Open MPI from Debian (root) for the Slurm and MPI tests
	bash slurm/install.sh

# In CI (CI=true, root) the Slurm, MPI and Horovod tests must run, so their dependencies are installed first.
test: setup $(if $(filter true,$(CI)),setup-cluster setup-horovod) ## Run the whole test suite (slow tests included)
	$(PY) -m pytest

test-fast: setup ## Run the fast tests only (under a minute)
	$(PY) -m pytest -m "not slow"

# expN: Run experiment N as a study (listed by `make help` below)
$(EXPERIMENTS): exp%: setup
	$(PY) -m trainers study $(wildcard experiments/0$*_*) $(STUDY_ARGS)
exp1 exp2 exp3: horovod-if-possible

report: setup ## Regenerate results/tables, results/figures and the notebooks from results/runs
	$(PY) -m analysis report

bench: setup bench-step ## Benchmark the trainer against a hand-written loop, and emulated workers' cost
	$(PY) -m trainers bench --model cifar_resnet20 --image-size 32 --batch 256 --workers 32

bench-step: setup ## The local step (1 x 4 and 32 x 4 workers) before/after the in-memory data -> results/bench_step.json
	$(PY) -m trainers.bench_step --variants channels_last --json results/bench_step.json

bench-comm: setup-horovod ## DDP vs Horovod throughput on 2 CPU processes, and the communication share (seed 002)
	$(PY) -m trainers.bench_comm --fp16 --json results/bench_comm.json

# the runs share seed 0, hence their initial weights: those are measured once
NOISE_RUNS = $(wildcard results/runs/05_linear_scaling/w*-s0 results/runs/06_linear_scaling_stepping_warmup/w32-s0)
noise-scale: setup ## Gradient noise scale of the local exp5/exp6 models, initial and final weights -> results/noise_scale/
	@test -n "$(NOISE_RUNS)" || { echo "make: no experiment 5/6 runs in results/runs: run 'make exp5 exp6' first"; exit 2; }
	$(PY) -m trainers noise-scale $(firstword $(NOISE_RUNS)) --init --groups 32 --json results/noise_scale/initial.json
	$(PY) -m trainers noise-scale $(NOISE_RUNS) --groups 64 --json results/noise_scale/final.json

clean: ## Remove caches (generated datasets) but not results
	rm -rf .cache .pytest_cache
