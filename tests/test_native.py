"""The backend switch (which loops run where) and the C++ build: its sources, its name, its failure."""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

import pytest
import torch

from rnnlm.compute import backend, build, cpu, gemm_table
from rnnlm.compute import sources as units
from rnnlm.errors import RnnlmError
from rnnlm.compute.sources import HEADERS
from rnnlm.models.cells import CELLS
from rnnlm.models.cells.base import loops_for
from tests.conftest import REPO_ROOT


@pytest.fixture
def fresh_build_cache():
    """Forget this process's loaded build before and after the test (the disk cache stays)."""
    build.compiled.cache_clear()
    backend._compiled.cache_clear()
    yield
    build.compiled.cache_clear()
    backend._compiled.cache_clear()


@pytest.mark.parametrize("name", CELLS)
def test_cpu_tensors_get_each_cells_compiled_loops_and_a_cell_without_them_its_python_loops(name):
    spec = CELLS[name]
    assert backend.backend_for(torch.device("cpu")) == "cpp"
    if spec.python_loops is None:  # a cell without loops of its own: autograd runs it, on every device
        assert not units.cell_unit(name).is_file() and spec.triton_loops is None
        assert loops_for(spec, torch.zeros(1)) is None and backend.compiled_for(torch.device("cpu"), name) is None
        return
    compiled = build.compiled()
    has_source = units.cell_unit(name).is_file()
    assert backend.has_compiled_loops(compiled, name) == has_source  # the build found its .cpp by itself
    if has_source:
        loops = loops_for(spec, torch.zeros(1))
        assert loops == tuple(getattr(compiled, f"{name}_{field}") for field in loops._fields)
    else:
        backend._missing.cache_clear()
        with pytest.warns(UserWarning, match=f"the cell '{name}' has no compiled loops .*; it runs its Python loops"):
            assert loops_for(spec, torch.zeros(1)) is spec.python_loops
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert loops_for(spec, torch.zeros(1)) is spec.python_loops  # said once
        assert backend.compiled_for(torch.device("cpu"), name) is None  # so sampling advances in Python too
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
    build.compiled()
    build.compiled.cache_clear()
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: f"// changed {self.name}")
    build.compiled()
    names = [call["name"] for call in calls]
    assert len(names) == 2 and names[0] != names[1]
    assert all(name.startswith(f"rnnlm_native_{build._capability().lower()}_") for name in names)


def test_every_registered_cell_is_a_source_of_the_one_unit_built_from_copies_at_a_fixed_place(monkeypatch,
                                                                                             fresh_build_cache, tmp_path):
    """The compiler gets one generated file that includes every unit (each cell's among them) in
    build order, beside copies of them all, so each copy of the repository (a DVC experiment's
    workspace) builds from the same staged paths."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: calls.append(kwargs))
    build.compiled()
    [one] = [Path(s) for s in calls[0]["sources"]]
    assert one.is_relative_to(tmp_path) and one.name == f"{calls[0]['name']}.cpp"
    included = re.findall(r'^#include "(.+)"$', one.read_text(), flags=re.MULTILINE)
    assert included == [path.name for path in units.units()]
    assert set(included) >= {f"{name}.cpp" for name in ("gru", "lstm", "rnn")}
    for unit in units.units():
        assert (one.parent / unit.name).read_text() == unit.read_text()
    assert (one.parent / "kernels.h").read_text() == HEADERS[0].read_text()


def test_the_units_apart_build_compiles_each_unit_under_a_name_of_its_own(monkeypatch, fresh_build_cache, tmp_path):
    """`build(one_unit=False)`, what benchmarks/build_time.py sets against the one unit: every unit
    handed to the compiler as it is, under the build's name with `_apart`, never the one unit's."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: calls.append(kwargs))
    build.build(one_unit=False)
    build.build(one_unit=True)
    apart, one = calls
    assert apart["name"] == one["name"] + "_apart"
    assert [Path(s).name for s in apart["sources"]] == [path.name for path in units.units()]
    assert [Path(s).name for s in one["sources"]] == [f"{one['name']}.cpp"]


def test_an_unknown_cell_is_refused_by_the_compiled_advancer():
    compiled = build.compiled()
    known = ", ".join(sorted(name for name in CELLS if backend.has_compiled_loops(compiled, name)))
    with pytest.raises(RuntimeError, match=f"unknown cell bogus; the compiled cells are {known}"):
        compiled.Advancer("bogus", torch.zeros(3, 3), [], [], [[]], None, None, 0.0, torch.zeros(1, 3), torch.zeros(3))


def test_a_contiguity_violation_is_refused_by_the_compiled_loops():
    loops = build.compiled()
    products = torch.zeros(2, 3, 6).transpose(0, 1)  # not contiguous: writing in place would be lost
    with pytest.raises(RuntimeError, match="products must be contiguous"):
        loops.rnn_forward(products, torch.zeros(2, 6), torch.zeros(6, 6), torch.zeros(6), None)


def test_pip_ninja_is_found_when_no_ninja_is_on_path(monkeypatch):
    """A virtual environment's python run without activating it: its ninja is not on PATH."""
    import ninja

    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.setenv("PATH", "/nowhere")
    build._put_pip_ninja_on_path()
    if ninja.BIN_DIR and (Path(ninja.BIN_DIR) / "ninja").exists():
        assert os.environ["PATH"].split(os.pathsep)[0] == ninja.BIN_DIR
    else:  # a venv over system packages: the package finds no folder of its own
        assert os.environ["PATH"] == "/nowhere"


# ---------------------------------------------------------------------------------------------
# The float32 GEMM: the rule, and that the compiled loops follow it

SPEED_REPORTS = sorted(p for p in (REPO_ROOT / "reports/speed").glob("*.json") if "matmul_gflops" in p.read_text())
"""The committed speed reports (benchmarks/speed.py --json), each one machine's GEMM rates (not the
stage-time tables beside them)."""


@pytest.mark.parametrize("path", SPEED_REPORTS, ids=lambda path: path.stem)
def test_the_choice_takes_the_faster_library_where_a_report_measured_them(path):
    """On every machine a committed report describes, the choice made there today (its CPU model's
    row of the GEMM table, else the vendor rule) takes for the large products the library that ran
    the 4096^2 product faster there, keeps the large and narrow libraries its runs used, and where
    the report timed our step under every choice, it is within the machine's noise (10%) of the
    fastest."""
    report = json.loads(path.read_text())
    machine = report["machine"]
    avx512 = machine.get("avx512", "avx512" in path.stem)  # the oldest report records it in its name only
    strict = backend.cbwr_is_strict(machine.get("mkl_cbwr", ""))  # older reports ran before strict mode
    family, model = (machine["cpu_generation"].split()[1::2][:2] if machine.get("cpu_generation") else ("", ""))
    row = gemm_table.row_for(f"{machine['cpu_vendor']} family {family} model {model}" if family else "")
    choice = backend.choose_gemm(machine["cpu_vendor"], avx512, "", True, True, strict, row)
    assert choice.without_one_row() == backend.Gemms.parse(machine["gemm"]).without_one_row()  # what its runs used
    rates = {name.lower(): rate for name, rate in report["matmul_gflops"].items()}
    assert choice.large == max(rates, key=rates.get)
    for record in report.get("gemm_choices", []):
        times = record["ms_per_step"]
        assert min(times.values()) / times[str(choice.without_one_row())] > 0.9, record


def test_the_rule_keeps_mkl_on_intel_and_obeys_the_environment_and_the_build():
    Gemms = backend.Gemms
    assert backend.choose_gemm("GenuineIntel", True, "", True, True, False) == Gemms("mkl", "mkl", "mkl")
    # strict MKL: one row through oneDNN (MKL's is slow there), the rest unchanged
    assert backend.choose_gemm("GenuineIntel", False, "", True, True, True) == Gemms("mkl", "mkl", "onednn")
    assert backend.choose_gemm("HygonGenuine", True, "", True, True, True) == Gemms("onednn", "onednn", "onednn")
    assert backend.choose_gemm("", False, "", True, True) == Gemms("mkl", "onednn", "onednn")  # vendor unknown: not Intel
    assert backend.choose_gemm("GenuineIntel", True, "onednn", True, True, True) == Gemms("onednn", "onednn", "onednn")
    assert backend.choose_gemm("AuthenticAMD", True, "mkl", True, True) == Gemms("mkl", "mkl", "mkl")
    assert backend.choose_gemm("GenuineIntel", True, "onednn:mkl", True, True, True) == Gemms("onednn", "mkl", "mkl")
    assert backend.choose_gemm("AuthenticAMD", True, "mkl:onednn:mkl", True, True) == Gemms("mkl", "onednn", "mkl")
    assert backend.choose_gemm("AuthenticAMD", True, "", True, False) == Gemms("mkl", "mkl", "mkl")  # no oneDNN in this build
    assert backend.choose_gemm("GenuineIntel", True, "", True, False, True) == Gemms("mkl", "mkl", "mkl")
    assert backend.choose_gemm("AuthenticAMD", False, "", False, True) == Gemms("onednn", "onednn", "onednn")  # no MKL
    assert backend.choose_gemm("GenuineIntel", True, "", False, False) == Gemms("mkl", "mkl", "mkl")  # ATen's own GEMM
    for wrong in ("blis", "mkl:onednn:mkl:mkl", "mkl:", ":onednn", "mkl::onednn"):
        with pytest.raises(RnnlmError, match=f"RNNLM_GEMM={wrong}: expected mkl, onednn, or two or three of them as "
                                             r"LARGE:NARROW\[:ONE_ROW\]"):
            backend.choose_gemm("AuthenticAMD", True, wrong, True, True)


def test_mkl_strict_mode_is_read_from_its_variable():
    assert backend.cbwr_is_strict("AUTO,STRICT") and backend.cbwr_is_strict("avx512,strict") and backend.cbwr_is_strict("STRICT")
    assert not backend.cbwr_is_strict("") and not backend.cbwr_is_strict("AUTO") and not backend.cbwr_is_strict("COMPATIBLE")


def test_a_gemm_choice_is_named_as_the_environment_variable_takes_it():
    Gemms = backend.Gemms
    assert str(Gemms("mkl", "mkl", "mkl")) == "mkl" and str(Gemms("mkl", "onednn", "onednn")) == "mkl:onednn"
    assert str(Gemms("mkl", "mkl", "onednn")) == "mkl:mkl:onednn" and str(Gemms("onednn", "mkl", "onednn")) == "onednn:mkl:onednn"
    for text in ("mkl", "onednn", "mkl:onednn", "onednn:mkl", "mkl:mkl:onednn", "onednn:onednn:mkl"):
        assert str(Gemms.parse(text)) == text  # read back as written


def test_a_product_of_one_row_follows_the_one_row_library_from_the_threshold():
    gemms, threshold = backend.Gemms("mkl", "mkl", "onednn"), backend.MIN_ONEDNN_MACS
    assert gemms.library(None, 10**9) == "mkl"  # a large product
    assert gemms.library(1, threshold) == "onednn" and gemms.library(1, threshold - 1) == "mkl"
    assert gemms.library(2, 10**9) == "mkl"  # two rows: narrow
    assert gemms.without_one_row() == ("mkl", "mkl", "mkl")  # what a training step meets


def test_the_environment_variable_reaches_the_switch(monkeypatch):
    monkeypatch.setenv("RNNLM_GEMM", "mkl")
    assert backend.machine_gemm() == ("mkl", "mkl", "mkl")
    monkeypatch.setenv("RNNLM_GEMM", "onednn")
    assert backend.machine_gemm() == ("onednn", "onednn", "onednn")
    monkeypatch.setenv("RNNLM_GEMM", "mkl:onednn")
    assert backend.machine_gemm() == ("mkl", "onednn", "onednn")
    monkeypatch.setenv("RNNLM_GEMM", "mkl:mkl:onednn")
    assert backend.machine_gemm() == ("mkl", "mkl", "onednn")
    assert backend.gemm_for(torch.device("meta")) is None


def test_use_gemm_is_the_one_switch_for_python_and_the_compiled_code(gemm):
    compiled = backend.compiled_for(torch.device("cpu"))  # told the machine's choice when loaded
    machine = backend.gemm_for(torch.device("cpu"))
    assert (compiled.gemm(), compiled.one_row_gemm()) == machine[1:]
    assert compiled.min_onednn_macs() == backend.MIN_ONEDNN_MACS
    flip = {"mkl": "onednn", "onednn": "mkl"}
    other = backend.Gemms("onednn", flip[machine.narrow], flip[machine.one_row])
    assert backend.use_gemm(other) is None  # it replaced the machine's own choice
    assert backend.gemm_for(torch.device("cpu")) == other and (compiled.gemm(), compiled.one_row_gemm()) == other[1:]
    assert backend.use_gemm(None) == other
    assert backend.gemm_for(torch.device("cpu")) == machine and (compiled.gemm(), compiled.one_row_gemm()) == machine[1:]


def test_small_per_step_products_run_on_the_calling_thread_and_give_the_pool_back():
    """The thread rule (backend.MIN_PARALLEL_NARROW_MACS) reaches the compiled code with the GEMM choice;
    a per-step product under it runs with a team of one and puts the thread count back, one over it
    keeps the pool; either way the product is the float64 product's to float32 rounding."""
    compiled = backend.compiled_for(torch.device("cpu"))  # told the rule when loaded
    threshold = backend.MIN_PARALLEL_NARROW_MACS
    assert compiled.min_parallel_macs() == threshold
    assert compiled.on_calling_thread(threshold - 1) and not compiled.on_calling_thread(threshold)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the tests' workers compute on one thread: give the pool a second
    try:
        torch.manual_seed(0)
        for batch, hidden in ((1, 64), (16, 256)):  # 12,288 and 3,145,728 multiply-adds: under and over
            weight, x = torch.randn(3 * hidden, hidden), torch.randn(batch, hidden)
            assert compiled.on_calling_thread(batch * 3 * hidden * hidden) == (batch == 1)
            got = compiled.NarrowProduct(weight, batch, 8)(x)
            assert torch.get_num_threads() == 2  # the team's size given back after the product
            torch.testing.assert_close(got.double(), x.double() @ weight.double().T, rtol=1e-5, atol=1e-5)
            compiled.NarrowProduct(weight, batch, 1)(x)  # unpacked (a one-step sequence): the same rule
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_cpu_features_are_read_from_the_machine():
    flags = cpu.cpu_flags()
    if not flags:
        pytest.skip("/proc/cpuinfo has no flags here")
    assert cpu.has_avx512() == cpu.AVX512.issubset(flags)
    if torch.backends.cpu.get_cpu_capability() == "AVX512":  # PyTorch saw AVX-512 too
        assert cpu.has_avx512()


@pytest.mark.parametrize("gemms", [("mkl", "mkl", "mkl"), ("onednn", "onednn", "onednn"), ("mkl", "onednn", "onednn"),
                                   ("mkl", "mkl", "onednn")])
def test_each_kind_of_product_follows_its_library(gemms, gemm):
    """The switch reaches every product: a float32 scan's per-step products and the sampling advance
    (C++), and the large products with their gradients (Python) call the chosen library's op for
    their kind (as the profiler sees them), and give the numbers of the float64 reference."""
    from torch.profiler import ProfilerActivity, profile

    from rnnlm.models.cells import gru
    from rnnlm.compute.products import linear, t_mm

    choice = gemm(backend.Gemms(*gemms))
    torch.manual_seed(0)
    products, h0 = torch.randn(16, 8, 3 * 64), torch.randn(8, 64)
    weight_hh, bias = torch.randn(3 * 64, 64) * 0.2, torch.randn(3 * 64)
    loops = loops_for(CELLS["gru"], products)
    assert build.compiled().gemm() == choice.narrow  # the one call handed the choice and the threshold over
    assert build.compiled().min_onednn_macs() == backend.MIN_ONEDNN_MACS
    ops = {"mkl": {"mkl::_mkl_linear", "aten::mm", "aten::addmm"}, "onednn": {"mkldnn::_linear_pointwise"}}

    def used(fn) -> set[str]:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        names = {event.name for event in prof.events()}
        return {library for library, library_ops in ops.items() if names & library_ops}

    assert used(lambda: loops.forward(products.clone(), h0, weight_hh, bias, None)) == {choice.narrow}
    # a sampling advance with products of at least 2^19 multiply-adds (smaller ones stay on ATen's GEMM)
    gates_x, h, step_hh = torch.randn(64, 3 * 128), torch.randn(64, 128), torch.randn(3 * 128, 128)
    assert used(lambda: loops.advance(gates_x, h, step_hh[: 2 * 128].T, step_hh[2 * 128 :].T)) == {choice.narrow}
    # one row (the stateful pass, sampling one stream): 768 x 1536 and 768 x 768 multiply-adds, both at least
    # 2^19, follow the one-row library, in a scan, in the advance and in the Python advancer alike
    wide_hh, one_h = torch.randn(3 * 768, 768) * 0.05, torch.randn(1, 768)
    assert used(lambda: loops.forward(torch.randn(4, 1, 3 * 768), one_h, wide_hh, torch.randn(3 * 768), None)) == {choice.one_row}
    assert used(lambda: loops.advance(torch.randn(1, 3 * 768), one_h, wide_hh[: 2 * 768].T, wide_hh[2 * 768 :].T)) == {choice.one_row}
    assert used(lambda: linear(one_h, wide_hh, torch.randn(3 * 768), narrow=True)) == {choice.one_row}
    assert used(lambda: loops.forward(products[:, :1].clone(), h0[:1], weight_hh, bias, None)) == {choice.narrow}  # under 2^19
    x, w = torch.randn(1024, 64), torch.randn(512, 64)
    assert used(lambda: linear(x, w)) == {choice.large}
    assert used(lambda: t_mm(x, torch.randn(1024, 512))) <= {choice.large}  # oneDNN's matmul is no op: unseen
    gates = products.clone()
    hs, _ = loops.forward(gates, h0, weight_hh, bias, None)
    gates64 = products.double()
    reference, _ = gru.forward(gates64, h0.double(), weight_hh.double(), bias.double(), None)
    torch.testing.assert_close(hs.double(), reference, rtol=1e-4, atol=1e-5)
    # the backward's per-step products too, and its gradients (written over the gates)
    grad_hs, grad_h0 = torch.randn(16, 8, 64), []
    assert used(lambda: grad_h0.append(loops.backward(grad_hs, h0, weight_hh, gates, hs, None))) == {choice.narrow}
    reference = gru.backward(grad_hs.double(), h0.double(), weight_hh.double(), gates64, reference, None)
    torch.testing.assert_close(grad_h0[0].double(), reference, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gates.double(), gates64, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("matmul", [True, False], ids=["onednn-matmul", "onednn-linear"])
def test_weight_gradients_through_onednn_equal_float64(matmul, monkeypatch, gemm):
    """a^T b and c + a^T b through oneDNN, on both of its routes: its matmul (a CPU with AVX-512) and
    its linear op with a copied operand (the route where PyTorch refuses float32 to the matmul)."""
    from rnnlm.compute.products import t_addmm, t_mm

    if matmul and not backend.onednn_matmul_available():
        pytest.skip("PyTorch's oneDNN matmul takes no float32 on this CPU (no AVX-512)")
    gemm("onednn")
    monkeypatch.setattr(backend, "onednn_matmul_available", lambda: matmul)
    torch.manual_seed(0)
    a, b, c = torch.randn(2048, 96), torch.randn(2048, 80), torch.randn(96, 80)
    a_t = torch.randn(2048, 3 * 96)[:, 96 : 2 * 96]  # a slice of the gates: rows wider than itself
    expected = a.double().T @ b.double()
    torch.testing.assert_close(t_mm(a, b).double(), expected, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(t_addmm(c.clone(), a, b).double(), expected + c.double(), rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(t_mm(a_t, b).double(), a_t.double().T @ b.double(), rtol=1e-5, atol=1e-3)


def test_an_unknown_gemm_is_refused_by_the_compiled_module_which_keeps_its_choice():
    compiled = build.compiled()
    before = (compiled.gemm(), compiled.one_row_gemm())
    for narrow, one_row in (("blis", "mkl"), ("onednn", "blis")):
        with pytest.raises(RuntimeError, match="unknown GEMM blis; expected mkl or onednn"):
            compiled.set_gemm(narrow, one_row, backend.MIN_ONEDNN_MACS, backend.MIN_PARALLEL_NARROW_MACS)
        assert (compiled.gemm(), compiled.one_row_gemm()) == before


def test_the_units_are_computes_own_files_and_each_cells_registers_that_cell():
    """What the build compiles is the C++ folder of compute, in a fixed order: the shared kernels, the
    cells' loops in name order, generation, the bindings. Nothing hands it sources: importing the
    cells' package changes no unit. Each cell's unit `NAME.cpp` registers the loops of the cell NAME."""
    assert [path.name for path in units.units()] == ["kernels.cpp", "gru.cpp", "lstm.cpp", "rnn.cpp", "generation.cpp",
                                                     "bindings.cpp"]
    assert all(path.parent == units.CPP for path in units.units())
    for path in units.cell_units():
        assert f'const RegisterCell registered("{path.stem}", ' in path.read_text(encoding="utf-8"), path.name
    compiled = build.compiled()
    assert [name for name in CELLS if backend.has_compiled_loops(compiled, name)] == [p.stem for p in units.cell_units()]


def test_a_lock_left_by_a_killed_build_is_removed_and_a_live_one_is_waited_for(tmp_path):
    """PyTorch waits on its build lock for ever; a build killed half-way left one behind once and
    every later process hung without a word. A lock in a folder still for longer than the limit goes
    (with a warning naming it); a lock whose build is alive is waited for, said once."""
    import threading
    import time

    dead = tmp_path / "dead"
    dead.mkdir()
    (dead / "gru.o").write_bytes(b"")
    (dead / "lock").write_bytes(b"")
    old = time.time() - 2 * build.STALE_LOCK_SECONDS
    for path in dead.iterdir():
        os.utime(path, (old, old))
    with pytest.warns(UserWarning, match=f"removed {dead / 'lock'}, left by a C\\+\\+ build that stopped"):
        build._wait_for_other_build(dead)
    assert not (dead / "lock").exists() and (dead / "gru.o").exists()

    alive = tmp_path / "alive"
    alive.mkdir()
    (alive / "lock").write_bytes(b"")
    threading.Timer(0.3, (alive / "lock").unlink).start()  # the other build ends
    start = time.monotonic()
    with pytest.warns(UserWarning, match="waiting for another process's C\\+\\+ build") as said:
        build._wait_for_other_build(alive, poll=0.05)
    assert 0.25 < time.monotonic() - start < 5 and len(said) == 1

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build._wait_for_other_build(tmp_path / "dead")  # no lock: returns at once, says nothing


def test_the_build_goes_to_a_folder_of_its_own_beside_its_staged_sources(monkeypatch, fresh_build_cache, tmp_path):
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: calls.append(kwargs))
    build.compiled()
    folder = Path(calls[0]["build_directory"])
    assert folder == tmp_path / calls[0]["name"] and folder.is_dir()
    assert Path(calls[0]["sources"][0]).parent == tmp_path / f"{calls[0]['name']}_sources"
