"""Stage dependencies that cannot drift: every library file a stage can run (its imports followed
through the library, and the C++ sources the compiled module is built from) is covered by one of
the stage's DVC deps, a file or a folder; and every dep exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.import_graph import import_cycles, library_files, package_cycles

STAGES = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]


def _script(stage: dict) -> Path:
    return REPO_ROOT / re.search(r"python (stages/\w+\.py)", stage["cmd"]).group(1)


def _covered(path: Path, deps: list[str]) -> bool:
    relative = path.relative_to(REPO_ROOT)
    return any(relative == Path(dep) or Path(dep) in relative.parents for dep in deps)


@pytest.mark.parametrize("name", STAGES)
def test_every_library_file_a_stage_runs_is_a_dependency(name):
    stage = STAGES[name]
    deps = stage["deps"]
    files = library_files(_script(stage))
    assert files, "the stage imports no library code: the import graph is broken"
    missing = sorted(str(path.relative_to(REPO_ROOT)) for path in files if not _covered(path, deps))
    assert not missing, f"{name}: add to its deps in dvc.yaml: {missing}"
    assert str(_script(stage).relative_to(REPO_ROOT)) in deps


def _unused(stage: dict) -> list[str]:
    """The library files a stage's deps list (a folder: all its files) that the stage never runs."""
    files = library_files(_script(stage)) | {_script(stage)}
    listed = set()
    for dep in stage["deps"]:
        path = REPO_ROOT / dep
        if dep.startswith(("src/", "stages/")):
            listed |= {f for f in path.rglob("*") if f.suffix in (".py", ".cpp", ".h")} if path.is_dir() else {path}
    return sorted(str(path.relative_to(REPO_ROOT)) for path in listed - files)


@pytest.mark.parametrize("name", STAGES)
def test_every_library_dependency_is_run_by_its_stage(name):
    """The other way round: a listed library file that the stage never runs would rerun the stage
    whenever it changes, for nothing."""
    unused = _unused(STAGES[name])
    assert not unused, f"{name}: its deps in dvc.yaml list files it never runs: {unused}"


def test_a_stage_that_lists_more_than_it_runs_fails_this_check():
    """The check can fail: the download stage with the study's package among its deps."""
    stage = {**STAGES["download"], "deps": [*STAGES["download"]["deps"], "src/rnnlm/study"]}
    assert "src/rnnlm/study/report.py" in _unused(stage)


@pytest.mark.parametrize("name", STAGES)
def test_every_library_dependency_exists(name):
    library = [dep for dep in STAGES[name]["deps"] if dep.startswith(("src/", "stages/"))]
    assert all((REPO_ROOT / dep).exists() for dep in library), [dep for dep in library if not (REPO_ROOT / dep).exists()]


def test_the_model_stages_cover_every_registered_cell_and_its_compiled_code():
    from rnnlm import native

    for name in ("train", "generate", "evaluate"):
        files = library_files(_script(STAGES[name]))
        expected = {REPO_ROOT / "src" / path.relative_to(native.PACKAGE.parent) for path in (*native.sources(), *native.HEADERS)}
        assert expected <= files, name


def test_a_stage_that_runs_more_than_its_deps_fails_this_check(tmp_path):
    """The check can fail: the train stage's deps without the cells' folder miss the cell files."""
    deps = [dep for dep in STAGES["train"]["deps"] if dep != "src/rnnlm/models"]
    files = library_files(_script(STAGES["train"]))
    assert any(not _covered(path, deps) and path.suffix == ".cpp" for path in files)


def test_the_library_has_no_import_cycle():
    """Imports inside functions count (they only hide a cycle); `if TYPE_CHECKING:` ones do not."""
    assert import_cycles() == []


def test_no_package_imports_one_that_imports_it_back():
    """The packages form layers (data, models, inference, evaluation, training, reporting, study):
    none reaches, through any chain of imports, back to one that imports it."""
    assert package_cycles() == []


def test_the_data_stages_run_no_model_code_and_no_pytorch():
    """download, prepare and tokenizer read and check their own sections of params.yaml alone
    (`rnnlm.params_base`): nothing under models/, no params.py, no PyTorch (seconds of each stage),
    so adding a cell or a model leaves their outputs and their DVC status as they are."""
    models = REPO_ROOT / "src/rnnlm/models"
    for name in ("download", "prepare", "tokenizer"):
        files = library_files(_script(STAGES[name]))
        assert not [f for f in files if models in f.parents or f.name == "params.py"], name

    def imports_torch(stage: str) -> bool:
        code = (f"import runpy, sys; runpy.run_path({str(REPO_ROOT / 'stages' / stage)!r}, run_name='stage'); "
                f"print('torch' in sys.modules)")
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()[-1] == "True"

    assert not any(imports_torch(f"{name}.py") for name in ("download", "prepare", "tokenizer"))
    assert imports_torch("train.py")  # the check can fail