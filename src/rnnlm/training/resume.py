"""Resume files: an interrupted training run's saved state, kept where its rerun finds it.

In:  the state of a run (`rnnlm.training.record` builds it) and what identifies the run: its model,
     seed and fingerprint (params, tokenizer and data) and its kind of device (CPU or CUDA); the
     processor and GEMM that write it are recorded, not part of the key.
Out: one file per run in the resume folder, `<model>-<key>.pt`, written through a temporary file
     and a rename, and read back only when its checksum and its key match.

A resume file is one header line and a PyTorch archive:

    rnnlm-resume 2 {"sha256": ..., "model": ..., "seed": ..., "key": ..., "epoch": ..., ...}\\n<torch.save bytes>

The header's sha256 covers the rest of the header (the run's key, model, seed, epoch, ...) and the
archive together, so a file damaged on disk, or one whose header was edited to pass for another run,
is refused (with a note, and the run starts afresh) instead of resumed from; the header is what
`python -m rnnlm_study resume-files` lists without reading tensors (after checking the checksum, so a
forged header is never listed as a run's progress). Files of format 1 (the checksum
over the archive alone, so a header re-keyed to another run still passed) are refused. `check_payload`
then holds the archive to the run that resumes it: the same weights and optimizer entries of the same
shapes, and an epoch, scheduler and history that agree.

Where the folder is (`resume_folder`): the folder the environment variable `RNNLM_RESUME_DIR`
names, or else the stage's own folder argument (`.resume`) taken relative to the *main*
repository. A queued DVC experiment runs in a temporary copy of the repository under
`<repo>/.dvc/tmp/exps/`, which DVC deletes when the run fails: a resume file kept there would be
lost with it, so it goes to `<repo>/.resume/` instead, where the re-queued run finds it.

PyTorch is imported by the functions that save, load and check an archive, not with the module: the
folder, the headers and their listing need none of it, so `python -m rnnlm_study status` and
`resume-files` start without PyTorch's seconds of import.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnlm.atomic import atomic_path
from rnnlm.errors import RnnlmError
from rnnlm.params import MODEL_NAME

if TYPE_CHECKING:
    import torch

RESUME_ENV = "RNNLM_RESUME_DIR"
"""The environment variable naming the resume folder (a queue worker keeps the environment it was
started with: set it before `dvc queue start`)."""

MAGIC = b"rnnlm-resume 2 "
"""Format 2: the checksum binds the header and the archive together."""

MAGIC_1 = b"rnnlm-resume 1 "
"""Format 1, the first: the checksum covers the archive only; refused, saying why."""


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

OPTIONAL_FIELDS = {"steps_scale": (int, float), "step_in_epoch": int, "device": str, "gemm": str, "processor": str,
                   "code": str, "by_hand": dict}
"""What a header may hold besides (files of older code lack some), and of what type."""


HEADER_LIMIT = 1 << 16
"""The longest header line read (bytes): a longer one is no header of ours, for listing and resuming alike."""

FUTURE_SLACK_S = 300.0
"""A header written more than this many seconds in the future (clocks of two machines disagree by
less) was edited: it is refused rather than listed with a negative age."""


def _header(path: Path, line: bytes) -> dict[str, Any]:
    """The header fields of a resume file's first line (after its magic), checked: a mapping with every
    field of `HEADER_FIELDS` of its type and a `written` time that parses and is not in the future;
    else ResumeFileError."""
    try:
        fields = json.loads(line)
    except ValueError as error:
        raise ResumeFileError(f"{path}: its header does not parse ({error})") from error
    if not isinstance(fields, dict):
        raise ResumeFileError(f"{path}: its header is not a mapping of fields")
    for name, kind in HEADER_FIELDS.items():
        if not isinstance(fields.get(name), kind) or isinstance(fields.get(name), bool):
            raise ResumeFileError(f"{path}: its header has no {kind.__name__} under {name!r}")
    for name, kinds in OPTIONAL_FIELDS.items():
        if name in fields and (not isinstance(fields[name], kinds) or isinstance(fields[name], bool)):
            raise ResumeFileError(f"{path}: its header's {name} {fields[name]!r} is not of the kind a run writes")
    try:
        written = datetime.fromisoformat(fields["written"])
    except ValueError:
        raise ResumeFileError(f"{path}: its header's time {fields['written']!r} does not parse") from None
    if written.tzinfo is None or written.timestamp() > time.time() + FUTURE_SLACK_S:
        raise ResumeFileError(f"{path}: its header's time {fields['written']!r} is not a past time with a zone")
    return fields


def _magic(path: Path, line: bytes) -> bytes:
    """The format magic `line` starts with; ResumeFileError when it is no resume file's first line,
    or one of format 1 (its header is not bound to its contents)."""
    if line.startswith(MAGIC_1):
        raise ResumeFileError(f"{path}: a resume file of format 1, written by older code, whose checksum does not "
                              "bind its header to its run; expected format 2")
    if line.startswith(MAGIC):
        return MAGIC
    raise ResumeFileError(f"{path}: not an rnnlm resume file")


def _first_line(path: Path, data: bytes) -> tuple[bytes, bytes]:
    """(the magic, the header's JSON) of a resume file's first line, which must end within HEADER_LIMIT."""
    line_end = data.find(b"\n", 0, HEADER_LIMIT + 1)
    magic = _magic(path, data)
    if line_end < 0:
        raise ResumeFileError(f"{path}: not an rnnlm resume file (no header line within {HEADER_LIMIT:,} bytes)")
    return magic, data[len(magic):line_end]


def _checksum(fields: dict[str, Any], payload: bytes) -> str:
    """Format 2's sha256: every header field but the checksum itself, then the archive."""
    bound = json.dumps({k: v for k, v in fields.items() if k != "sha256"}, sort_keys=True).encode()
    return hashlib.sha256(bound + b"\n" + payload).hexdigest()


CHUNK = 1 << 22
"""Bytes read at a time while checking a listed file's checksum (its tensors are never loaded)."""


def read_header(path: Path) -> ResumeHeader:
    """The header of the resume file at `path`, once the checksum over it and the archive holds
    (read in chunks, no tensor loaded); ResumeFileError for a damaged or edited file."""
    with open(path, "rb") as f:
        head = f.read(HEADER_LIMIT + len(MAGIC) + 1)
        magic, line = _first_line(path, head)
        fields = _header(path, line)
        f.seek(len(magic) + len(line) + 1)
        bound = {k: v for k, v in fields.items() if k != "sha256"}
        digest, size = hashlib.sha256(json.dumps(bound, sort_keys=True).encode() + b"\n"), 0
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    if size != fields["bytes"] or digest.hexdigest() != fields["sha256"]:
        raise ResumeFileError(f"{path}: its checksum does not match its header and contents (cut short, damaged "
                              "or edited)")
    return ResumeHeader(path, fields)


def write_resume_file(path: Path, state: dict[str, Any], fields: dict[str, Any]) -> None:
    """Write `state` (torch-serialisable) with a header of `fields`, the time and the checksum that
    binds the two (format 2)."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    header = {**fields, "bytes": len(payload), "written": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    header["sha256"] = _checksum(header, payload)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n")
            f.write(payload)


def read_resume_file(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header fields, state) of the resume file at `path`; `ResumeFileError` when it is cut short,
    damaged or edited (its checksum is not that of its header and archive; for format 1, of its
    archive)."""
    import torch

    data = path.read_bytes()
    magic, line = _first_line(path, data)
    fields, payload = _header(path, line), data[len(magic) + len(line) + 1:]
    if len(payload) != fields["bytes"] or _checksum(fields, payload) != fields["sha256"]:
        raise ResumeFileError(f"{path}: its checksum does not match its header and contents (cut short, damaged "
                              "or edited)")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - a checksummed archive that still fails to load: other code wrote it
        raise ResumeFileError(f"{path}: its archive cannot be read ({type(error).__name__})") from error
    if not isinstance(state, dict):
        raise ResumeFileError(f"{path}: its archive holds no run state")
    return fields, state


def _shapes(tensors: Any) -> dict[str, tuple[tuple[int, ...], torch.dtype]] | None:
    """name -> (shape, dtype) of a state dict of tensors; None when it is not one."""
    import torch

    if not isinstance(tensors, dict) or not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        return None
    return {str(k): (tuple(t.shape), t.dtype) for k, t in tensors.items()}


def check_payload(saved: dict[str, Any], model: dict[str, torch.Tensor], optimizer: dict[str, Any], epochs: int,
                  steps_per_epoch: int, needed_too: tuple[str, ...] = ()) -> str | None:
    """Why the run state `saved` (a resume file's archive) cannot be the state of the run that would
    resume it, or None when it can: the run's `model` and `optimizer` state dicts (as freshly built)
    give the weights' names, shapes and dtypes and the optimizer's parameter groups; `epochs` and
    `steps_per_epoch` bound where it may stand. A file that passes its checksum but fails here was
    written by other code or forged; resuming from it would end in a traceback or a run that lies
    about how long it trained. `needed_too`: entries this kind of run also restores."""
    import torch

    needed = dict.fromkeys(("epoch", "seconds", "model", "optimizer", "scheduler", "history_steps", "history_epochs",
                            "sampler_rng", "torch_rng", "val_batch_rng", *needed_too))
    missing = [k for k in needed if k not in saved]
    if missing:
        return f"it lacks {', '.join(missing)}"
    epoch, partial = saved["epoch"], saved.get("partial") or {}
    steps = partial.get("steps", 0) if isinstance(partial, dict) else None
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch <= epochs:
        return f"it stands after epoch {epoch!r}, and the run has {epochs} epochs"
    if not isinstance(steps, int) or not 0 <= steps < steps_per_epoch or (steps and epoch == epochs):
        return f"it stands {steps!r} steps into epoch {epoch + 1}, which has {steps_per_epoch} steps"
    history = saved["history_epochs"]
    if not isinstance(history, list) or len(history) != epoch:
        return f"its history holds {len(history) if isinstance(history, list) else 'no'} epochs, not {epoch}"
    scheduler = saved["scheduler"]
    if not isinstance(scheduler, dict) or scheduler.get("last_epoch") != epoch:
        return f"its learning-rate schedule is not after epoch {epoch}"
    want = _shapes(model)
    for name in ("model", "first_epoch_model"):
        if (name == "model" or saved.get(name) is not None) and _shapes(saved.get(name)) != want:
            return f"its {'weights' if name == 'model' else 'weights after epoch 1'} are not of this model's names and shapes"
    got = saved["optimizer"]
    if not isinstance(got, dict) or not isinstance(got.get("param_groups"), list) or not isinstance(got.get("state"), dict):
        return "its optimizer state is not an optimizer's"
    groups = [g.get("params") for g in got["param_groups"] if isinstance(g, dict)]
    if groups != [g["params"] for g in optimizer["param_groups"]]:
        return "its optimizer's parameter groups are not this model's"
    by_index = dict(zip((i for g in optimizer["param_groups"] for i in g["params"]), want.values()))
    for index, entry in got["state"].items():
        if index not in by_index or not isinstance(entry, dict):
            return f"its optimizer holds state for a parameter {index!r} this model lacks"
        for key, value in entry.items():
            if key != "step" and (not isinstance(value, torch.Tensor) or (tuple(value.shape), value.dtype) != by_index[index]):
                return f"its optimizer's {key} of parameter {index} is not of that parameter's shape"
    if (epoch or steps) and len(got["state"]) != len(by_index):
        return f"its optimizer holds state for {len(got['state'])} of the model's {len(by_index)} parameters"
    return None


_LIBRARY = Path(__file__).resolve().parents[1]
"""The `rnnlm` package of this checkout (a stage imports its own checkout's: PYTHONPATH=src)."""

CODE_SUFFIXES = (".py", ".cpp", ".h")


@functools.cache
def code_fingerprint(root: Path = _LIBRARY) -> str:
    """The sha256 of the library's code under `root` (every .py, .cpp and .h file but the study's, by
    path and bytes): what computes a training step, and more. A resume file records it, so that a run
    never goes on with epochs another version of the code trained."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in CODE_SUFFIXES and p.is_file()):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("study/") or "__pycache__" in relative:
            continue
        digest.update(relative.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


class ResumeStore:
    """The resume file of one run: named after the run's fingerprint and its kind of device, so runs of
    the same model with other params or another seed never touch each other's. Its key adds the code
    that wrote it (`code`: `code_fingerprint`) and the arithmetic settings the environment chose
    (`by_hand`: `rnnlm.compute.backend.chosen_by_hand`): a file of the same run under other code or
    other settings is refused with a note saying which, and the run starts afresh. A run begun on one
    CPU goes on from its last save on another CPU or with another GEMM library by that CPU's rule
    (the arithmetic after the switch differs in the last bits, not in kind: the run records where it
    trained). The header also names the processor and GEMM that wrote the file."""

    def __init__(self, folder: Path | None, name: str, seed: int, fingerprint: str, device: str, gemm: str,
                 processor: str = "", steps_scale: float = 1.0, code: str = "", by_hand: Mapping[str, str] | None = None):
        if not MODEL_NAME.fullmatch(name):  # the name becomes a file name: never a path out of the folder
            raise ResumeFileError(f"model {name!r}: not a model name; expected letters, digits and underscores")
        run, by_hand = hashlib.sha256(f"{fingerprint}|{device}".encode()).hexdigest(), dict(by_hand or {})
        key = hashlib.sha256(json.dumps({"run": run, "code": code, "by_hand": by_hand}, sort_keys=True).encode()
                             ).hexdigest()
        self.path = None if folder is None else Path(folder) / f"{name}-{run[:16]}.pt"
        self.fields = {"model": name, "seed": seed, "key": key, "device": device, "gemm": gemm,
                       "processor": processor, "steps_scale": steps_scale, "code": code, "by_hand": by_hand}

    def _other(self, fields: dict[str, Any]) -> str:
        """Why a file of this run's name and another key is not this run's."""
        if fields.get("code") != self.fields["code"]:
            return (f"it was written by other code (library sha256 {str(fields.get('code'))[:12] or 'unrecorded'}, "
                    f"here {self.fields['code'][:12]}); starting afresh")
        if fields.get("by_hand") != self.fields["by_hand"]:
            theirs, ours = fields.get("by_hand") or {}, self.fields["by_hand"]
            changed = ", ".join(f"{k} {theirs.get(k, 'unrecorded')!s} there, {ours.get(k)} here"
                                for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k))
            return f"it was written under other arithmetic settings ({changed}); starting afresh"
        return "it belongs to another run (other params, inputs or device)"

    def load(self, fits: Callable[[dict[str, Any]], str | None] = lambda saved: None) -> dict[str, Any] | None:
        """The saved state, or None (with a note when a file was there but cannot be used: damaged,
        another run's, or a state that `fits` says why the run cannot take)."""
        if self.path is None or not self.path.is_file():
            return None
        try:
            fields, state = read_resume_file(self.path)
        except (ResumeFileError, OSError) as error:
            print(f"note: ignoring {error}; starting afresh")
            return None
        if fields.get("key") != self.fields["key"] or state.get("run_key") != fields["key"]:
            print(f"note: ignoring {self.path}: {self._other(fields)}")
            return None
        why = fits(state)
        if why is not None:
            print(f"note: ignoring {self.path}: {why}; starting afresh")
            return None
        return state

    def save(self, state: dict[str, Any], epochs: int) -> None:
        """Write `state` (after `state["epoch"]` of `epochs`, `state["partial"]` into the next)."""
        if self.path is not None:
            partial = state.get("partial") or {}
            write_resume_file(self.path, {**state, "run_key": self.fields["key"]},
                              {**self.fields, "epoch": state["epoch"], "epochs": epochs,
                               "step_in_epoch": partial.get("steps", 0)})

    def clear(self) -> None:
        """Remove the file: call it only once every output of the run is in place."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def list_resume_files(folder: Path) -> list[ResumeHeader | ResumeFileError]:
    """Every resume file of `folder`: the readable ones newest first, then each unreadable one as its
    error, in name order; none when the folder does not exist yet."""
    if not folder.exists():
        return []
    if not folder.is_dir():
        raise ResumeFileError(f"{folder}: not a folder; expected the folder of resume files")
    headers: list[ResumeHeader] = []
    errors: list[ResumeFileError] = []
    for path in sorted(folder.glob("*.pt")):
        try:
            headers.append(read_header(path))
        except ResumeFileError as error:
            errors.append(error)
        except OSError as error:
            errors.append(ResumeFileError(f"{path}: {error}"))
    headers.sort(key=lambda header: header["written"], reverse=True)
    return [*headers, *errors]
