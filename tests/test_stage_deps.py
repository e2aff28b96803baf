"""Stage dependencies that cannot drift: every library file a stage can run (its imports followed
through the library, and the C++ sources the compiled module is built from) is covered by one of
the stage's DVC deps, a file or a folder, or, for the cells' folder, by the `cell` stage's
fingerprint of the selected cell (`models/cell.json`); and every dep exists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tools.import_graph import compiled_files, import_cycles, library_files, module_file, module_graph, package_cycles
from tools.stage_deps import (CELL_UNITS_DIR, CELLS_DIR, DVC_YAML, FINGERPRINT, READ_NOT_RUN, cell_files, fingerprinted, library_cells,
                              rewritten, runs, script_of)

STAGES = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]


def _covered(path: Path, deps: list[str]) -> bool:
    relative = path.relative_to(REPO_ROOT)
    if FINGERPRINT in deps and path in fingerprinted():
        return True
    return any(relative == Path(dep) or Path(dep) in relative.parents for dep in deps)


def test_dvc_yaml_lists_what_the_stage_deps_tool_writes():
    """The deps are generated (`python -m tools.stage_deps`), not kept by hand: dvc.yaml is what the
    tool writes from the import graph, and the tool says which stages are not."""
    assert rewritten(DVC_YAML.read_text(encoding="utf-8")) == DVC_YAML.read_text(encoding="utf-8")
    stale = DVC_YAML.read_text(encoding="utf-8").replace("      - src/rnnlm/compute\n", "", 1)
    assert rewritten(stale) == DVC_YAML.read_text(encoding="utf-8")  # a dropped dep comes back


@pytest.mark.parametrize("name", STAGES)
def test_every_library_file_a_stage_runs_is_a_dependency(name):
    stage = STAGES[name]
    deps = stage["deps"]
    files = runs(stage, name)
    assert files, "the stage imports no library code: the import graph is broken"
    missing = sorted(str(path.relative_to(REPO_ROOT)) for path in files if not _covered(path, deps))
    assert not missing, f"{name}: add to its deps in dvc.yaml: {missing}"
    assert str(script_of(stage).relative_to(REPO_ROOT)) in deps


def _unused(stage: dict, name: str = "") -> list[str]:
    """The library files a stage's deps list (a folder: all its files) that the stage never runs."""
    files = runs(stage, name) | {script_of(stage)}
    listed = set()
    for dep in stage["deps"]:
        if dep in READ_NOT_RUN.get(name, []):
            continue
        path = REPO_ROOT / dep
        if dep.startswith(("src/", "stages/")):
            listed |= {f for f in path.rglob("*") if f.suffix in (".py", ".cpp", ".h")} if path.is_dir() else {path}
    return sorted(str(path.relative_to(REPO_ROOT)) for path in listed - files)


@pytest.mark.parametrize("name", STAGES)
def test_every_library_dependency_is_run_by_its_stage(name):
    """The other way round: a listed library file that the stage never runs would rerun the stage
    whenever it changes, for nothing."""
    unused = _unused(STAGES[name], name)
    assert not unused, f"{name}: its deps in dvc.yaml list files it never runs: {unused}"


def test_a_stage_that_lists_more_than_it_runs_fails_this_check():
    """The check can fail: the download stage with the study's package among its deps."""
    stage = {**STAGES["download"], "deps": [*STAGES["download"]["deps"], "src/rnnlm_study"]}
    assert "src/rnnlm_study/judging/report.py" in _unused(stage)


@pytest.mark.parametrize("name", STAGES)
def test_every_library_dependency_exists(name):
    library = [dep for dep in STAGES[name]["deps"] if dep.startswith(("src/", "stages/"))]
    assert all((REPO_ROOT / dep).exists() for dep in library), [dep for dep in library if not (REPO_ROOT / dep).exists()]


def test_a_cells_fingerprint_holds_every_file_its_models_run_from_the_cells_folder():
    """What `Registry.files` takes by its naming rule (NAME.py, NAME_triton.py, compute's cpp/NAME.cpp, the shared
    files) against what a model of the cell runs: its module's imports (its Triton module's among them), the
    compiled code (the compiled module holds every cell's loops; a model calls its own cell's,
    registered under its name, and compute's shared kernels). No file of the folder escapes every cell's
    fingerprint."""
    from rnnlm.models.cells import CELLS

    compiled = compiled_files()
    for cell in library_cells():
        module = module_file(CELLS.module(cell))
        ran = {path for path in library_files(module, specs=False) if path.suffix == ".py"} | {module}
        own_cpp = CELL_UNITS_DIR / f"{module.stem}.cpp"
        ran |= {path for path in compiled if path == own_cpp}  # the shared kernels are compute's
        expected = {path for path in ran if path.parent == CELLS_DIR or path == own_cpp} - {CELLS_DIR / "__init__.py"}
        assert expected <= cell_files(cell), cell
    assert {path for path in CELLS_DIR.iterdir() if path.is_file()} <= fingerprinted()
    cell_units = {path for path in compiled if path.parent == CELL_UNITS_DIR and path.stem in library_cells()}
    assert len(cell_units) == 3 and cell_units <= fingerprinted()  # gru, lstm, rnn: each in its cell's


def test_the_cell_stage_imports_no_cell_and_no_pytorch(tmp_path):
    """What lets its import graph stop at the registry's names (`specs=False` above); and it writes
    the selected cell's files alone."""
    from rnnlm.data.corpus import Split, character_vocabulary, write_prepared

    out, prepared = tmp_path / "cell.json", tmp_path / "prepared"
    text = "to be or not to be, that is the question. " * 40  # the checks read the validation text's length
    write_prepared(Split(text[:1200], text[1200:]), character_vocabulary(text), prepared)
    code = ("import runpy, sys\n"
            f"sys.argv = ['cell', {str(out)!r}, {str(prepared)!r}, {str(tmp_path / 'no-tokenizer')!r}]\n"
            "try:\n"
            f"    runpy.run_path({str(REPO_ROOT / 'stages/cell.py')!r}, run_name='__main__')\n"
            "except SystemExit as end:\n"
            "    assert not end.code, end.code\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('rnnlm.models.cells.')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "['rnnlm.models.cells.registry']", done.stdout
    record = json.loads(out.read_text())
    assert record["cell"] == "gru" and "rnnlm/models/cells/gru.py" in record["files"]
    assert not [f for f in record["files"] if "lstm" in f or "mgu" in f or f.endswith("__init__.py")]


def test_a_stage_that_runs_more_than_its_deps_fails_this_check():
    """The check can fail: the train stage's deps without the cell's fingerprint miss the cell files."""
    deps = [dep for dep in STAGES["train"]["deps"] if dep != FINGERPRINT]
    files = library_files(script_of(STAGES["train"]))
    assert any(not _covered(path, deps) and path.suffix == ".cpp" for path in files)


def test_the_library_has_no_import_cycle():
    """Imports inside functions count (they only hide a cycle), and `if TYPE_CHECKING:` ones too (a
    circle drawn through type hints is still one to untangle)."""
    assert import_cycles() == []


def test_the_compute_package_imports_nothing_above_it():
    """compute is the lowest floor: the cells, models, training and inference import it, and it
    imports none of them (only the shared errors), type-only imports included."""
    graph = module_graph()
    upward = {(module, child) for module, children in graph.items() if module.startswith("rnnlm.compute")
              for child in children if not child.startswith("rnnlm.compute") and child not in ("rnnlm", "rnnlm.errors")}
    assert sorted(upward) == []


def test_no_package_imports_one_that_imports_it_back():
    """The packages form layers (data, models, inference, evaluation, training, reporting, study):
    none reaches, through any chain of imports, back to one that imports it."""
    assert package_cycles() == []


def test_the_library_never_imports_the_study():
    """rnnlm_study sits beside the library: it imports rnnlm, and no module of rnnlm imports it, not
    even for type hints, so the pipeline reads and runs without the study. The check can fail: the
    study's own modules import the library."""
    graph = module_graph()
    library = {module for module in graph if module.split(".")[0] == "rnnlm"}
    study = set(graph) - library
    assert len(library) > 60 and len(study) > 25  # both packages are seen
    assert sorted((m, child) for m in library for child in graph[m] if child in study) == []
    assert any(child in library for m in study for child in graph[m])


def test_the_data_stages_run_no_model_code_and_no_pytorch():
    """download, prepare and tokenizer read and check their own sections of params.yaml alone
    (`rnnlm.params_base`): nothing under models/, no params.py, no PyTorch (seconds of each stage),
    so adding a cell or a model leaves their outputs and their DVC status as they are."""
    models = REPO_ROOT / "src/rnnlm/models"
    for name in ("download", "prepare", "tokenizer"):
        files = library_files(script_of(STAGES[name]))
        assert not [f for f in files if models in f.parents or f.name == "params.py"], name

    def imports_torch(stage: str) -> bool:
        code = (f"import runpy, sys; runpy.run_path({str(REPO_ROOT / 'stages' / stage)!r}, run_name='stage'); "
                f"print('torch' in sys.modules)")
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()[-1] == "True"

    assert not any(imports_torch(f"{name}.py") for name in ("download", "prepare", "tokenizer"))
    assert imports_torch("train.py")  # the check can fail

def test_the_suite_imports_the_library_of_its_own_checkout():
    """pytest's `pythonpath` puts this checkout's src/ first: with an editable install of another clone
    in the environment, the tests would otherwise test that clone's code."""
    import rnnlm

    assert Path(rnnlm.__file__).resolve().is_relative_to((REPO_ROOT / "src").resolve()), rnnlm.__file__


def test_the_study_plots_draw_every_model_with_a_study_folder():
    """dvc.yaml's study plots name each model folder of reports/study/ (its pinned seed's run), so a
    model added to the study is drawn, not silently left out."""
    import yaml

    plots = {name: spec for entry in yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["plots"]
             for name, spec in entry.items() if name.startswith("study_")}
    models = sorted(p.name for p in (REPO_ROOT / "reports/study").iterdir() if (p / "seed-1337").is_dir())
    for name, spec in plots.items():
        drawn = sorted(path.split("/")[2] for path in spec["y"])
        assert drawn == models, name


def test_the_committed_lock_is_the_lock_of_this_tree():
    """dvc.lock records what each stage last ran on: every dep and output git tracks (code, params,
    the metrics kept in git) must still be what the lock says, so that a fresh clone's `dvc status`
    reports only outputs not in its cache, and the committed metrics are those of the committed code.
    A change to a stage's code or params without `dvc repro` of the default model fails here."""
    done = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.split())
    stale = {}
    for stage, changes in json.loads(done.stdout or "{}").items():
        # each change is a mapping ({"changed deps": {path: how}, ...}) or a plain word ("always changed")
        changed = [item for change in changes if isinstance(change, dict)
                   for kind in ("changed deps", "changed outs") for item in change.get(kind, {}).items()]
        for path, how in changed:
            is_tracked = path in tracked or any(name.startswith(f"{path}/") for name in tracked)
            if is_tracked and how != "not in cache":
                stale.setdefault(stage, []).append(f"{path}: {how}")
    assert stale == {}, f"dvc.lock is stale (run `dvc repro` and commit dvc.lock): {stale}"


def test_a_stage_depends_on_the_data_files_its_modules_read():
    """The GEMM table is data, not an import, but it chooses every CPU product's library: a new row
    reruns the stages that compute."""
    table = REPO_ROOT / "src/rnnlm/compute/gemm_table.json"
    for name in ("cell", "train", "evaluate"):
        assert table in runs(STAGES[name], name) and _covered(table, STAGES[name]["deps"]), name
