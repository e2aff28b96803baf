"""Both tokenizers round-trip text exactly; SentencePiece training is repeatable."""

from __future__ import annotations

import pytest

from rnnlm.params import TokenizerParams
from rnnlm.data.tokenizers import (
    CharTokenizer,
    SentencePieceTokenizer,
    TokenizerError,
    load_tokenizer,
    tokenizer_from_state,
    train_sentencepiece,
    write_sentencepiece,
)
from rnnlm.data.corpus import character_vocabulary, split_corpus, write_prepared
from tests.conftest import synthetic_play

SETTINGS = TokenizerParams(vocab_size=100, model_type="unigram", character_coverage=1.0)
AWKWARD = "KING RICHARD:\n  Two  spaces,   three;\n\n\nand a trailing space \nFIRST CITIZEN:\n"


@pytest.fixture(scope="module")
def sp_model() -> bytes:
    return train_sentencepiece(split_corpus(synthetic_play(30_000), 0.9).train, SETTINGS)


def test_char_round_trip_and_identity(play_text):
    tok = CharTokenizer(character_vocabulary(play_text))
    assert tok.decode(tok.encode(play_text)) == play_text
    assert tok.vocab_size == len(set(play_text))
    assert tok.identity == CharTokenizer(sorted(set(play_text))).identity
    assert tok.identity != CharTokenizer(sorted(set(play_text + "#"))).identity


def test_char_unknown_characters_are_named():
    tok = CharTokenizer(list("abc "))
    with pytest.raises(TokenizerError, match=r"lacks: '#', 'z'$"):
        tok.encode("abz #a")


def test_sentencepiece_round_trips_validation_exactly(sp_model):
    tok = SentencePieceTokenizer(sp_model)
    val = split_corpus(synthetic_play(30_000), 0.9).val
    ids = tok.encode(val)
    assert tok.decode(ids) == val
    assert len(ids) < len(val)  # it does merge characters into pieces
    assert tok.decode(tok.encode(AWKWARD)) == AWKWARD  # newlines, space runs, labels
    assert tok.vocab_size == 100


def test_sentencepiece_newline_is_its_own_piece(sp_model):
    tok = SentencePieceTokenizer(sp_model)
    assert tok.encode("\n\n") == [tok.encode("\n")[0]] * 2


def test_sentencepiece_training_is_repeatable(sp_model):
    again = train_sentencepiece(split_corpus(synthetic_play(30_000), 0.9).train, SETTINGS)
    assert again == sp_model
    assert SentencePieceTokenizer(again).identity == SentencePieceTokenizer(sp_model).identity


def test_sentencepiece_unknown_characters_are_named(sp_model):
    with pytest.raises(TokenizerError, match="lacks: '@'"):
        SentencePieceTokenizer(sp_model).encode("ROMEO: @home")


def test_sentencepiece_too_large_vocabulary_is_a_clear_error():
    with pytest.raises(TokenizerError, match=r"training failed: Vocabulary size too high .*tokenizer.vocab_size is 100\)$"):
        train_sentencepiece("tiny text\n", SETTINGS)


def test_load_tokenizer_for_both_kinds(tmp_path, sp_model):
    text = synthetic_play(30_000)
    write_prepared(split_corpus(text, 0.9), character_vocabulary(text), tmp_path / "prepared")
    write_sentencepiece(sp_model, tmp_path / "tokenizer")
    assert load_tokenizer("char", tmp_path / "prepared", tmp_path / "tokenizer").vocab_size == len(set(text))
    assert load_tokenizer("sentencepiece", tmp_path / "prepared", tmp_path / "tokenizer").vocab_size == 100
    with pytest.raises(TokenizerError, match="run the tokenizer stage"):
        load_tokenizer("sentencepiece", tmp_path / "prepared", tmp_path / "elsewhere")
    with pytest.raises(TokenizerError, match="not a SentencePiece model"):
        SentencePieceTokenizer(b"garbage")


def test_state_rebuilds_the_same_tokenizer(sp_model, play_text):
    for tok in (CharTokenizer(character_vocabulary(play_text)), SentencePieceTokenizer(sp_model)):
        again = tokenizer_from_state(tok.state())
        assert again.identity == tok.identity
        assert again.encode(AWKWARD.replace("@", "")) == tok.encode(AWKWARD.replace("@", ""))
    with pytest.raises(TokenizerError, match="unknown tokenizer kind 'bytes'"):
        tokenizer_from_state({"kind": "bytes"})
    with pytest.raises(TokenizerError, match="incomplete tokenizer state"):
        tokenizer_from_state({"kind": "char"})
