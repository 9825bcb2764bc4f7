"""Slurm harness (slurm/README.md): cluster profiles and the sbatch lines of a study's runs (`profiles.py`), the job
script every `experiments/NN_*/slurm.sbatch` sources (`job.sh`), and a private Slurm cluster on this machine, its
nodes hosts of their own in network namespaces (`local_cluster.py`, `netns.py`).
"""
