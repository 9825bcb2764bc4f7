"""The studies: an experiment's plan (contract/plan.py) run on a machine, by concern --

    launch.py     each planned run's config, backend, folder and state; its commands; its processes started here
    supervise.py  the runs side by side: started as slots free up, watched, a silent death marked failed
    progress.py   a line per run, the time taken and left (clock.py), the closing lines and comparison table
    slurm.py      the same plan submitted as sbatch jobs instead
    run.py        run_study: the front door's `study` command, local or Slurm
"""
