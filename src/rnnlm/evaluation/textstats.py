"""Statistics of generated text, judged without the model that wrote it.

In:  texts (the generated part of each sample), the training split's word vocabulary, and a
character n-gram model counted on the training split.
Out: per text, then averaged over the texts:
  known_word_share     share of words found among the training split's words
  distinct_1/2/3       distinct word n-grams / all word n-grams (higher: less repetition)
  repeated_4gram_share share of word 4-grams that repeat one seen earlier in the same text
  char_loglik          mean ln P(character | the n - 1 before) under the count n-gram model (nats),
                       n = evaluate.ngram_max_order
  speaker_line_share   share of non-empty lines that are a `NAME:` speaker line, as the play's

Words are lowercased runs of letters with inner apostrophes ("o'er", "th'"). Every statistic is
computed on each text and averaged, so it describes text of that length, not of all texts joined.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from rnnlm.evaluation.ngram import NGramModel

WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")
SPEAKER_LINE = re.compile(r"^[A-Z][A-Za-z' ]*:$")


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def word_vocabulary(text: str) -> frozenset[str]:
    return frozenset(words(text))


def _ngrams(items: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(items[i : i + n]) for i in range(len(items) - n + 1)]


def distinct(items: Sequence[str], n: int) -> float | None:
    grams = _ngrams(items, n)
    return len(set(grams)) / len(grams) if grams else None


def repeated_share(items: Sequence[str], n: int = 4) -> float | None:
    grams = _ngrams(items, n)
    return (len(grams) - len(set(grams))) / len(grams) if grams else None


def known_share(items: Sequence[str], vocabulary: frozenset[str]) -> float | None:
    return sum(w in vocabulary for w in items) / len(items) if items else None


def speaker_line_share(text: str) -> float | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return sum(bool(SPEAKER_LINE.match(line)) for line in lines) / len(lines) if lines else None


def char_loglik(context: str, text: str, scorer: NGramModel, char_ids: dict[str, int]) -> float | None:
    """Mean ln P per character of `text` after `context`, under the character n-gram `scorer`.

    A character missing from `char_ids` (such as the "⁇" SentencePiece prints for <unk>) takes the
    id len(char_ids), which the scorer must count in its vocabulary: it has the unseen probability.
    """
    if not text:
        return None
    other = len(char_ids)
    ids = [char_ids.get(c, other) for c in context + text]
    return scorer.log_prob_sequence(ids, start=len(context)) / len(text)


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def text_statistics(
    samples: Sequence[tuple[str, str]], vocabulary: frozenset[str], scorer: NGramModel, char_ids: dict[str, int]
) -> dict[str, float | None]:
    """The statistics above, averaged over `samples` of (context, generated text)."""
    per_text = []
    for context, text in samples:
        ws = words(text)
        per_text.append({
            "known_word_share": known_share(ws, vocabulary),
            "distinct_1": distinct(ws, 1),
            "distinct_2": distinct(ws, 2),
            "distinct_3": distinct(ws, 3),
            "repeated_4gram_share": repeated_share(ws, 4),
            "char_loglik": char_loglik(context, text, scorer, char_ids),
            "speaker_line_share": speaker_line_share(text),
        })
    return {key: _mean([row[key] for row in per_text]) for key in per_text[0]} if per_text else {}
