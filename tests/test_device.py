"""Where a run computes and what it records of it: the device train.device resolves to, the
repeatable arithmetic asked of CUDA, and the processor named in a run's metrics."""

from __future__ import annotations

import os

import pytest
import torch

from rnnlm.compute import cpu
from rnnlm.compute.device import DeviceError, make_cuda_repeatable, resolve_device
from rnnlm.training.record import processor_name


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(DeviceError, match="train.device is 'cuda' but no CUDA GPU is available"):
        resolve_device("cuda")
    assert resolve_device("auto").type == "cpu"


def test_cuda_runs_ask_for_repeatable_arithmetic(monkeypatch):
    """cuBLAS's fixed workspace (unless the user set another) and PyTorch's deterministic algorithms,
    warning only: what `device_for` sets on CUDA before the first product."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        make_cuda_repeatable()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
        make_cuda_repeatable()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.mark.parametrize("cpuinfo, expected", [
    ({"model name": "AMD EPYC", "cpu family": "26", "model": "2", "stepping": "1"},
     "AMD EPYC (family 26 model 2 stepping 1)"),
    ({"model name": "AMD EPYC", "cpu family": "25", "model": "1", "stepping": "1"},
     "AMD EPYC (family 25 model 1 stepping 1)"),
    ({"model name": "Some CPU"}, "Some CPU"),  # no generation readable: the name alone
])
def test_the_processor_a_run_records_tells_cpu_generations_apart(monkeypatch, cpuinfo, expected):
    monkeypatch.setattr(cpu, "_cpuinfo", lambda field: cpuinfo.get(field, ""))
    assert processor_name(torch.device("cpu")) == expected
