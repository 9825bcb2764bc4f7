# The scaling-study suite. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Variables: `make help` prints each "## VAR=..." line below as it is.
## SCALE=local|gpu|node|thesis  local: CPU miniature (default); gpu: one GPU; node: one multi-GPU machine; thesis: the thesis (Slurm)
SCALE ?= local
## LAUNCHER=local|slurm     run the study's runs here (default), or submit them with sbatch
LAUNCHER ?= local
## CLUSTER=<profile>        with LAUNCHER=slurm: a profile in slurm/clusters/ (local, generic, node, taito; docs/cluster.md)
CLUSTER ?= local
## QUICK=1                  the study shrunk to a smoke run (a minute or two), into results/quick/
QUICK ?=
## SEEDS=N                  seeds per configuration (default: the study's own, 3 at the local and gpu scales)
SEEDS ?=
## JOBS=N                   quality runs side by side, the cores split between them (default: one per core on CPU)
JOBS ?=
## ONLY="w32-* w1-s0"       only the study's runs of these names or patterns (e.g. to add one worker count's seeds)
ONLY ?=
## GPUS=N                   SCALE=node: the node's GPUs (default: those visible, else 8 as in experiments/scales.toml); make cost: the node it prices (default 8)
GPUS ?=
## DRY_RUN=1                print the exact commands / sbatch lines and stop
DRY_RUN ?=
## OUT=DIR                  the runs' folder (default results/runs, QUICK=1 results/quick); make report OUT=DIR and make tensorboard OUT=DIR read it
OUT ?=
## HOROVOD=0                experiments 1-3: don't build Horovod first (its rows are skipped)
HOROVOD ?= auto
## SITE_TORCH=1             make setup: a venv on the site's PyTorch (--system-site-packages), torch not pinned
SITE_TORCH ?=
## IMAGENET_DIR=DIR         SCALE=gpu|node|thesis: the ILSVRC-2012 root (train/ and val/ class folders); an environment
##                          variable (export it, or pass it on the make line); a Slurm profile may stage a tar instead
## GPU_CHECK_DATA=DIR       make gpu-check: the ImageFolder for its real-JPEG rows (default IMAGENET_DIR)
GPU_CHECK_DATA ?=
## NODES=N                  make cluster: the local cluster's nodes, each a host of its own (default 3); make cluster-check: the nodes each check job spans (default 2)
NODES ?= 3
## LINK=RATE                make cluster, cluster-link: limit each local node's link to RATE (tc's units: 100mbit, 1gbit; none lifts it)
LINK ?=
## CLUSTER_DIR=DIR          make cluster: where the local cluster keeps its config, state and logs (default .cluster)
CLUSTER_DIR ?= .cluster
# The local cluster's clients need its config: CLUSTER=local finds it in CLUSTER_DIR unless SLURM_CONF is set.
ifeq ($(CLUSTER)$(SLURM_CONF),local)
ifneq ($(wildcard $(CLUSTER_DIR)/slurm.conf),)
export SLURM_CONF := $(abspath $(CLUSTER_DIR)/slurm.conf)
endif
endif
STUDY_ARGS = --scale $(SCALE) --launcher $(LAUNCHER) --cluster $(CLUSTER) $(if $(QUICK),--quick) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(DRY_RUN),--dry-run) $(if $(GPUS),--gpus $(GPUS)) $(if $(JOBS),--jobs $(JOBS)) $(if $(OUT),--out $(OUT)) $(if $(ONLY),--only $(foreach p,$(ONLY),'$(p)'))

.DEFAULT_GOAL := help
.PHONY: advise advise-local help setup setup-horovod setup-dali setup-tf setup-tensorboard setup-browser setup-corpus tensorboard tf-cnn-benchmarks horovod-if-possible setup-cluster cluster cluster-link cluster-stop cluster-check link-sweep test test-fast report reference-report reference-add cost bench bench-data bench-step bench-comm gpu-check noise-scale exp13-next clean

# The experiments `make help` lists: every experiments/NN_* folder, found rather than typed, so a new one is listed.
EXPERIMENTS = $(sort $(patsubst %/,%,$(wildcard experiments/[0-9][0-9]_*/)))

# Colour only on a terminal: piped into a file, a pager or grep, `make help` is plain text.
help: ## List the targets and the variables
	@if [ -t 1 ]; then on=$$(printf '\033[36m'); off=$$(printf '\033[0m'); else on=; off=; fi; \
	echo "Targets:"; \
	grep -hE '^[a-zA-Z0-9_%-]+:.*## ' $(MAKEFILE_LIST) | awk -v on="$$on" -v off="$$off" \
	    'BEGIN {FS = ":.*## "}; {printf "  %s%-14s%s %s\n", on, $$1, off, $$2}'; \
	printf "  %s%-14s%s %s\n" "$$on" "expN" "$$off" "Run experiments/NN_* as a study, e.g. make exp3 (the main command); the experiments:"; \
	for dir in $(EXPERIMENTS); do name=$${dir#experiments/}; \
	    printf "    %s%-12s%s %s\n" "$$on" "exp$$((10#$${name%%_*}))" "$$off" "$$name"; done; \
	echo; echo "Variables (e.g. make exp6 SCALE=thesis LAUNCHER=slurm CLUSTER=taito DRY_RUN=1):"; \
	grep -hE '^## ' $(MAKEFILE_LIST) | sed 's/^## /  /'

setup: $(VENV)/.installed ## Create .venv with the pinned dependencies (fast when nothing changed)

# SITE_TORCH=1: an HPC centre's PyTorch module (load it first; PYTHON=its python3) instead of the pinned wheel: the
# venv sees the site's packages, and every pin but torch/torchvision is installed on top.
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
NOT_TORCH = $(PY) -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
                      print(' '.join(d for d in deps if d.split('=')[0] not in ('torch', 'torchvision')))"
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(if $(SITE_TORCH),--system-site-packages) $(VENV)
ifeq ($(SITE_TORCH),)
	$(PIP) -e .
else
	@grep -q 'include-system-site-packages = true' $(VENV)/pyvenv.cfg || { echo "make: $(VENV) was made without \
	SITE_TORCH=1 (it pins its own torch): remove it first (rm -rf $(VENV))"; exit 2; }
	@$(PY) -c "import torch, torchvision; print('site PyTorch', torch.__version__, 'torchvision', torchvision.__version__)" 2>/dev/null \
	    || { echo "make: SITE_TORCH=1 but $(PYTHON) has no torch/torchvision: load the site's PyTorch module first"; exit 2; }
	$(PIP) $$($(NOT_TORCH))
	$(PIP) --no-deps -e .
endif
	@touch $@

setup-horovod: setup ## Build Horovod 0.28.1 (Gloo+MPI on CPU; HOROVOD_GPU=nccl on a GPU cluster) into .venv
	bash trainers/horovod_build/setup.sh $(VENV)

# Experiments 1-3 compare DDP with Horovod, so they build Horovod first when it can be built (once, ~3 minutes).
# Not with HOROVOD=0 or DRY_RUN, nor for a real cluster (LAUNCHER=slurm, CLUSTER other than local): on its login node
# build it for the GPUs yourself (HOROVOD_GPU=nccl make setup-horovod). A failed build costs only the Horovod rows.
REAL_CLUSTER = $(and $(filter slurm,$(LAUNCHER)),$(filter-out local,$(CLUSTER)))
# SCALE=node refuses experiment 3 in one line, so it builds nothing first. (No comment after a variable's value in
# this file: make keeps the spaces before it, and a value of spaces is not empty.)
NODE_EXP3 = $(and $(filter node,$(SCALE)),$(filter exp3,$(MAKECMDGOALS)))
AUTO_HOROVOD = $(if $(or $(filter 0,$(HOROVOD)),$(DRY_RUN),$(REAL_CLUSTER),$(NODE_EXP3)),,yes)
# TensorFlow is optional (about 2.2 GB): experiments 1-3 skip their TensorFlow rows with a line without it.
setup-tf: setup ## Install TensorFlow 2.21 + tf-keras (pinned) into .venv and rebuild Horovod with TF and PyTorch (~10 min)
	bash trainers/tf/setup.sh $(VENV)

# Opt-in, never in CI: third-party code from GitHub (needs internet), fetched into a gitignored folder.
## TF_CNN_NP=N TF_CNN_BATCH=B TF_CNN_DATA=DIR   make tf-cnn-benchmarks: processes (default 1), per-device batch (32), TFRecords (default synthetic)
tf-cnn-benchmarks: setup-tf ## Opt-in: fetch tf_cnn_benchmarks (pinned commit) into .tf_cnn_benchmarks/ and run its ResNet-50 as the thesis did
	bash trainers/tf/tf_cnn_benchmarks.sh $(VENV)

horovod-if-possible: setup
	$(if $(AUTO_HOROVOD),bash trainers/horovod_build/setup.sh $(VENV) \
	    || echo "make: Horovod could not be built (reason above); the study skips its Horovod rows")

# an extra of pyproject.toml, its pins (pip leaves a package as it is when it is there already): $(call EXTRA_PINS,dali)
EXTRA_PINS = $(PY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['$(1)']))"
# data.decoder = "dali": pyproject's `dali` extra
setup-dali: setup ## Install NVIDIA DALI 2.4.0 into .venv for data.decoder = "dali" (optional: a GPU's JPEG decoder; runs on CPU too)
	$(PIP) $$($(call EXTRA_PINS,dali))
	@$(PY) -c "import nvidia.dali; print('make: NVIDIA DALI', nvidia.dali.__version__, 'in $(VENV)')"

setup-tensorboard: setup ## Install TensorBoard 2.21.0 (pinned) into .venv: the trainers then write event files beside each run's records
	$(PIP) $$($(call EXTRA_PINS,tensorboard))

# The browser test of the report's page needs a browser and a driver of the same version: Debian's chromium and
# chromedriver (root), driven by Selenium (the `test` extra). Without them that test skips with one line.
setup-browser: setup ## Install Debian's chromium and chromedriver (root) and Selenium (pinned) for the report page's browser test
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }
	$(PIP) $$($(call EXTRA_PINS,test))

# The GPT workload's local corpus (workloads/gpt/corpus.py): the Python documentation's reStructuredText sources,
# about 11 million bytes of English and code, from Debian's package (root), never downloaded at run time.
CORPUS_PACKAGE = python3.11-doc
setup-corpus: ## Install Debian's python3.11-doc (root): the GPT workload's local corpus (its .rst sources, ~12 MB)
	@dpkg-query -W -f='$${Status}' $(CORPUS_PACKAGE) 2>/dev/null | grep -q "install ok installed" || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(CORPUS_PACKAGE); }
	@echo "make: $(CORPUS_PACKAGE) $$(dpkg-query -W -f='$${Version}' $(CORPUS_PACKAGE)) installed (its sources: /usr/share/doc/python3.11/html/_sources)"

setup-cluster: ## Install Slurm and Open MPI from Debian (root) for the Slurm and MPI tests
	bash slurm/install.sh

cluster: setup setup-cluster ## Start a local Slurm cluster of NODES hosts (network namespaces, root) in CLUSTER_DIR
	$(PY) -m slurm.local_cluster start --dir $(CLUSTER_DIR) --nodes $(NODES) $(if $(LINK),--rate $(LINK))
	@echo "make: LAUNCHER=slurm CLUSTER=local now submits to it (e.g. make exp3 LAUNCHER=slurm CLUSTER=local); make cluster-stop ends it"

cluster-link: setup ## Limit the local cluster's links to LINK (e.g. LINK=100mbit; LINK=none lifts it): the interconnect as a dial
	@test -n "$(LINK)" || { echo "make: give LINK=RATE (e.g. LINK=100mbit) or LINK=none"; exit 2; }
	$(PY) -m slurm.local_cluster link --dir $(CLUSTER_DIR) --rate $(LINK)

link-sweep: setup horovod-if-possible ## Experiment 3 on the local cluster at each LINK rate (default "100mbit 1gbit none") -> results/link_sweep/
	$(PY) -m tools link-sweep --cluster-dir $(CLUSTER_DIR) $(if $(LINK),--rates $(LINK))

cluster-stop: setup ## Stop the local Slurm cluster: its daemons, namespaces and links
	$(PY) -m slurm.local_cluster stop --dir $(CLUSTER_DIR)

cluster-check: setup ## Check a Slurm cluster (CLUSTER=P) layer by layer in minutes: nodes, hosts, staging, DDP, Horovod, training
	$(PY) -m tools cluster-check --cluster $(CLUSTER) --scale $(SCALE) $(if $(filter command line,$(origin NODES)),--nodes $(NODES)) $(if $(LAYERS),--layers $(LAYERS))

# In CI (CI=true, root) the Slurm, MPI, Horovod, TensorFlow, DALI, TensorBoard, browser and corpus tests must run,
# so their dependencies are installed first. setup-tf builds Horovod too (TensorFlow and PyTorch in one build): no
# setup-horovod of its own; setup-tensorboard after it, so its pin is the one installed.
test: setup $(if $(filter true,$(CI)),setup-cluster setup-tf setup-dali setup-tensorboard setup-browser setup-corpus) ## Run the whole test suite (slow tests included)
	$(PY) -m pytest

test-fast: setup ## Run the fast tests only (a few minutes on 2 cores: every test not marked slow)
	$(PY) -m pytest -m "not slow"

# expN: Run experiments/NN_* as a study, any N (listed by `make help` above). A pattern rule, so not .PHONY (make
# skips implicit rules for phony targets); the runs go to results/runs/ (QUICK=1: results/quick/).
exp%: setup
	$(eval EXP_DIR := $(firstword $(wildcard experiments/$(shell printf '%02d' '$*' 2>/dev/null)_*)))
	@test -n "$(EXP_DIR)" || { echo "make: no experiment $* (no experiments/NN_name folder for it)"; exit 2; }
	$(PY) -m suite study $(EXP_DIR) $(STUDY_ARGS)
exp1 exp2 exp3 exp14: horovod-if-possible  # the throughput studies with Horovod rows

exp13-next: setup ## Experiment 13 (second edition): the decisions due from the finished selection runs (OUT=runs; WRITE=1 writes them to edition2_decisions.toml)
	$(PY) -m tools exp13-next --scale $(SCALE) $(if $(OUT),--runs $(OUT)) $(if $(filter 1,$(WRITE)),--write)

# The report of results/runs (or OUT=) goes to results/report/<runs folder>/, cleared first; only the committed
# reference's runs (OUT=results/reference/vm-2cpu) redraw the committed report in results/.
report: setup ## Tables, figures, notebooks of results/runs (or OUT=DIR) -> results/report/<DIR>/ (printed at the end)
	$(PY) -m analysis report $(if $(OUT),--runs $(OUT))

# Any runs folder, the committed reference's too (event files are gitignored: rebuilt from metrics.jsonl at will).
tensorboard: setup-tensorboard ## TensorBoard event files for every run in results/runs (or OUT=DIR) from its records; prints the tensorboard --logdir line
	$(PY) -m analysis tensorboard $(if $(OUT),--runs $(OUT))

reference-report: setup ## Redraw the committed report (results/tables, figures, rq*.ipynb) from the committed reference
	$(PY) -m analysis report --runs results/reference/vm-2cpu
	$(PY) -m analysis headline --write

# e.g. make reference-add RUNS=results/runs/13_steps_to_target MACHINE=xeon-2cpu: the runs measured on that machine
reference-add: setup ## Copy a study's finished runs (RUNS=results/runs/NN_name) into results/reference/MACHINE/, without checkpoints
	@test -n "$(RUNS)" -a -n "$(MACHINE)" || { echo "make: give RUNS=results/runs/NN_name MACHINE=label (results/reference/LABEL)"; exit 2; }
	$(PY) -m tools reference-add $(RUNS) --machine $(MACHINE)

# The committed results/tables/cost* price the node scale's default 8-GPU node; another node (GPUS=N) is priced into
# results/report/cost-gpusN/ (gitignored), so pricing your node never rewrites the committed tables.
cost: setup ## GPU-hours of every experiment at the gpu and thesis scales, node-hours at the node scale -> results/tables/cost.md (GPUS=N: results/report/cost-gpusN/)
	$(PY) -m analysis cost $(if $(GPUS),--gpus $(GPUS) --out results/report/cost-gpus$(GPUS))

bench: setup bench-step bench-data ## Benchmark the trainer against a hand-written loop (ResNet images/s, gpt_local tokens/s), and emulated workers' cost (a GPU: results/bench_gpu.json)
	$(PY) -m tools bench --model cifar_resnet20 --image-size 32 --batch 256 --workers 32
	$(PY) -m tools bench --model gpt_local --batch 8 --repeats 5

# the shared real photos beside the project, when they are there (never needed: nothing else reads them)
BENCH_PHOTOS ?= ../shared/data/hymenoptera_data
bench-data: setup ## Each of our JPEG decoders (dali after make setup-dali) vs torchvision's ImageFolder + PIL, images/s per core (on BENCH_PHOTOS)
	@if [ -d "$(BENCH_PHOTOS)" ]; then $(PY) -m suite data bench $(BENCH_PHOTOS) --rounds 5 --json; \
	else echo "make: no $(BENCH_PHOTOS) here; run: $(PY) -m suite data bench <ImageFolder dir>"; fi

bench-step: setup ## The local step (1 x 4 and 32 x 4 workers) before/after the in-memory data -> results/bench_step.json
	$(PY) -m tools bench-step --variants channels_last,compile,channels_last+compile --profile --json results/bench_step.json

gpu-check: setup ## On a new GPU machine (~10 min): GPU tests, bench, JPEGs vs synthetic, exp 1 -> results/gpu_checks/
	$(PY) -m tools gpu-check $(if $(GPU_CHECK_DATA),--data $(GPU_CHECK_DATA))

# CLUSTER=P or LAUNCHER=slurm on the command line: each row a Slurm job across NODES nodes (default 2), one rank a
# node, into results/bench_comm/<P>-n<N>.json beside its run folders (gitignored: the cluster's numbers; the
# committed results/bench_comm.json is this machine's 2 processes).
BENCH_NODES = $(if $(filter command line,$(origin NODES)),$(NODES),2)
BENCH_ACROSS = $(or $(filter command line,$(origin CLUSTER)),$(filter slurm,$(LAUNCHER)))
bench-comm: setup-horovod ## DDP vs Horovod throughput on 2 CPU processes, and the communication share (seed 002); CLUSTER=local NODES=2: across the cluster's nodes, at its link's rate
	$(PY) -m tools bench-comm --fp16 $(if $(BENCH_ACROSS),--cluster $(CLUSTER) --nodes $(BENCH_NODES) --json results/bench_comm/$(CLUSTER)-n$(BENCH_NODES).json,--json results/bench_comm.json)

# the runs share seed 0, hence their initial weights: those are measured once
NOISE_RUN_GLOB = 05_linear_scaling/w*-s0 06_linear_scaling_stepping_warmup/w32-s0
# (runs with their checkpoint: the committed reference's folders keep none)
NOISE_RUNS = $(patsubst %/,%,$(dir $(wildcard $(addsuffix /checkpoint.pt,$(addprefix results/runs/,$(NOISE_RUN_GLOB))))))
# experiment 12's critical batch: its SGD run at the thesis's 4k stand-in (32 workers), seed 0
NOISE_EXP12_RUN = $(wildcard results/runs/12_large_batch/sgd-w32-s0/checkpoint.pt)
noise-scale: setup ## Gradient noise scale of the local exp5/exp6 (and exp12) models, initial and final weights -> results/noise_scale/
	@test -n "$(NOISE_RUNS)$(NOISE_EXP12_RUN)" || { echo "make: no experiment 5/6 or 12 runs in results/runs: run 'make exp5 exp6' or 'make exp12' first"; exit 2; }
	$(if $(NOISE_RUNS),$(PY) -m tools noise-scale $(firstword $(NOISE_RUNS)) --init --groups 32 --json results/noise_scale/initial.json)
	$(if $(NOISE_RUNS),$(PY) -m tools noise-scale $(NOISE_RUNS) --groups 64 --json results/noise_scale/final.json)
	$(if $(NOISE_EXP12_RUN),$(PY) -m tools noise-scale $(patsubst %/,%,$(dir $(NOISE_EXP12_RUN))) --init --groups 32 --json results/noise_scale/large_batch_initial.json)
	$(if $(NOISE_EXP12_RUN),$(PY) -m tools noise-scale $(patsubst %/,%,$(dir $(NOISE_EXP12_RUN))) --groups 64 --json results/noise_scale/large_batch_final.json)

# The advisor (analysis/advisor/model.py): its validation against the thesis's Tables 8-9 into the committed table, and
# with STEP=file.json (from `python -m tools step-split` on a GPU) the predicted images/s of 1...N GPUs of that step.
## LAYERS="L ..."            make cluster-check: only these layers (e.g. "link-intra link-inter": the advisor's link fit)
## STEP=file.json            make advise: a step measured by `python -m tools step-split`; GPUS_PER_NODE, INTRA, INTER: the machine to predict
# CLUSTER=P on the command line: make advise predicts that cluster (CLUSTER's default, local, does not)
ADVISE_CLUSTER = $(filter command line,$(origin CLUSTER))
advise: setup ## The scaling advisor: validation against the thesis -> results/tables/advisor_validation.md; STEP=file.json: predicted images/s for 1...N GPUs; CLUSTER=P: experiment 3's runs at SCALE as placed on that cluster, predicted from its cluster-check link fit
	$(PY) -m analysis advise --validate $(if $(ADVISE_CLUSTER),,$(if $(STEP),--step $(STEP) $(if $(GPUS_PER_NODE),--gpus-per-node $(GPUS_PER_NODE)) $(if $(INTRA),--intra $(INTRA)) $(if $(INTER),--inter $(INTER))))
	$(if $(ADVISE_CLUSTER),$(PY) -m suite advise --cluster $(CLUSTER) --scale $(SCALE) $(if $(STEP),--step $(STEP)))

advise-local: setup ## The advisor against experiment 3 on the local cluster at each LINK rate (default "20mbit 100mbit none"; make link-sweep with the same LINK first) -> results/tables/advisor_validation.md
	$(PY) -m tools advisor-local --cluster-dir $(CLUSTER_DIR) $(if $(LINK),--rates $(LINK))

clean: ## Remove caches (generated datasets) but not results
	rm -rf .cache .pytest_cache
