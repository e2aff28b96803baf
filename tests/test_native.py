"""The backend switch (which loops run where) and the C++ build: its sources, its name, its failure."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

from rnnlm import backend, native
from rnnlm.errors import RnnlmError
from rnnlm.models.cells import CELLS
from rnnlm.models.cells.base import loops_for


@pytest.fixture
def fresh_build_cache():
    """Forget this process's loaded build before and after the test (the disk cache stays)."""
    native.compiled.cache_clear()
    yield
    native.compiled.cache_clear()


@pytest.mark.parametrize("name", CELLS)
def test_cpu_tensors_get_every_registered_cells_compiled_loops(name):
    spec = CELLS[name]
    assert backend.backend_for(torch.device("cpu")) == "cpp"
    loops = loops_for(spec, torch.zeros(1))
    compiled = native.compiled()
    assert loops == tuple(getattr(compiled, f"{name}_{field}") for field in loops._fields)
    assert all(callable(f) for f in spec.python_loops)


def test_other_devices_get_the_python_loops():
    assert backend.backend_for(torch.device("meta")) == "python"
    assert loops_for(CELLS["gru"], torch.zeros(1, device="meta")) is CELLS["gru"].python_loops
    assert backend.compiled_for(torch.device("meta")) is None


def test_rnnlm_native_0_turns_the_compiled_loops_off(monkeypatch):
    monkeypatch.setenv("RNNLM_NATIVE", "0")
    assert backend.backend_for(torch.device("cpu")) == "python"
    assert backend.compiled_for(torch.device("cpu")) is None


def test_a_failed_build_warns_once_and_falls_back(monkeypatch, fresh_build_cache):
    from torch.utils import cpp_extension

    def no_compiler(**kwargs):
        raise RuntimeError("Error building extension: g++ not found\nmore detail")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    with pytest.warns(UserWarning, match=r"C\+\+ scan loops unavailable, using the Python ones \(Error building extension: g\+\+ not found\)"):
        assert backend.backend_for(torch.device("cpu")) == "python"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backend.backend_for(torch.device("cpu")) == "python"  # no second warning


def test_the_build_is_named_after_its_sources_and_flags(monkeypatch, fresh_build_cache, tmp_path):
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: calls.append(kwargs))
    native.compiled()
    native.compiled.cache_clear()
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: f"// changed {self.name}")
    native.compiled()
    names = [call["name"] for call in calls]
    assert len(names) == 2 and names[0] != names[1]
    assert all(name.startswith(f"rnnlm_native_{native._capability().lower()}_") for name in names)


def test_every_registered_cell_is_a_source_and_the_build_reads_copies_at_a_fixed_place(monkeypatch, fresh_build_cache,
                                                                                      tmp_path):
    """Each source is its own translation unit (ninja compiles each alone, so one that does not
    compile alone fails the build), and each copy of the repository (a DVC experiment's workspace)
    builds from the same staged paths."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: calls.append(kwargs))
    native.compiled()
    sources = [Path(s) for s in calls[0]["sources"]]
    assert {path.name for path in sources} >= {spec.cpp_source.name for spec in CELLS.values()}
    assert all(path.is_relative_to(tmp_path) and path.exists() for path in sources)
    staged_header = sources[0].parent / "kernels.h"
    assert staged_header.read_text() == (native.PACKAGE / "models" / "cells" / "kernels.h").read_text()


def test_an_unknown_cell_is_refused_by_the_compiled_stepper():
    compiled = native.compiled()
    with pytest.raises(RuntimeError, match="unknown cell bogus; the compiled cells are gru, lstm, rnn"):
        compiled.Stepper("bogus", torch.zeros(3, 3), [], [], [[]], None, None, 0.0, torch.zeros(1, 3), torch.zeros(3))


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


# ---------------------------------------------------------------------------------------------
# The float32 GEMM: the rule, and that the compiled loops follow it

RECORDED_RATES = {
    # vendor: GFLOP/s of one 4096^2 float32 product through each library, measured side by side by
    # benchmarks/speed.py (2 cores each). AMD EPYC (family 26, AVX-512), 2026-11-23: see reports/speed/.
    "AuthenticAMD": {"mkl": 177.0, "onednn": 396.0},
}


@pytest.mark.parametrize("vendor", RECORDED_RATES)
def test_the_rule_picks_the_faster_library_where_rates_were_recorded(vendor):
    rates = RECORDED_RATES[vendor]
    assert backend.choose_gemm(vendor, "", True, True) == max(rates, key=rates.get)


def test_the_rule_keeps_mkl_on_intel_and_obeys_the_environment_and_the_build():
    assert backend.choose_gemm("GenuineIntel", "", True, True) == "mkl"  # today's path there: nothing changes
    assert backend.choose_gemm("HygonGenuine", "", True, True) == "onednn"
    assert backend.choose_gemm("", "", True, True) == "onednn"  # vendor unknown: not Intel
    assert backend.choose_gemm("GenuineIntel", "onednn", True, True) == "onednn"
    assert backend.choose_gemm("AuthenticAMD", "mkl", True, True) == "mkl"
    assert backend.choose_gemm("AuthenticAMD", "", True, False) == "mkl"  # no oneDNN in this build
    assert backend.choose_gemm("GenuineIntel", "", False, True) == "onednn"  # no MKL in this build
    with pytest.raises(RnnlmError, match="RNNLM_GEMM=blis: expected one of mkl, onednn"):
        backend.choose_gemm("AuthenticAMD", "blis", True, True)


def test_the_environment_variable_reaches_the_switch(monkeypatch):
    monkeypatch.setenv("RNNLM_GEMM", "mkl")
    assert backend.gemm_for(torch.device("cpu")) == "mkl"
    monkeypatch.setenv("RNNLM_GEMM", "onednn")
    assert backend.gemm_for(torch.device("cpu")) == "onednn"
    assert backend.gemm_for(torch.device("meta")) is None


@pytest.mark.parametrize("gemm", ["mkl", "onednn"])
def test_the_compiled_loops_follow_the_chosen_gemm(gemm, monkeypatch):
    """The switch reaches the C++ products: a float32 scan and a sampling step call the chosen
    library's op (as the profiler sees them), and give the numbers of the float64 reference."""
    from torch.profiler import ProfilerActivity, profile

    from rnnlm.models.cells import gru

    monkeypatch.setattr(backend, "gemm_for", lambda device: gemm)
    torch.manual_seed(0)
    products, h0 = torch.randn(16, 8, 3 * 64), torch.randn(8, 64)
    weight_hh, bias = torch.randn(3 * 64, 64) * 0.2, torch.randn(3 * 64)
    loops = loops_for(CELLS["gru"], products)
    assert native.compiled().gemm() == gemm
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        hs, _ = loops.forward(products.clone(), h0, weight_hh, bias, None)
        loops.step(products[0], h0, weight_hh[: 2 * 64].T, weight_hh[2 * 64 :].T)
    names = {event.name for event in prof.events()}
    used = {"mkl": "mkl::_mkl_linear", "onednn": "mkldnn::_linear_pointwise"}
    assert used[gemm] in names and all(op not in names for name, op in used.items() if name != gemm)
    reference, _ = gru.forward(products.double(), h0.double(), weight_hh.double(), bias.double(), None)
    torch.testing.assert_close(hs.double(), reference, rtol=1e-4, atol=1e-5)


def test_an_unknown_gemm_is_refused_by_the_compiled_module():
    with pytest.raises(RuntimeError, match="unknown GEMM blis; expected mkl or onednn"):
        native.compiled().set_gemm("blis")
