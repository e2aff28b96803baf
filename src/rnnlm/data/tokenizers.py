"""Characters and SentencePiece pieces behind one interface.

A tokenizer turns text into a list of ids (`encode`) and back (`decode`) exactly, knows its
`vocab_size`, and has an `identity` (kind, size, sha256 of its vocabulary) that a checkpoint records
so that a model is never sampled through another tokenizer than the one it was trained with.
"""

from __future__ import annotations

import hashlib
import io
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm

from rnnlm.atomic import write_bytes_atomic
from rnnlm.data.corpus import read_vocabulary
from rnnlm.errors import RnnlmError
from rnnlm.params_base import TokenizerParams

SENTENCEPIECE_FILE = "spm.model"


class TokenizerError(RnnlmError):
    """Text the tokenizer cannot encode, or a tokenizer file that cannot be used."""


def _unknown_error(missing: set[str]) -> TokenizerError:
    shown = ", ".join(repr(c) for c in sorted(missing)[:20])
    more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
    return TokenizerError(f"the text has characters the vocabulary lacks: {shown}{more}")


class Tokenizer(ABC):
    """Text to ids and back, exactly."""

    kind: str

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Ids of `text`; a TokenizerError naming any characters the vocabulary lacks."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`."""

    @abstractmethod
    def _fingerprint(self) -> bytes:
        """The bytes that define this vocabulary."""

    @abstractmethod
    def state(self) -> dict[str, object]:
        """Everything needed to rebuild this tokenizer (a checkpoint embeds it): see `tokenizer_from_state`."""

    @property
    def identity(self) -> dict[str, object]:
        """What a checkpoint records: kind, vocabulary size, sha256 of the vocabulary."""
        digest = hashlib.sha256(self._fingerprint()).hexdigest()
        return {"kind": self.kind, "vocab_size": self.vocab_size, "sha256": digest}


class CharTokenizer(Tokenizer):
    """One id per character, in the order of `chars` (the sorted characters of the corpus)."""

    kind = "char"

    def __init__(self, chars: Sequence[str]):
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise TokenizerError("a character vocabulary must list distinct single characters")
        self.chars = list(chars)
        self._index = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._index[c] for c in text]
        except KeyError:
            raise _unknown_error(set(text) - self._index.keys()) from None

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def _fingerprint(self) -> bytes:
        return "".join(self.chars).encode("utf-8")

    def state(self) -> dict[str, object]:
        return {"kind": self.kind, "chars": list(self.chars)}


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model, configured (see `train_sentencepiece`) to round-trip text exactly."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        self._proto = model_proto
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        except RuntimeError as error:
            raise TokenizerError(f"not a SentencePiece model ({error})") from error

    @classmethod
    def load(cls, path: str | Path) -> SentencePieceTokenizer:
        try:
            return cls(Path(path).read_bytes())
        except OSError as error:
            raise TokenizerError(f"{path}: cannot read ({error.strerror or error}); run the tokenizer stage") from error

    @property
    def vocab_size(self) -> int:
        return self._sp.vocab_size()

    def encode(self, text: str) -> list[int]:
        ids = self._sp.encode(text)
        unk = self._sp.unk_id()
        if unk in ids:
            raise _unknown_error({c for c in text if self._sp.piece_to_id(c.replace(" ", "\u2581")) == unk})
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.decode(list(ids))

    def _fingerprint(self) -> bytes:
        return self._proto

    def state(self) -> dict[str, object]:
        return {"kind": self.kind, "model": self._proto}


def train_sentencepiece(train_text: str, settings: TokenizerParams) -> bytes:
    """Train a SentencePiece model on `train_text`; return the serialised model.

    Normalisation is off and whitespace kept, so decode(encode(text)) == text byte for byte:
    runs of spaces stay, no dummy space is prefixed, and a newline is a piece of its own (the
    trainer reads one sentence per line, so lines are fed with their newline attached). No BOS or
    EOS pieces: the vocabulary is <unk>, the newline, and what the trainer learns. The model is
    written to memory, not to a prefix, because the prefix would be recorded in the model and make
    two trainings on the same text differ.
    """
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(train_text.splitlines(keepends=True)),
            model_writer=model,
            vocab_size=settings.vocab_size,
            model_type=settings.model_type,
            character_coverage=settings.character_coverage,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            add_dummy_prefix=False,
            allow_whitespace_only_pieces=True,
            user_defined_symbols=["\n"],
            bos_id=-1,
            eos_id=-1,
            minloglevel=2,
        )
    except RuntimeError as error:
        reason = str(error).rsplit("] ", 1)[-1]  # drop the C++ source location
        raise TokenizerError(
            f"SentencePiece training failed: {reason} (tokenizer.vocab_size is {settings.vocab_size})"
        ) from error
    return model.getvalue()


def write_sentencepiece(model_proto: bytes, out_dir: str | Path) -> Path:
    """Write the model as `out_dir/spm.model` atomically; return its path."""
    path = Path(out_dir) / SENTENCEPIECE_FILE
    write_bytes_atomic(path, model_proto)
    return path


def load_tokenizer(kind: str, prepared_dir: str | Path, tokenizer_dir: str | Path) -> Tokenizer:
    """The tokenizer a model of token kind `kind` ("char" or "sentencepiece") uses."""
    if kind == "char":
        return CharTokenizer(read_vocabulary(prepared_dir))
    if kind == "sentencepiece":
        return SentencePieceTokenizer.load(Path(tokenizer_dir) / SENTENCEPIECE_FILE)
    raise TokenizerError(f"unknown token kind {kind!r}; expected 'char' or 'sentencepiece'")


def tokenizer_from_state(state: dict[str, object]) -> Tokenizer:
    """The tokenizer that `Tokenizer.state()` described."""
    try:
        if state["kind"] == "char":
            return CharTokenizer(state["chars"])  # type: ignore[arg-type]
        if state["kind"] == "sentencepiece":
            return SentencePieceTokenizer(state["model"])  # type: ignore[arg-type]
    except (KeyError, TypeError) as error:
        raise TokenizerError(f"incomplete tokenizer state ({error})") from error
    raise TokenizerError(f"unknown tokenizer kind {state.get('kind')!r}; expected 'char' or 'sentencepiece'")
