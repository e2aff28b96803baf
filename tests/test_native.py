"""The backend switch (which loops run where) and the C++ build: its sources, its name, its failure."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

from rnnlm import backend, native
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
