"""Training: the epoch loop with validation, checkpoints and resume (`train`), and one optimizer
step, eager or captured as a CUDA graph (`step`)."""
