# shellcheck shell=bash
# Common launch logic for every experiments/NN_*/slurm.sbatch.  Source it, then call `run_job "$@"`:
#
#     #!/bin/bash
#     #SBATCH ...                      (only what is fixed for the experiment; the runner passes the rest)
#     source "${SLURM_HARNESS:-$SLURM_SUBMIT_DIR/slurm}/job.sh"
#     run_job "$@"                     # "$@" = the trainer's arguments after `train`, given to sbatch after the script
#
# What a job does, in order (each step is also a function you can call on its own):
#   load_modules   `module load $MODULES` where the cluster has environment modules (profile key `modules`)
#   stage_data     extract $DATA_TAR into node-local $SCRATCH once per node, as the thesis did with
#                  `srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 tar xf ...`; then `--set data.path=...`
#   set_rendezvous MASTER_ADDR = first host of the allocation, MASTER_PORT from the job id (fresh per job/restart)
#   launch_train   DDP and single-process runs under `srun`, Horovod under `mpirun` with the thesis's flags
#                  (or `srun --mpi=pmix`), in the background so the batch shell can forward signals
#   on exit code 4 (preempted: the trainer checkpointed on SIGUSR1/SIGTERM) the job requeues itself
#                  (`scontrol requeue`, same job id) or, when that is refused, submits its successor
#                  (`sbatch --dependency=afterany:<this job>`); the next start adds `--resume auto`.
#
# Environment read (the runner passes it with `sbatch --export=ALL,VAR=...`; all optional):
#   TRAIN_ARGS     trainer arguments when none are given to run_job (word-split; no quoting)
#   TRAIN_CMD      command that trains (default: "$PYTHON -m trainers train"); word-split
#   PYTHON         interpreter (default: python3)
#   OMP_NUM_THREADS each rank's threads (default: from the CPUs its task was given, contract/placement.py)
#   BACKEND        ddp | fsdp | hsdp | horovod | mwms | single | emulated | dp | auto (default: ddp); horovod =>
#                  MPI launch, the others srun
#   MPI_LAUNCHER   mpirun (default) | srun          how Horovod ranks start
#   SRUN_MPI       MPI plugin for `srun --mpi=` when MPI_LAUNCHER=srun (default: pmix)
#   MPI_ARGS       extra mpirun arguments, e.g. "--oversubscribe"
#   MPI_ALLOW_ROOT 1: add --allow-run-as-root when the job runs as root (containers, the local test cluster)
#   SRUN_ARGS      extra srun arguments for the training step
#   MODULES        space-separated modules to load
#   DATA_TAR       tar file to stage (none: no staging)    DATA_SUBDIR  folder inside the tar that is the dataset
#   SCRATCH        node-local scratch; or SCRATCH_VAR, the name of the variable that holds it on the node
#                  (default: $TMPDIR, else /tmp)
#   DDP_INIT       env (default: MASTER_ADDR/MASTER_PORT) | file (the thesis's shared-file init; the file lives
#                  in $INIT_DIR, default $SLURM_SUBMIT_DIR/.rendezvous, and must be on a shared file system)
#   REQUEUE        1 (default): on exit code 4 requeue this job (falling back to a successor job);
#                  chain: always submit a successor (clusters where users may not requeue); 0: just exit 4
#   MAX_RESTARTS   give up after this many requeues + resubmissions (default: 50)
#   RESUME         restart (default: `--resume auto` only after a requeue/resubmission) | always | never
#   JOB_SCRIPT     the script to resubmit when requeue is refused (default: Command= of `scontrol show job`;
#                  the successor gets the same arguments, nodes, tasks, time limit, partition, gres and output)
#   JOB_SIGNAL     the job's --signal (e.g. B:USR1@120), repeated for a successor job
#   PREEMPT_SIGNAL the signal forwarded to the trainer (default: USR1)
# Exit status of run_job: the trainer's (0 completed, 1 failed, 2 usage, 3 diverged, 4 preempted and not
# requeued); after a successful requeue the job is ended by Slurm and starts again.

_log() { echo "[job.sh $(date +%H:%M:%S)] $*" >&2; }

# ---------------------------------------------------------------------------------------------------------------
# Environment and data
# ---------------------------------------------------------------------------------------------------------------

load_modules() {
    [[ -z "${MODULES:-}" ]] && return 0
    if ! type module >/dev/null 2>&1; then
        _log "MODULES=\"$MODULES\" but this machine has no \`module\` command; continuing without"
        return 0
    fi
    # shellcheck disable=SC2086
    module load $MODULES
}

# Node-local scratch: $SCRATCH, else the variable named by $SCRATCH_VAR (e.g. TMPDIR, read here on the node),
# else $TMPDIR, else /tmp.
scratch_dir() {
    local s="${SCRATCH:-}"
    [[ -z "$s" && -n "${SCRATCH_VAR:-}" ]] && s="${!SCRATCH_VAR:-}"
    echo "${s:-${TMPDIR:-/tmp}}"
}

# Extract $DATA_TAR into $SCRATCH on every node of the job, once per node (a marker survives requeues on the
# same node). Sets and exports DATA_PATH=$SCRATCH/$DATA_SUBDIR. No-op without DATA_TAR.
stage_data() {
    [[ -z "${DATA_TAR:-}" ]] && return 0
    local scratch
    scratch=$(scratch_dir)
    local marker
    marker="$scratch/.staged-$(basename "$DATA_TAR")"
    if [[ ! -r "$DATA_TAR" ]]; then
        _log "DATA_TAR=$DATA_TAR is not readable"
        return 1
    fi
    _log "staging $DATA_TAR to $scratch on ${SLURM_NNODES:-1} node(s)"
    local t0=$SECONDS
    # One task per node: each node extracts its own copy into node-local scratch.
    srun --ntasks="${SLURM_NNODES:-1}" --ntasks-per-node=1 bash -c \
        'mkdir -p "$1" && { [ -e "$2" ] || { tar xf "$3" -C "$1" && touch "$2"; }; }' \
        stage "$scratch" "$marker" "$DATA_TAR" || return 1
    _log "staged in $((SECONDS - t0)) s"
    export DATA_PATH="$scratch${DATA_SUBDIR:+/$DATA_SUBDIR}"
}

# MASTER_ADDR/MASTER_PORT for torch.distributed's env:// rendezvous: the first host of the allocation, and a
# port derived from the job id and restart count, so concurrent jobs and successive restarts never collide.
set_rendezvous() {
    if [[ -z "${MASTER_ADDR:-}" ]]; then
        MASTER_ADDR=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-localhost}" 2>/dev/null | head -n 1)
        export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
    fi
    if [[ -z "${MASTER_PORT:-}" ]]; then
        # the formula lives in trainers/rendezvous.py, which a process started without job.sh uses too
        local root
        root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
        MASTER_PORT=$(PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m trainers.rendezvous) \
            || { _log "no rendezvous port (see the error above)"; return 1; }
        export MASTER_PORT
    fi
}

_restarts() { echo $(( ${SLURM_RESTART_COUNT:-0} + ${CHAIN_DEPTH:-0} )); }

# ---------------------------------------------------------------------------------------------------------------
# Launch, with signal forwarding
# ---------------------------------------------------------------------------------------------------------------
# Slurm's `--signal=B:USR1@N` reaches only the batch shell, and at the time limit SIGTERM reaches every process.
# The trainer runs in the background; the shell traps USR1/TERM and forwards $PREEMPT_SIGNAL to the launcher
# process. Both launchers pass it on to every rank: srun forwards the signals it receives to its tasks on all
# nodes, mpirun forwards SIGUSR1/SIGUSR2 to all its processes. (`scancel --signal` would miss the ranks that
# mpirun forks on the first node, which belong to the batch step.)

_LAUNCH_PID=""
_PREEMPTED=0

_forward_signal() {
    local sig=$1
    _PREEMPTED=1
    _log "got SIG$sig; forwarding SIG${PREEMPT_SIGNAL:-USR1} to the training step (pid ${_LAUNCH_PID:-none})"
    [[ -n "$_LAUNCH_PID" ]] && kill -s "${PREEMPT_SIGNAL:-USR1}" "$_LAUNCH_PID" 2>/dev/null
}

# Build the command line in the array _CMD.
_build_cmd() {
    local -a train_cmd
    # shellcheck disable=SC2206
    train_cmd=(${TRAIN_CMD:-${PYTHON:-python3} -m trainers train})
    local -a args=("$@")
    if [[ ${#args[@]} -eq 0 && -n "${TRAIN_ARGS:-}" ]]; then
        # shellcheck disable=SC2206
        args=($TRAIN_ARGS)
    fi
    [[ -n "${DATA_PATH:-}" ]] && args+=(--set "data.path=$DATA_PATH")
    if [[ "${DDP_INIT:-env}" == file ]]; then
        local dir="${INIT_DIR:-${SLURM_SUBMIT_DIR:-$PWD}/.rendezvous}"
        mkdir -p "$dir"
        local f="$dir/init.${SLURM_JOB_ID:-0}.$(_restarts)"
        rm -f "$f"                      # a stale file from an earlier attempt would hang the rendezvous
        args+=(--set "train.init_method=file://$f")
    fi
    case "${RESUME:-restart}" in
        always) args+=(--resume auto) ;;
        never) ;;
        *) (( $(_restarts) > 0 )) && args+=(--resume auto) ;;
    esac

    local -a launcher
    if [[ "${BACKEND:-ddp}" == horovod ]]; then
        if [[ "${MPI_LAUNCHER:-mpirun}" == srun ]]; then
            # shellcheck disable=SC2206
            launcher=(srun --mpi="${SRUN_MPI:-pmix}" --kill-on-bad-exit=1 ${SRUN_ARGS:-})
        else
            # The thesis's appendices 1-3, 6, 8, 10, 12, 14. Inside an allocation mpirun takes the
            # node list and slots from Slurm itself.
            # shellcheck disable=SC2206
            launcher=(mpirun -np "${SLURM_NTASKS:-1}" -bind-to none -map-by slot
                      -x NCCL_DEBUG=INFO -x PATH
                      -mca pml ob1 -mca btl ^openib ${MPI_ARGS:-})
            [[ -n "${LD_LIBRARY_PATH:-}" ]] && launcher+=(-x LD_LIBRARY_PATH)
            [[ -n "${PYTHONPATH:-}" ]] && launcher+=(-x PYTHONPATH)
            [[ "${MPI_ALLOW_ROOT:-0}" == 1 && $(id -u) == 0 ]] && launcher+=(--allow-run-as-root)
        fi
    else
        # DDP, FSDP (fsdp, hsdp) and single-process runs: one task per GPU, rank from SLURM_PROCID, device from
        # SLURM_LOCALID.
        # shellcheck disable=SC2206
        launcher=(srun --kill-on-bad-exit=1 ${SRUN_ARGS:-})
    fi
    _CMD=("${launcher[@]}" "${train_cmd[@]}" "${args[@]}")
}

# Run the training step in the background and wait for it while forwarding USR1/TERM. Returns its exit status.
launch_train() {
    set_rendezvous || return 2
    # each rank takes its threads from the CPUs Slurm gave its task itself (contract/placement.py), under srun and
    # mpirun alike: an OMP_NUM_THREADS exported here would pass for a user's choice
    _build_cmd "$@"
    _log "job ${SLURM_JOB_ID:-?} restart $(_restarts) on ${SLURM_JOB_NODELIST:-localhost}" \
         "(${SLURM_NNODES:-1} nodes, ${SLURM_NTASKS:-1} tasks); MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"
    _log "launch: ${_CMD[*]}"
    trap '_forward_signal USR1' USR1
    trap '_forward_signal TERM' TERM
    "${_CMD[@]}" &
    _LAUNCH_PID=$!
    local rc
    while :; do
        wait "$_LAUNCH_PID"
        rc=$?
        # `wait` returns >128 when a trapped signal interrupts it; the step is then still running (or exited
        # just now: a second `wait` gives its real status, bash keeps it for reaped background jobs).
        if (( rc > 128 )); then
            if kill -0 "$_LAUNCH_PID" 2>/dev/null; then continue; fi
            wait "$_LAUNCH_PID" 2>/dev/null
            local rc2=$?
            (( rc2 != 127 )) && rc=$rc2
        fi
        break
    done
    trap - USR1 TERM
    _LAUNCH_PID=""
    _log "training step exited with $rc"
    return "$rc"
}

# ---------------------------------------------------------------------------------------------------------------
# Requeue
# ---------------------------------------------------------------------------------------------------------------

# Put this job back into the queue (same job id; Slurm restarts it after its requeue back-off, typically 120 s).
# Falls back to submitting a successor that starts when this job has ended. Returns non-zero if neither worked.
requeue_self() {
    local n
    n=$(_restarts)
    if (( n >= ${MAX_RESTARTS:-50} )); then
        _log "not requeueing: already restarted $n times (MAX_RESTARTS=${MAX_RESTARTS:-50})"
        return 1
    fi
    if [[ "${REQUEUE:-1}" != chain && -z "${CHAIN_DEPTH:-}" ]]; then
        # Logged before the call: Slurm ends this attempt, this shell included, as it requeues the job, so a
        # line after a successful `scontrol requeue` may never be written.
        _log "requeueing job $SLURM_JOB_ID (restart $((n + 1)))"
        if scontrol requeue "$SLURM_JOB_ID"; then
            return 0
        fi
    fi
    _log "scontrol requeue refused or chained job; submitting a successor instead"
    local script="${JOB_SCRIPT:-}"
    if [[ -z "$script" ]]; then
        script=$(scontrol show job -o "$SLURM_JOB_ID" | tr ' ' '\n' | sed -n 's/^Command=//p')
    fi
    if [[ -z "$script" || ! -r "$script" ]]; then
        _log "cannot resubmit: job script unknown (set JOB_SCRIPT)"
        return 1
    fi
    # The successor inherits this environment (--export=ALL, hence every variable the runner passed) and the
    # script's #SBATCH lines; what the first submission gave on the command line is read back from Slurm.
    local info
    info=$(scontrol show job -o "$SLURM_JOB_ID" | tr ' ' '\n')
    _field() { sed -n "s/^$1=//p" <<<"$info" | head -n 1; }
    local -a opts=(--dependency="afterany:$SLURM_JOB_ID" --export="ALL,CHAIN_DEPTH=$((${CHAIN_DEPTH:-0} + 1))"
                   -N "${SLURM_NNODES:-1}" -J "${SLURM_JOB_NAME:-train}" --open-mode=append)
    if [[ -n "${SLURM_NTASKS_PER_NODE:-}" ]]; then
        opts+=(--ntasks-per-node="${SLURM_NTASKS_PER_NODE%%(*}")
    else
        opts+=(-n "${SLURM_NTASKS:-1}")
    fi
    [[ -n "${SLURM_CPUS_PER_TASK:-}" ]] && opts+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
    local v
    v=$(_field StdOut);      [[ -n "$v" ]] && opts+=(-o "$v")
    v=$(_field StdErr);      [[ -n "$v" ]] && opts+=(-e "$v")
    v=$(_field TimeLimit);   [[ -n "$v" && "$v" != UNLIMITED ]] && opts+=(-t "$v")
    v=$(_field Partition);   [[ -n "$v" ]] && opts+=(-p "$v")
    v=$(_field TresPerNode); [[ -n "$v" && "$v" != "(null)" ]] && opts+=(--gres="${v#gres:}")
    [[ -n "${JOB_SIGNAL:-}" ]] && opts+=(--signal="$JOB_SIGNAL")   # not shown by scontrol; the runner passes it
    local next
    if next=$(env -u SLURM_RESTART_COUNT -u MASTER_ADDR -u MASTER_PORT sbatch --parsable "${opts[@]}" "$script" "${_JOB_ARGS[@]}"); then
        _log "submitted successor job $next"
        return 0
    fi
    return 1
}

# The whole job: modules, data, training; requeue when preempted. Pass the trainer's arguments.
run_job() {
    _JOB_ARGS=("$@")
    load_modules || return 1
    stage_data || return 1
    local rc=0
    launch_train "$@" || rc=$?
    # Exit code 4 = the trainer checkpointed and stopped. A trainer killed by the forwarded signal before its
    # handler was installed (rc > 128) had nothing new to save; restart it as well.
    if (( rc == 4 )) || { (( _PREEMPTED )) && (( rc > 128 )); }; then
        if [[ "${REQUEUE:-1}" != 0 && -n "${SLURM_JOB_ID:-}" ]]; then
            requeue_self && exit 0
        fi
        return 4
    fi
    return "$rc"
}
