"""The study across models and seeds: queue the runs (here or on a Slurm cluster), collect them into
`reports/study/`, and report them with their intervals. `python -m rnnlm_study --help` lists the
commands (`rnnlm_study.cli`)."""
