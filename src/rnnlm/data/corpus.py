"""The corpus: fetch it checksum-pinned, read it as text, split it, and list its characters.

In:  a source (https:// URL, file:// URL or local path) and the sha256 it must have.
Out: the verified bytes written atomically; the train/validation texts and the character
vocabulary that the `prepare` stage writes.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rnnlm.atomic import atomic_path, write_bytes_atomic
from rnnlm.errors import RnnlmError

MIRROR_ENV = "RNNLM_CORPUS_MIRROR"
"""Environment variable naming a local copy of the corpus, tried before `data.url`."""


class CorpusError(RnnlmError):
    """The corpus could not be fetched, did not match its checksum, or is not usable text."""


def _local_path(source: str) -> Path | None:
    """The filesystem path `source` names (file:// URL or plain path), or None for a web URL."""
    parsed = urllib.parse.urlparse(source)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme == "":
        return Path(source)
    if parsed.scheme == "https":
        return None
    raise CorpusError(
        f"{source}: unsupported URL scheme {parsed.scheme!r}; expected https://, file:// or a local path"
    )


def _read_https(url: str, timeout: float, retries: int) -> bytes:
    """GET `url`, retrying transient failures; refuse a body shorter than its Content-Length."""
    last = "no attempt made"
    for attempt in range(1, retries + 1):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                body = response.read()
                expected = response.headers.get("Content-Length")
            if expected is not None and len(body) != int(expected):
                last = f"truncated body: got {len(body)} of {expected} bytes"
            else:
                return body
        except urllib.error.HTTPError as error:
            if error.code < 500:  # 4xx will not change on a retry
                raise CorpusError(f"{url}: HTTP {error.code} {error.reason}") from error
            last = f"HTTP {error.code} {error.reason}"
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            last = f"unreachable ({reason})"
        if attempt < retries:
            time.sleep(min(2.0**attempt, 10.0))
    raise CorpusError(f"{url}: {last} after {retries} attempts")


def read_source(source: str, timeout: float = 30.0, retries: int = 3) -> bytes:
    """The bytes behind `source`: a local file, a file:// URL or an https:// URL."""
    path = _local_path(source)
    if path is None:
        return _read_https(source, timeout, retries)
    try:
        return path.read_bytes()
    except FileNotFoundError as error:
        raise CorpusError(f"{source}: no such file") from error
    except OSError as error:
        raise CorpusError(f"{source}: cannot read ({error.strerror or error})") from error


def verified(source: str, body: bytes, sha256: str) -> bytes:
    """`body` if its sha256 is `sha256`, else a CorpusError naming both hashes."""
    actual = hashlib.sha256(body).hexdigest()
    if actual != sha256:
        raise CorpusError(
            f"{source}: sha256 mismatch: expected {sha256}, got {actual} ({len(body)} bytes)"
        )
    return body


def fetch_corpus(url: str, sha256: str, dest: str | Path, mirror: str | None = None) -> str:
    """Write the corpus to `dest` from `mirror` (if given) or `url`, verified; return the source used.

    A mirror that is missing or wrong is reported on stderr and the URL is tried next; nothing is
    written unless the bytes match `sha256`.
    """
    if mirror:
        try:
            write_bytes_atomic(dest, verified(mirror, read_source(mirror), sha256))
            return mirror
        except CorpusError as error:
            print(f"warning: {MIRROR_ENV}: {error}; trying {url}", file=sys.stderr)
    write_bytes_atomic(dest, verified(url, read_source(url), sha256))
    return url


def read_corpus(path: str | Path) -> str:
    """The corpus at `path` as text; an error if it is empty or not UTF-8."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CorpusError(f"{path}: cannot read ({error.strerror or error})") from error
    if not data:
        raise CorpusError(f"{path}: the corpus is empty; expected UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(
            f"{path}: not UTF-8 text (invalid byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from error


@dataclass(frozen=True)
class Split:
    """The corpus cut in two: the first `train_fraction` of its characters, and the rest."""

    train: str
    val: str


def split_corpus(text: str, train_fraction: float) -> Split:
    """Cut `text` at int(train_fraction * len(text)) characters, as the study does."""
    cut = int(train_fraction * len(text))
    if cut < 2 or len(text) - cut < 2:
        raise CorpusError(
            f"a corpus of {len(text)} characters split at {train_fraction} leaves fewer than "
            "2 characters on one side; expected a longer corpus"
        )
    return Split(train=text[:cut], val=text[cut:])


def character_vocabulary(text: str) -> list[str]:
    """The sorted distinct characters of `text`: the character models' vocabulary."""
    return sorted(set(text))


TRAIN_FILE, VAL_FILE, VOCAB_FILE = "train.txt", "val.txt", "vocab.json"


def write_prepared(split: Split, vocabulary: list[str], out_dir: str | Path) -> None:
    """Write the folder `out_dir` at once: train.txt, val.txt (exact UTF-8 bytes), vocab.json."""
    summary = {
        "chars": vocabulary,
        "size": len(vocabulary),
        "train_chars": len(split.train),
        "val_chars": len(split.val),
    }
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        (tmp / TRAIN_FILE).write_bytes(split.train.encode("utf-8"))
        (tmp / VAL_FILE).write_bytes(split.val.encode("utf-8"))
        (tmp / VOCAB_FILE).write_text(json.dumps(summary, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def read_vocabulary(prepared_dir: str | Path) -> list[str]:
    """The character vocabulary that `write_prepared` stored in `prepared_dir`."""
    path = Path(prepared_dir) / VOCAB_FILE
    try:
        return list(json.loads(path.read_text(encoding="utf-8"))["chars"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CorpusError(f"{path}: cannot read the character vocabulary ({error}); run the prepare stage") from error
