"""Download (checksum, mirror, failures leave nothing), corpus checks, and the split."""

from __future__ import annotations

import io
import json
import urllib.error

import pytest

from rnnlm.data import corpus
from rnnlm.data.corpus import (
    CorpusError,
    character_vocabulary,
    fetch_corpus,
    read_corpus,
    read_vocabulary,
    split_corpus,
    write_prepared,
)
from tests.conftest import sha256_of

BODY = "First Citizen:\nBefore we proceed any further, hear me speak.\n".encode()
GOOD = sha256_of(BODY)


@pytest.fixture
def fixture_file(tmp_path):
    path = tmp_path / "source.txt"
    path.write_bytes(BODY)
    return path


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir())


def test_file_url_with_right_checksum(tmp_path, fixture_file):
    dest = tmp_path / "out" / "corpus.txt"
    assert fetch_corpus(fixture_file.as_uri(), GOOD, dest) == fixture_file.as_uri()
    assert dest.read_bytes() == BODY
    assert leftovers(dest.parent) == ["corpus.txt"]


def test_plain_path_source(tmp_path, fixture_file):
    fetch_corpus(str(fixture_file), GOOD, tmp_path / "corpus.txt")
    assert (tmp_path / "corpus.txt").read_bytes() == BODY


def test_wrong_checksum_names_both_hashes_and_writes_nothing(tmp_path, fixture_file):
    out = tmp_path / "out"
    out.mkdir()
    wrong = "0" * 64
    with pytest.raises(CorpusError) as caught:
        fetch_corpus(fixture_file.as_uri(), wrong, out / "corpus.txt")
    message = str(caught.value)
    assert fixture_file.as_uri() in message and wrong in message and GOOD in message
    assert leftovers(out) == []


def test_missing_file_writes_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(CorpusError, match="no such file"):
        fetch_corpus((tmp_path / "absent.txt").as_uri(), GOOD, out / "corpus.txt")
    assert not (out / "corpus.txt").exists()


def test_a_failed_fetch_keeps_the_previous_file(tmp_path, fixture_file):
    dest = tmp_path / "corpus.txt"
    dest.write_text("previous")
    with pytest.raises(CorpusError):
        fetch_corpus(fixture_file.as_uri(), "1" * 64, dest)
    assert dest.read_text() == "previous"
    assert leftovers(tmp_path) == ["corpus.txt", "source.txt"]


@pytest.mark.parametrize("url", ["http://example.com/x.txt", "ftp://example.com/x.txt", "s3://bucket/x"])
def test_other_schemes_are_refused(tmp_path, url):
    with pytest.raises(CorpusError, match="unsupported URL scheme .*expected https://, file:// or a local path"):
        fetch_corpus(url, GOOD, tmp_path / "corpus.txt")


def test_mirror_is_tried_first(tmp_path, fixture_file):
    dest = tmp_path / "corpus.txt"
    used = fetch_corpus("https://unreachable.invalid/x.txt", GOOD, dest, mirror=str(fixture_file))
    assert used == str(fixture_file)
    assert dest.read_bytes() == BODY


def test_bad_mirror_falls_back_to_the_url(tmp_path, fixture_file, capsys):
    bad = tmp_path / "bad-mirror.txt"
    bad.write_bytes(b"not the corpus")
    used = fetch_corpus(fixture_file.as_uri(), GOOD, tmp_path / "corpus.txt", mirror=str(bad))
    assert used == fixture_file.as_uri()
    assert "RNNLM_CORPUS_MIRROR" in capsys.readouterr().err


class _Response(io.BytesIO):
    def __init__(self, body: bytes, length: int):
        super().__init__(body)
        self.headers = {"Content-Length": str(length)}


def test_truncated_https_body_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus.time, "sleep", lambda s: None)
    monkeypatch.setattr(corpus.urllib.request, "urlopen", lambda url, timeout: _Response(BODY[:10], len(BODY)))
    with pytest.raises(CorpusError, match=f"truncated body: got 10 of {len(BODY)} bytes after 3 attempts"):
        fetch_corpus("https://example.com/x.txt", GOOD, tmp_path / "corpus.txt")
    assert leftovers(tmp_path) == []


def test_https_retries_then_succeeds(tmp_path, monkeypatch):
    calls = []

    def flaky(url, timeout):
        calls.append(timeout)
        if len(calls) < 3:
            raise urllib.error.URLError("connection reset")
        return _Response(BODY, len(BODY))

    monkeypatch.setattr(corpus.time, "sleep", lambda s: None)
    monkeypatch.setattr(corpus.urllib.request, "urlopen", flaky)
    fetch_corpus("https://example.com/x.txt", GOOD, tmp_path / "corpus.txt")
    assert len(calls) == 3 and all(t > 0 for t in calls)
    assert (tmp_path / "corpus.txt").read_bytes() == BODY


def test_unreachable_host_is_one_line(tmp_path, monkeypatch):
    def down(url, timeout):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(corpus.time, "sleep", lambda s: None)
    monkeypatch.setattr(corpus.urllib.request, "urlopen", down)
    with pytest.raises(CorpusError, match=r"^https://example.com/x.txt: unreachable \(Name or service not known\) after 3 attempts$"):
        fetch_corpus("https://example.com/x.txt", GOOD, tmp_path / "corpus.txt")


def test_empty_and_non_utf8_corpora(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(CorpusError, match="empty"):
        read_corpus(tmp_path / "empty.txt")
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9 au lait".encode("latin-1"))
    with pytest.raises(CorpusError, match="not UTF-8 text \\(invalid byte 0xe9 at offset 3\\)"):
        read_corpus(tmp_path / "latin1.txt")


def test_split_sizes_follow_the_study():
    text = "x" * 1_115_394  # the real corpus's length
    split = split_corpus(text, 0.9)
    assert (len(split.train), len(split.val)) == (1_003_854, 111_540)
    assert split.train + split.val == text


def test_split_refuses_a_corpus_too_small():
    with pytest.raises(CorpusError, match="fewer than 2 characters"):
        split_corpus("abc", 0.9)


def test_prepared_folder_round_trip(tmp_path, play_text):
    split = split_corpus(play_text, 0.9)
    vocabulary = character_vocabulary(play_text)
    write_prepared(split, vocabulary, tmp_path / "prepared")
    assert (tmp_path / "prepared" / "train.txt").read_bytes() == split.train.encode()
    assert (tmp_path / "prepared" / "val.txt").read_bytes() == split.val.encode()
    assert read_vocabulary(tmp_path / "prepared") == vocabulary == sorted(set(play_text))
    summary = json.loads((tmp_path / "prepared" / "vocab.json").read_text())
    assert (summary["train_chars"], summary["val_chars"], summary["size"]) == (18_000, 2_000, len(vocabulary))
    assert leftovers(tmp_path) == ["prepared"]
