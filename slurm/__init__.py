"""Slurm harness: cluster profiles, sbatch command lines, and a private single-node Slurm cluster.

- `slurm.profiles`: `load_profile(name)` reads `slurm/clusters/<name>.toml`; `sbatch_argv(...)` builds the
  exact `sbatch ...` command a study run is submitted with.
- `slurm.local_cluster`: `start(workdir)` brings up slurmctld + slurmd on localhost (used by the tests and by
  `python -m slurm.local_cluster start --dir D` for trying the scripts on a laptop).
- `slurm/job.sh`: the bash functions every `experiments/NN_*/slurm.sbatch` sources (data staging, launch,
  preemption and requeue).
"""
