"""Write outputs so that a failure leaves nothing half-written behind.

`atomic_path(dest)` yields a temporary path beside `dest` (same folder, so the final rename is
atomic on POSIX). The caller writes a file or a whole folder there; on success it replaces `dest`,
on any exception it is removed and `dest` is left as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rnnlm.errors import RnnlmError


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def atomic_path(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling path of `dest`; move it onto `dest` only if the block succeeds."""
    dest = Path(dest)
    existing = next(p for p in dest.parents if p.exists())  # the root always exists
    if not existing.is_dir():
        raise RnnlmError(f"cannot write {dest}: {existing} is a file, not a folder")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    except OSError as error:
        raise RnnlmError(f"cannot write {dest}: {error.strerror or error}") from error
    os.close(fd)
    tmp = Path(name)
    tmp.unlink()  # the caller decides whether it becomes a file or a folder
    try:
        yield tmp
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        _remove(tmp)
        raise


def write_bytes_atomic(dest: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `dest` through a temporary file and a rename."""
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(dest: str | os.PathLike[str], text: str) -> None:
    """Write `text` as UTF-8 to `dest`, byte for byte (no newline translation)."""
    write_bytes_atomic(dest, text.encode("utf-8"))
