"""The speed and reproducibility benchmarks, one module each, run as `python -m benchmarks.NAME` from the
repository root (docs/layout.md says what each measures; their reports go to reports/speed/)."""
