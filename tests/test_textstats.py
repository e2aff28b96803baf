"""Every text statistic on a hand-made text."""

from __future__ import annotations

import math

import pytest

from rnnlm.evaluation.ngram import NGramModel
from rnnlm.evaluation.textstats import (
    char_loglik,
    distinct,
    known_share,
    repeated_share,
    speaker_line_share,
    text_statistics,
    word_vocabulary,
    words,
)

TEXT = "ROMEO:\nThe son, the son, the son o'er all.\n\nKING RICHARD:\nAway!\n"


def test_words_keep_inner_apostrophes_and_fold_case():
    assert words(TEXT) == ["romeo", "the", "son", "the", "son", "the", "son", "o'er", "all", "king", "richard", "away"]


def test_distinct_and_repeats_by_hand():
    ws = ["the", "son", "the", "son", "the", "son"]
    assert distinct(ws, 1) == pytest.approx(2 / 6)
    assert distinct(ws, 2) == pytest.approx(2 / 5)  # (the son), (son the)
    assert distinct(ws, 3) == pytest.approx(2 / 4)
    assert repeated_share(ws, 4) == pytest.approx(1 / 3)  # 3 four-grams, 2 distinct
    assert distinct([], 1) is None and repeated_share(["a", "b"], 4) is None


def test_known_word_share():
    vocabulary = word_vocabulary("The son of York. O'er the hills.")
    assert known_share(["the", "son", "xyzzy", "o'er"], vocabulary) == pytest.approx(3 / 4)


def test_speaker_lines():
    # non-empty lines: "ROMEO:", "The son, ...", "KING RICHARD:", "Away!" -> 2 of 4
    assert speaker_line_share(TEXT) == pytest.approx(0.5)
    assert speaker_line_share("ROMEO: I speak on this line.\n") == 0.0
    assert speaker_line_share("\n\n") is None


def test_char_loglik_under_a_uniform_scorer():
    char_ids = {c: i for i, c in enumerate("ab")}
    scorer = NGramModel([0, 1], order=2, vocab_size=2)
    got = char_loglik("a", "bab", scorer, char_ids)
    expected = scorer.log_prob_sequence([0, 1, 0, 1], start=1) / 3
    assert got == pytest.approx(expected)
    assert got < 0 and got > -math.log(2) * 3


def test_char_loglik_scores_characters_the_corpus_lacks():
    char_ids = {c: i for i, c in enumerate("ab")}
    scorer = NGramModel([0, 1, 0, 1], order=2, vocab_size=3)  # id 2: any other character
    got = char_loglik("a", "b\u2047", scorer, char_ids)
    assert got == pytest.approx(scorer.log_prob_sequence([0, 1, 2], start=1) / 2)


def test_text_statistics_average_over_texts():
    char_ids = {c: i for i, c in enumerate(sorted(set(TEXT + "x")))}
    scorer = NGramModel([char_ids[c] for c in TEXT], order=3, vocab_size=len(char_ids))
    stats = text_statistics([("", "the son the son"), ("", "all away")], word_vocabulary(TEXT), scorer, char_ids)
    assert stats["known_word_share"] == pytest.approx(1.0)
    assert stats["distinct_1"] == pytest.approx((2 / 4 + 2 / 2) / 2)
    assert stats["repeated_4gram_share"] == pytest.approx(0.0)  # only the first text has a 4-gram
    assert stats["speaker_line_share"] == pytest.approx(0.0)
