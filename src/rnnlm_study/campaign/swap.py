"""A study run folder written whole, checked, then swapped in: never half of one run and half of another.

`write_folder` writes the files into `.<name>.partial` (provenance.json last), hands that folder to a
check (the report's own checks, `rnnlm_study.folders.load_run`), and only if it passes swaps it in:
the old folder renamed to `.<name>.old`, the new one to `<name>`, the old one removed. A run that
fails its check leaves the old folder as it was. A kill between the two renames leaves `<name>`
missing; the next `collect` mends that first (`mend`: the old folder goes back) and removes every
`.partial`/`.old` leftover, and `report` refuses to run while one is there (`leftovers`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from rnnlm.errors import NO_SPACE, RnnlmError, no_space
from rnnlm_study.folders import leftovers, old_folder, partial_folder


def mend(out: Path) -> list[str]:
    """Undo what an interrupted `collect` left under `out`: a folder whose swap stopped half-way gets
    its old contents back; every `.partial`/`.old` leftover is removed. Returns what was done."""
    said = []
    for leftover in leftovers(out):
        name = leftover.name[1:].rsplit(".", 1)[0]
        folder = leftover.with_name(name)
        if leftover.name.endswith(".old") and not folder.exists():
            leftover.rename(folder)
            said.append(f"{folder}: put back the run an interrupted collect had moved aside")
        else:
            shutil.rmtree(leftover)
            said.append(f"{leftover}: removed (left by an interrupted collect)")
    return said


def write_folder(files: dict[str, str], provenance_record: dict[str, object], folder: Path,
                 check: Callable[[Path], None] = lambda partial: None) -> None:
    """`files` (study folder name -> text) and the provenance, written whole into `.<name>.partial`
    (provenance.json last), checked (`check(partial)` raises to refuse it), then swapped in (see the
    module docstring). A refused or unwritable run leaves `folder` as it was."""
    partial, old = partial_folder(folder), old_folder(folder)
    try:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for name, text in files.items():
            (partial / name).write_text(text, encoding="utf-8")
        record = {**provenance_record, "files": sorted(files)}
        (partial / "provenance.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        check(partial)
    except BaseException as error:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            raise no_space(error, folder) from error
        if isinstance(error, OSError):
            raise RnnlmError(f"cannot write {folder}: {error.strerror or error}; expected a folder this user may "
                             "write") from error
        raise
    if folder.exists():
        folder.rename(old)
        partial.rename(folder)
        shutil.rmtree(old)
    else:
        partial.rename(folder)


