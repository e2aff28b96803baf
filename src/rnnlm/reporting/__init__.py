"""What people read of one run: the side-by-side samples (`generation_markdown`) and the training
metrics and curves (`training_report`). The study across runs is `rnnlm_study`."""
