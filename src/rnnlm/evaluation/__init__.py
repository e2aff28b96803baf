"""Measuring a checkpoint: validation scoring with the state reset every k tokens (`scoring`), the
context curve (`context`), count n-gram floors (`ngram`), text statistics (`textstats`), and the
evaluate stage's metrics and plots (`evaluate`)."""
