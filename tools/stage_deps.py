"""Writes the library part of each stage's `deps:` in dvc.yaml from what the stage runs.

    python -m tools.stage_deps           # rewrite dvc.yaml's deps (after adding an import)
    python -m tools.stage_deps --check   # exit 1, naming the stages, if dvc.yaml is not what it would write

In:  dvc.yaml (each stage's script, from its `cmd`) and the library's import graph
     (`tools.import_graph`: imports followed through the library, the compiled module's C++).
Out: per stage, its script, then the library files it can run, as folders where it runs every file
     of one (`src/rnnlm/compute`) and as files elsewhere, then its other deps (data, models, ...) as
     they were. Two rules the import graph does not see:
     - the model stages depend on `models/cell.json` (the `cell` stage's fingerprint of the selected
       cell's files) instead of the cells' files (their Python and their compiled loops, which the
       compiled module holds for every cell), so another cell's change leaves them as they are;
     - the `cell` stage hashes those files without importing a cell, so it lists their folders.
Only the `      - ` lines of each `deps:` block change; comments and every other line stay.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import yaml

from tools.import_graph import REPO_ROOT, SRC, library_files

if str(SRC) not in sys.path:  # the checkout's own library, as the stages import it (PYTHONPATH=src)
    sys.path.insert(0, str(SRC))

DVC_YAML = REPO_ROOT / "dvc.yaml"
CELLS_DIR = SRC / "rnnlm/models/cells"
FINGERPRINT = "models/cell.json"
"""The cell stage's output: the model stages' dependency on the selected cell's files."""
CELL_UNITS_DIR = SRC / "rnnlm/compute/cpp"
"""Where the cells' compiled loops are (`rnnlm.compute.sources.cell_units`), beside compute's own C++."""
READ_NOT_RUN = {"cell": ["src/rnnlm/models/cells", "src/rnnlm/compute/cpp"]}
"""Folders a stage hashes without running them: the cell stage's fingerprint of every cell (its Python
here, its compiled loops in compute's C++ folder)."""
SOURCE_SUFFIXES = (".py", ".cpp", ".h", ".json")


def script_of(stage: dict) -> Path:
    """The stage's script, read from its command."""
    return REPO_ROOT / re.search(r"python (stages/\w+\.py)", stage["cmd"]).group(1)


def runs(stage: dict, name: str) -> set[Path]:
    """The library files stage `name` can run (the cell stage asks the registry for no cell)."""
    return library_files(script_of(stage), specs=name != "cell")


def library_cells() -> list[str]:
    """The registry's cells whose modules are the library's (the tests register one of their own)."""
    from rnnlm.models.cells import CELLS

    return [cell for cell in CELLS if CELLS.module(cell).startswith("rnnlm.")]


def cell_files(cell: str) -> set[Path]:
    """`Registry.files(cell)` as files of this checkout's src/, whichever copy of the package imported."""
    from rnnlm.models.cells import CELLS, registry

    return {SRC / path.relative_to(registry.FOLDER.parents[2]) for path in CELLS.files(cell)}


@cache
def fingerprinted() -> frozenset[Path]:
    """The cells' files that some cell's fingerprint covers (`Registry.files`), and the registry's
    table (whose entry for the cell the fingerprint holds)."""
    return frozenset({CELLS_DIR / "__init__.py", *(path for cell in library_cells() for path in cell_files(cell))})


def _sources(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts}


def library_deps(stage: dict, name: str) -> list[str]:
    """The library lines of the stage's deps: its script, then what it runs (a folder whose every
    source file it runs as the folder), top-level files before folders, each in name order."""
    files = runs(stage, name)
    if FINGERPRINT in stage["deps"]:
        files -= fingerprinted()
    read = [REPO_ROOT / folder for folder in READ_NOT_RUN.get(name, [])]
    files = {path for path in files if not any(folder in path.parents for folder in read)}

    def collapse(folder: Path) -> list[Path]:
        if folder != SRC / "rnnlm" and _sources(folder) <= files:
            return [folder]
        own = sorted(path for path in files if path.parent == folder)
        subfolders = sorted(path for path in folder.iterdir() if path.is_dir() and _sources(path) & files)
        return own + [entry for sub in subfolders for entry in collapse(sub)]

    lines = [script_of(stage), *collapse(SRC / "rnnlm"), *read]
    return [str(path.relative_to(REPO_ROOT)) for path in lines]


def rewritten(text: str) -> str:
    """dvc.yaml's text with each stage's deps list written anew: library lines from `library_deps`,
    then the stage's other deps in their order."""
    stages = yaml.safe_load(text)["stages"]
    lines, out, stage, in_deps = text.splitlines(keepends=True), [], None, False
    for line in lines:
        found = re.match(r"^  (\w+):\s*$", line)
        if found and found[1] in stages:
            stage, in_deps = found[1], False
        if stage is not None and line == "    deps:\n":
            in_deps = True
            out.append(line)
            deps = stages[stage]["deps"]
            others = [dep for dep in deps if not dep.startswith(("src/", "stages/"))]
            out += [f"      - {dep}\n" for dep in [*library_deps(stages[stage], stage), *others]]
            continue
        if in_deps and line.startswith("      - "):
            continue  # an old entry: written above
        in_deps = in_deps and line.startswith("      - ")
        out.append(line)
    return "".join(out)


def main(argv: list[str]) -> int:
    text = DVC_YAML.read_text(encoding="utf-8")
    new = rewritten(text)
    if "--check" in argv:
        if new != text:
            old, fresh = yaml.safe_load(text)["stages"], yaml.safe_load(new)["stages"]
            stale = [name for name in old if old[name].get("deps") != fresh[name].get("deps")]
            print(f"dvc.yaml: the deps of {', '.join(stale)} are not what the stages run; "
                  "expected them rewritten by `python -m tools.stage_deps`", file=sys.stderr)
            return 1
        return 0
    if new != text:
        partial = DVC_YAML.with_name("dvc.yaml.tmp")
        partial.write_text(new, encoding="utf-8")
        partial.replace(DVC_YAML)
        print("rewrote dvc.yaml's deps")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
