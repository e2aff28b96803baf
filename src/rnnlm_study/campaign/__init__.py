"""Running the study's campaign: queue each (model, seed) as a DVC experiment or a Slurm array task,
say where each stands, and collect each finished run into its folder of reports/study/ (checked,
then swapped in). Judging the runs is `rnnlm_study.judging`'s; the run folders' layout and the
registered rules, which both read, are `rnnlm_study.folders` and `rnnlm_study.registration` (with `registration_git`)."""
