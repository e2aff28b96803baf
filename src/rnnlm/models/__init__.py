"""The language models (`language_model`, `window_mlp`), their recurrent cells (`cells`, one slice per
cell behind a registry), the format of their state (`state`) and their checkpoints (`checkpoint`)."""
