"""The GEMM table: each CPU model's libraries, chosen from the figures its row records and read (never
timed) at run time; a CPU it does not list gets the vendor rule and one line saying how to add its row;
`benchmarks/gemm_table.py` times and writes a row."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from rnnlm.compute import backend, cpu, gemm_table
from rnnlm.errors import RnnlmError

from tests.conftest import REPO_ROOT

ZEN2, ZEN3, ZEN4 = "AuthenticAMD family 23 model 49", "AuthenticAMD family 25 model 1", "AuthenticAMD family 25 model 17"
XEONS = ("GenuineIntel family 6 model 167", "GenuineIntel family 6 model 207")


def _kind(library="onednn", mkl=2.0, onednn=1.0, unit="ms") -> dict:
    return {"library": library, "unit": unit, "figures": {"mkl": mkl, "onednn": onednn}, "timed": "a test's figures"}


def _entry(**kinds) -> dict:
    return {"name": "Test CPU", "measured": True, "source": "a test",
            **{kind: kinds.get(kind, _kind()) for kind in gemm_table.KINDS}}


@pytest.fixture
def cpu_kind(monkeypatch):
    """`cpu_kind("...")` makes this process's CPU model that one for the GEMM choice (the process's
    choice read afresh, and again after the test)."""

    def use(kind: str) -> None:
        monkeypatch.setattr(cpu, "cpu_kind", lambda: kind)
        backend._cpu_gemm.cache_clear()

    yield use
    backend._cpu_gemm.cache_clear()


def test_the_committed_table_lists_every_cpu_model_we_measured_and_follows_its_figures():
    rows = gemm_table.load_table()
    assert {ZEN2, ZEN3, ZEN4, *XEONS} <= set(rows)
    for row in rows.values():
        for kind, choice in row.kinds.items():
            assert choice.faster() in (None, choice.library), (row.cpu, kind)
            assert choice.figures or choice.timed.startswith("no figures"), (row.cpu, kind)
        if row.measured:  # timed here by benchmarks/gemm_table.py: figures for every kind
            assert all(choice.figures for choice in row.kinds.values()) and "benchmarks/gemm_table.py" in row.source
        else:  # taken from elsewhere: the row says from where
            assert row.source.startswith("taken from ")
    assert rows[ZEN4].measured  # the CPU this table was first measured on
    assert gemm_table.dumps(rows) == gemm_table.TABLE.read_text()  # as the benchmark writes it


def test_the_zen2_row_takes_onednn_for_the_large_products_from_the_figures_it_was_given():
    """The first CPU on which the vendor rule chose the slower library (issue #102's figures)."""
    zen2 = gemm_table.load_table()[ZEN2]
    assert zen2.kinds["large"].figures == {"mkl": 136.1, "onednn": 151.8} and zen2.kinds["large"].unit == "GFLOP/s"
    assert zen2.libraries == ("onednn", "onednn", "onednn")
    assert backend.choose_gemm("AuthenticAMD", False, "", True, True, False, None).large == "mkl"  # the rule's


@pytest.mark.parametrize("entry, message", [
    (_entry(large=_kind("mkl")), r"row 'X', large: library 'mkl', but its figures .* favour 'onednn'; expected the faster"),
    (_entry(narrow=_kind("onednn", 200.0, 100.0, "GFLOP/s")), r"row 'X', narrow: library 'onednn', but .* favour 'mkl'"),
    (_entry(one_row=_kind("blis")), r"row 'X', one_row: library 'blis'; expected one of mkl, onednn"),
    (_entry(large=_kind(unit="s")), r"row 'X', large: figures .* in 's'; expected one figure per library \(mkl, onednn\) in ms or GFLOP/s"),
    (_entry(large={"library": "mkl", "unit": "ms", "figures": {"mkl": 1.0}, "timed": "t"}), r"row 'X', large: figures .*; expected one figure per library"),
    (_entry(large={"library": "mkl", "unit": "ms", "figures": {}}), r"row 'X', large: expected the fields library, unit, figures and timed"),
    ({k: v for k, v in _entry().items() if k != "one_row"}, r"row 'X' has \[.*\]; expected the fields \[.*'one_row'"),
    ("not a row", r"row 'X' has str; expected the fields"),
])
def test_a_row_that_breaks_its_form_or_does_not_follow_its_figures_is_refused(entry, message):
    with pytest.raises(RnnlmError, match=f"^table.json: {message}"):
        gemm_table.parse_table(json.dumps({"X": entry}), "table.json")


def test_a_table_that_is_no_json_object_is_refused():
    with pytest.raises(RnnlmError, match=r"^table.json: not JSON .*; expected the GEMM table \(benchmarks/gemm_table.py --write"):
        gemm_table.parse_table("{", "table.json")
    with pytest.raises(RnnlmError, match=r"^table.json: expected an object of CPU models, found list"):
        gemm_table.parse_table("[]", "table.json")


def test_a_row_overrides_the_vendor_rule_and_rnnlm_gemm_overrides_the_row():
    row = gemm_table.parse_table(json.dumps({"X": _entry(one_row=_kind("mkl", 1.0, 2.0))}), "t")["X"]
    Gemms = backend.Gemms
    assert backend.choose_gemm("GenuineIntel", True, "", True, True, True, row) == Gemms("onednn", "onednn", "mkl")
    assert backend.choose_gemm("GenuineIntel", True, "mkl", True, True, True, row) == Gemms("mkl", "mkl", "mkl")
    assert backend.choose_gemm("GenuineIntel", True, "", True, False, True, row) == Gemms("mkl", "mkl", "mkl")  # no oneDNN here


def test_this_process_takes_its_cpu_models_row(cpu_kind, monkeypatch):
    monkeypatch.delenv(backend.GEMM_ENV, raising=False)
    cpu_kind(ZEN3)
    assert backend.cpu_gemm() == backend.machine_gemm() == ("mkl", "onednn", "onednn")
    cpu_kind(ZEN2)
    assert backend.cpu_gemm() == ("onednn", "onednn", "onednn")
    monkeypatch.setenv(backend.GEMM_ENV, "mkl")
    assert backend.machine_gemm() == ("mkl", "mkl", "mkl") and backend.cpu_gemm() == ("onednn", "onednn", "onednn")


@pytest.mark.parametrize("cpuinfo, expected", [
    ({"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "17", "stepping": "1"}, ZEN4),
    ({"vendor_id": "GenuineIntel", "cpu family": "6", "model": "207"}, "GenuineIntel family 6 model 207"),
    ({"vendor_id": "AuthenticAMD", "cpu family": "25"}, ""),  # no model readable: no row can be found
])
def test_a_cpu_model_is_its_vendor_family_and_model(monkeypatch, cpuinfo, expected):
    monkeypatch.setattr(cpu, "_cpuinfo", lambda field: cpuinfo.get(field, ""))
    assert cpu.cpu_kind() == expected


def test_an_unlisted_cpu_gets_the_vendor_rule_and_one_line_saying_how_to_add_its_row(cpu_kind, monkeypatch):
    monkeypatch.delenv(backend.GEMM_ENV, raising=False)
    cpu_kind("AuthenticAMD family 99 model 1")
    rule = backend.choose_gemm(cpu.cpu_vendor(), cpu.has_avx512(), "", torch.backends.mkl.is_available(),
                               backend.onednn_available(), backend.cbwr_is_strict(os.environ.get("MKL_CBWR", "")))
    assert backend.cpu_gemm() == rule
    note = backend.unlisted_cpu_note(torch.device("cpu"))
    assert note == (f"note: this CPU (AuthenticAMD family 99 model 1) has no row in the GEMM table "
                    f"(src/rnnlm/compute/gemm_table.json), so its products follow the vendor rule ({rule}); to choose "
                    "them by measurement, run `python -m benchmarks.gemm_table --write` on it and commit the row")
    assert backend.unlisted_cpu_note(torch.device("meta")) is None  # not the CPU: no GEMM of ours
    monkeypatch.setenv(backend.GEMM_ENV, "mkl")
    assert backend.unlisted_cpu_note(torch.device("cpu")) is None  # chosen by hand
    monkeypatch.delenv(backend.GEMM_ENV)
    cpu_kind(ZEN3)
    assert backend.unlisted_cpu_note(torch.device("cpu")) is None


def test_the_train_stage_logs_the_note_on_an_unlisted_cpu():
    """The one line reaches the train stage's log: the stage asks for it before training."""
    source = (REPO_ROOT / "stages/train.py").read_text()
    assert "if note := backend.unlisted_cpu_note(run.device):" in source and "print(note)" in source


def _gemm_table_module():
    from benchmarks import gemm_table as benchmark  # benchmarks/gemm_table.py

    return benchmark


def test_the_benchmark_writes_its_row_in_place_of_its_cpus_and_keeps_the_others(tmp_path):
    table = tmp_path / "gemm_table.json"
    table.write_text(gemm_table.TABLE.read_text())
    benchmark = _gemm_table_module()
    kinds = gemm_table.parse_table(json.dumps({"X": _entry()}), "t")["X"].kinds
    benchmark.write_row(gemm_table.Row(ZEN3, "a new Zen 3 row", True, "benchmarks/gemm_table.py, a test", kinds), table)
    benchmark.write_row(gemm_table.Row("Vendor family 1 model 2", "new", True, "benchmarks/gemm_table.py, a test", kinds), table)
    rows, committed = gemm_table.parse_table(table.read_text(), "t"), gemm_table.load_table()
    assert set(rows) == set(committed) | {"Vendor family 1 model 2"}
    assert rows[ZEN3].name == "a new Zen 3 row" and rows[ZEN3].libraries == ("onednn", "onednn", "onednn")
    assert all(rows[cpu_] == committed[cpu_] for cpu_ in committed if cpu_ != ZEN3)


def test_the_benchmark_chooses_each_kind_from_the_summed_training_steps():
    benchmark = _gemm_table_module()
    records = [{"model": "a", "ms_per_step": {"mkl": 10.0, "onednn": 9.0, "mkl:onednn": 8.0, "onednn:mkl": 12.0}},
               {"model": "b", "ms_per_step": {"mkl": 100.0, "onednn": 95.0, "mkl:onednn": 97.0, "onednn:mkl": 90.0}}]
    kinds = benchmark.large_and_narrow(records, ["a", "b"])  # sums: mkl 110, onednn 104, mkl:onednn 105, onednn:mkl 102
    assert (kinds["large"].library, kinds["narrow"].library) == ("onednn", "mkl")
    assert kinds["large"].figures == {"mkl": 110.0, "onednn": 102.0}  # narrow held at mkl
    assert kinds["narrow"].figures == {"mkl": 102.0, "onednn": 104.0}  # large held at onednn


def test_the_quick_benchmark_prints_a_row_and_never_writes_one(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    figures = tmp_path / "row.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.gemm_table", "--quick", "--models", "astra_alpha", "leviathan",
                           "--json", str(figures)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (kind, entry), = json.loads(figures.read_text())["row"].items()
    assert kind == cpu.cpu_kind() and entry["measured"] and set(gemm_table.KINDS) <= set(entry)
    assert "## The row" in done.stdout and "| large | **" in done.stdout
    refused = subprocess.run([sys.executable, "-m", "benchmarks.gemm_table", "--quick", "--write"], cwd=REPO_ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--write with --quick: the quick shapes' timings choose nothing" in refused.stderr


def test_docs_speed_names_every_row_of_the_table_with_its_libraries():
    lines = (REPO_ROOT / "docs/speed.md").read_text().splitlines()
    for row in gemm_table.load_table().values():
        (line,) = [line for line in lines if line.startswith(f"| {row.cpu} |")]
        assert line.split(" | ")[2:5] == list(row.libraries), line
