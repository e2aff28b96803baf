"""Write outputs so that a failure leaves nothing half-written behind.

`atomic_path(dest)` yields a temporary path beside `dest` (same folder, so the final rename is
atomic on POSIX). The caller writes a file or a whole folder there; on success it replaces `dest`,
on any exception it is removed and `dest` is left as it was. A full disk while writing becomes one
`RnnlmError` naming `dest`. The temporary name holds the writer's process id: a process killed
outright (SIGKILL) cannot remove its temporary, so the next write of the same `dest` removes those
of writers that are no longer running.

`AtomicFiles` does the same for several outputs at once: each is written to its temporary, and all
are renamed only when every one is written, so a failure leaves every previous output as it was.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rnnlm.errors import NO_SPACE, RnnlmError, no_space


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove_orphans(dest: Path) -> None:
    """Remove temporaries of `dest` left by writers that were killed (their process is gone)."""
    for orphan in dest.parent.glob(f".{glob.escape(dest.name)}.*.tmp"):
        pid = orphan.name[len(dest.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            _remove(orphan)


def temporary_sibling(dest: Path) -> Path:
    """A fresh, unused name beside `dest` (nothing is created there), after removing orphans."""
    existing = next(p for p in dest.parents if p.exists())  # the root always exists
    if not existing.is_dir():
        raise RnnlmError(f"cannot write {dest}: {existing} is a file, not a folder")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _remove_orphans(dest)
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.{os.getpid()}.", suffix=".tmp", dir=dest.parent)
    except OSError as error:
        raise RnnlmError(f"cannot write {dest}: {error.strerror or error}") from error
    os.close(fd)
    tmp = Path(name)
    tmp.unlink()  # the caller decides whether it becomes a file or a folder
    return tmp


def _put_in_place(tmp: Path, dest: Path) -> None:
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    os.replace(tmp, dest)


@contextmanager
def atomic_path(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling path of `dest`; move it onto `dest` only if the block succeeds."""
    dest = Path(dest)
    tmp = temporary_sibling(dest)
    try:
        yield tmp
        _put_in_place(tmp, dest)
    except OSError as error:
        _remove(tmp)
        if error.errno in NO_SPACE:
            raise no_space(error, dest) from error
        raise
    except BaseException:
        _remove(tmp)
        raise


class AtomicFiles:
    """Several outputs replaced together: `path(dest)` gives each one's temporary; leaving the
    `with` block without an error renames them all (a kill between two renames leaves some new and
    some old: running the same command again mends it); with an error, removes them all."""

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []

    def path(self, dest: str | os.PathLike[str]) -> Path:
        tmp = temporary_sibling(Path(dest))
        self._pending.append((tmp, Path(dest)))
        return tmp

    def __enter__(self) -> AtomicFiles:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        try:
            if kind is None:
                for tmp, dest in self._pending:
                    _put_in_place(tmp, dest)
        except OSError as failure:
            if failure.errno in NO_SPACE:
                raise no_space(failure, dest) from failure
            raise
        finally:
            for tmp, _ in self._pending:
                _remove(tmp)
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            named = [d for t, d in self._pending if error.filename in (str(t), t)]
            raise no_space(error, named[0] if named else self._pending[-1][1] if self._pending else "an output") from error


def write_bytes_atomic(dest: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `dest` through a temporary file and a rename."""
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(dest: str | os.PathLike[str], text: str) -> None:
    """Write `text` as UTF-8 to `dest`, byte for byte (no newline translation)."""
    write_bytes_atomic(dest, text.encode("utf-8"))
