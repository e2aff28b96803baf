"""The speed benchmark runs and prints its tables (`--quick`: tiny shapes; no time is asserted)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO_ROOT


def _benchmark(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    """`benchmarks/speed.py --quick ARGS` from the repository root, importing this checkout's library."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.run(
        [sys.executable, "benchmarks/speed.py", "--quick", *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )


def test_quick_benchmark_prints_both_tables():
    models = ["astra_alpha", "leviathan", "rnn_alpha", "scribe_alpha"]
    result = _benchmark("--models", *models, timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "GFLOP/s (median)" in out
    training = [line for line in out.splitlines() if line.startswith("| ")]
    for model in models:
        for implementation in ("step-by-step", "ours"):
            assert any(line.startswith(f"| {model} | {implementation} |") for line in training), (model, implementation)
    assert any(line.startswith("| leviathan | nn.LSTM |") for line in training)
    assert any(line.startswith("| astra_alpha | nn.GRU |") for line in training)
    assert any(line.startswith("| rnn_alpha | nn.RNN |") for line in training)
    # sampling rows: character models only, at both batch sizes
    for model in ("astra_alpha", "leviathan", "rnn_alpha"):
        for batch in (1, 4):
            assert any(line.startswith(f"| {model} | {batch} |") for line in out.splitlines()), (model, batch)
    assert not any(line.startswith("| scribe_alpha | 1 |") for line in out.splitlines())


def test_bad_repeats_is_a_clear_error():
    result = _benchmark("--repeats", "0")
    assert result.returncode == 2
    assert "--repeats 0: expected a positive integer" in result.stderr


def test_a_model_without_recurrence_is_refused():
    result = _benchmark("--models", "bengio_mlp")
    assert result.returncode == 2
    assert "--models bengio_mlp: expected a recurrent model" in result.stderr
