"""Resume files: an interrupted training run's saved state, kept where its rerun finds it.

In:  the state of a run (`rnnlm.training.train` builds it) and what identifies the run: its model,
     seed and fingerprint (params, tokenizer and data) and its kind of device (CPU or CUDA); the
     processor and GEMM that write it are recorded, not part of the key.
Out: one file per run in the resume folder, `<model>-<key>.pt`, written through a temporary file
     and a rename, and read back only when its checksum and its key match.

A resume file is one header line and a PyTorch archive:

    rnnlm-resume 1 {"sha256": ..., "model": ..., "seed": ..., "epoch": ..., ...}\\n<torch.save bytes>

The header's sha256 covers the archive, so a file damaged on disk is refused (with a note, and the
run starts afresh) instead of resumed from; the rest of the header (model, seed, epoch reached,
when it was written) is what `python -m rnnlm.study resume-files` lists without reading tensors.

Where the folder is (`resume_folder`): the folder the environment variable `RNNLM_RESUME_DIR`
names, or else the stage's own folder argument (`.resume`) taken relative to the *main*
repository. A queued DVC experiment runs in a temporary copy of the repository under
`<repo>/.dvc/tmp/exps/`, which DVC deletes when the run fails: a resume file kept there would be
lost with it, so it goes to `<repo>/.resume/` instead, where the re-queued run finds it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from rnnlm.atomic import atomic_path
from rnnlm.errors import RnnlmError

RESUME_ENV = "RNNLM_RESUME_DIR"
"""The environment variable naming the resume folder (a queue worker keeps the environment it was
started with: set it before `dvc queue start`)."""

MAGIC = b"rnnlm-resume 1 "


def main_repository(cwd: Path) -> Path:
    """The repository a stage runs for: `cwd` itself, or, inside DVC's temporary workspace of a
    queued experiment (`<repo>/.dvc/tmp/exps/<tmp>/...`), the repository that holds it."""
    cwd = cwd.resolve()
    for folder in (cwd, *cwd.parents):
        if folder.name == "exps" and folder.parent.name == "tmp" and folder.parent.parent.name == ".dvc":
            return folder.parent.parent.parent
    return cwd


def resume_folder(default: str | os.PathLike[str], environ: Mapping[str, str] = os.environ,
                  cwd: Path | None = None) -> Path:
    """The folder for resume files: `$RNNLM_RESUME_DIR` when set, else `default`; a relative one is
    taken from the main repository (`main_repository`), so a queued run and its rerun share it."""
    chosen = Path(environ.get(RESUME_ENV) or default).expanduser()
    return chosen if chosen.is_absolute() else main_repository(cwd or Path.cwd()) / chosen


class ResumeFileError(RnnlmError):
    """A resume file that cannot be read: not one, cut short, or its checksum does not match."""


@dataclass(frozen=True)
class ResumeHeader:
    """What a resume file says about itself, readable without loading its tensors."""

    path: Path
    fields: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.fields.get(key)

    def age_s(self, now: float | None = None) -> float:
        written = datetime.fromisoformat(self.fields["written"]).timestamp()
        return (time.time() if now is None else now) - written


HEADER_FIELDS = {"model": str, "seed": int, "key": str, "epoch": int, "epochs": int, "written": str, "sha256": str,
                 "bytes": int}
"""What every header holds, and of what type."""


def _header(path: Path, line: bytes) -> dict[str, Any]:
    """The header fields of a resume file's first line (after MAGIC), checked: a mapping with every
    field of `HEADER_FIELDS` of its type and a `written` time that parses; else ResumeFileError."""
    try:
        fields = json.loads(line)
    except ValueError as error:
        raise ResumeFileError(f"{path}: its header does not parse ({error})") from error
    if not isinstance(fields, dict):
        raise ResumeFileError(f"{path}: its header is not a mapping of fields")
    for name, kind in HEADER_FIELDS.items():
        if not isinstance(fields.get(name), kind) or isinstance(fields.get(name), bool):
            raise ResumeFileError(f"{path}: its header has no {kind.__name__} under {name!r}")
    try:
        datetime.fromisoformat(fields["written"])
    except ValueError:
        raise ResumeFileError(f"{path}: its header's time {fields['written']!r} does not parse") from None
    return fields


def _split(path: Path) -> tuple[dict[str, Any], bytes]:
    """A resume file's header fields and its archive's bytes."""
    data = path.read_bytes()
    line_end = data.find(b"\n")
    if not data.startswith(MAGIC) or line_end < 0:
        raise ResumeFileError(f"{path}: not an rnnlm resume file")
    return _header(path, data[len(MAGIC):line_end]), data[line_end + 1:]


def read_header(path: Path) -> ResumeHeader:
    """The header of the resume file at `path` (its first line only)."""
    with open(path, "rb") as f:
        line = f.readline(1 << 16)
    if not line.startswith(MAGIC) or not line.endswith(b"\n"):
        raise ResumeFileError(f"{path}: not an rnnlm resume file")
    return ResumeHeader(path, _header(path, line[len(MAGIC):]))


def write_resume_file(path: Path, state: dict[str, Any], fields: dict[str, Any]) -> None:
    """Write `state` (torch-serialisable) with a header of `fields`, its checksum and the time."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    header = {**fields, "sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload),
              "written": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n")
            f.write(payload)


def read_resume_file(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header fields, state) of the resume file at `path`; `ResumeFileError` when it is cut short or
    damaged (its archive's sha256 is not the header's)."""
    fields, payload = _split(path)
    if len(payload) != fields.get("bytes") or hashlib.sha256(payload).hexdigest() != fields.get("sha256"):
        raise ResumeFileError(f"{path}: its checksum does not match its contents (cut short or damaged)")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - a checksummed archive that still fails to load: other code wrote it
        raise ResumeFileError(f"{path}: its archive cannot be read ({type(error).__name__})") from error
    return fields, state


class ResumeStore:
    """The resume file of one run: keyed by the run's fingerprint and its kind of device, so runs of
    the same model with other params or another seed never touch each other's, and a run begun on
    one CPU goes on from its last save on another CPU or with another GEMM library (the arithmetic
    after the switch differs in the last bits, not in kind: the run records where it trained). The
    header also names the processor and GEMM that wrote the file."""

    def __init__(self, folder: Path | None, name: str, seed: int, fingerprint: str, device: str, gemm: str,
                 processor: str = "", steps_scale: float = 1.0):
        key = hashlib.sha256(f"{fingerprint}|{device}".encode()).hexdigest()
        self.path = None if folder is None else Path(folder) / f"{name}-{key[:16]}.pt"
        self.fields = {"model": name, "seed": seed, "key": key, "device": device, "gemm": gemm,
                       "processor": processor, "steps_scale": steps_scale}

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None (with a note when a file was there but cannot be used)."""
        if self.path is None or not self.path.is_file():
            return None
        try:
            fields, state = read_resume_file(self.path)
        except (ResumeFileError, OSError) as error:
            print(f"note: ignoring {error}; starting afresh")
            return None
        if fields.get("key") != self.fields["key"]:
            print(f"note: ignoring {self.path}: it belongs to another run (other params, inputs or device)")
            return None
        return state

    def save(self, state: dict[str, Any], epochs: int) -> None:
        """Write `state` (after `state["epoch"]` of `epochs`, `state["partial"]` into the next)."""
        if self.path is not None:
            partial = state.get("partial") or {}
            write_resume_file(self.path, state, {**self.fields, "epoch": state["epoch"], "epochs": epochs,
                                                 "step_in_epoch": partial.get("steps", 0)})

    def clear(self) -> None:
        """Remove the file: call it only once every output of the run is in place."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def list_resume_files(folder: Path) -> list[ResumeHeader | ResumeFileError]:
    """Every resume file of `folder`, newest first; an unreadable one as its error."""
    if folder.exists() and not folder.is_dir():
        raise ResumeFileError(f"{folder}: not a folder; expected the folder of resume files")
    found: list[ResumeHeader | ResumeFileError] = []
    for path in sorted(folder.glob("*.pt")) if folder.is_dir() else []:
        try:
            found.append(read_header(path))
        except (ResumeFileError, OSError) as error:
            found.append(error if isinstance(error, ResumeFileError) else ResumeFileError(f"{path}: {error}"))
    return sorted(found, key=lambda h: h["written"] if isinstance(h, ResumeHeader) else "", reverse=True)
