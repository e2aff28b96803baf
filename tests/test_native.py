"""Which scan loops run where, and what happens when the C++ build is not possible."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

from rnnlm import native, scan_loops

LOOP_FUNCTIONS = [
    "gru_forward", "gru_backward", "lstm_forward", "lstm_backward", "rnn_forward", "rnn_backward",
    "gru_step", "lstm_step", "rnn_step",
]


@pytest.fixture
def fresh_build_cache():
    """Forget this process's loaded build before and after the test (the disk cache stays)."""
    native.compiled.cache_clear()
    yield
    native.compiled.cache_clear()


def test_cpu_tensors_get_the_compiled_loops_with_the_same_functions():
    loops = native.scan_loops_for(torch.zeros(1))
    assert loops is native.compiled() and loops is not scan_loops
    for name in LOOP_FUNCTIONS:
        assert callable(getattr(loops, name)) and callable(getattr(scan_loops, name))


def test_other_devices_get_the_python_loops():
    assert native.scan_loops_for(torch.zeros(1, device="meta")) is scan_loops


def test_rnnlm_native_0_turns_the_compiled_loops_off(monkeypatch):
    monkeypatch.setenv("RNNLM_NATIVE", "0")
    assert native.scan_loops_for(torch.zeros(1)) is scan_loops


def test_a_failed_build_warns_once_and_falls_back(monkeypatch, fresh_build_cache):
    from torch.utils import cpp_extension

    def no_compiler(**kwargs):
        raise RuntimeError("Error building extension: g++ not found\nmore detail")

    monkeypatch.setattr(cpp_extension, "load_inline", no_compiler)
    with pytest.warns(UserWarning, match=r"C\+\+ scan loops unavailable, using the Python ones \(Error building extension: g\+\+ not found\)"):
        assert native.scan_loops_for(torch.zeros(1)) is scan_loops
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native.scan_loops_for(torch.zeros(1)) is scan_loops  # no second warning


def test_the_build_is_named_after_its_source_and_flags(monkeypatch, fresh_build_cache):
    from torch.utils import cpp_extension

    names = []
    monkeypatch.setattr(cpp_extension, "load_inline", lambda **kwargs: names.append(kwargs["name"]))
    native.compiled()
    native.compiled.cache_clear()
    monkeypatch.setattr(native.SOURCES[0].__class__, "read_text", lambda self, encoding=None: "// changed")
    native.compiled()
    assert len(names) == 2 and names[0] != names[1]
    assert all(name.startswith(f"rnnlm_scan_loops_{native._capability().lower()}_") for name in names)


def test_a_contiguity_violation_is_refused_by_the_compiled_loops():
    loops = native.compiled()
    products = torch.zeros(2, 3, 6).transpose(0, 1)  # not contiguous: writing in place would be lost
    with pytest.raises(RuntimeError, match="products must be contiguous"):
        loops.rnn_forward(products, torch.zeros(2, 6), torch.zeros(6, 6), torch.zeros(6), None)



def test_pip_ninja_is_found_when_no_ninja_is_on_path(monkeypatch):
    """A virtual environment's python run without activating it: its ninja is not on PATH."""
    import ninja

    monkeypatch.setattr(native.shutil, "which", lambda name: None)
    monkeypatch.setenv("PATH", "/nowhere")
    native._put_pip_ninja_on_path()
    assert os.environ["PATH"].split(os.pathsep)[0] == ninja.BIN_DIR
    assert (Path(ninja.BIN_DIR) / "ninja").exists()
