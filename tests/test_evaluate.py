"""The evaluate stage's measures: a model with memory beats its stateless self; hand-worked numbers."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch

from rnnlm.data.corpus import character_vocabulary, split_corpus
from rnnlm.evaluation.context import context_curve
from rnnlm.evaluation.evaluate import first_epoch_scores, ngram_floor, predicted_chars, reset_curve
from rnnlm.models.config import ModelConfig
from rnnlm.models.language_model import RecurrentLM
from rnnlm.params import TokenizerParams, parse_params
from rnnlm.evaluation.scoring import streamed_token_nll
from rnnlm.data.tokenizers import CharTokenizer, SentencePieceTokenizer, train_sentencepiece
from tests.conftest import synthetic_play, train_model


def copy_task(blocks: int, seed: int = 0) -> str:
    """Blocks of four symbols: a key (a-d), two noise symbols (w-z), the same key again.

    The repeated key depends on the symbol three steps back, which no one-symbol context can see:
    a bigram model needs about 3 bits per symbol here, a model that remembers about 1.5.
    """
    rng = random.Random(seed)
    out = []
    for _ in range(blocks):
        key = rng.choice("abcd")
        out += [key, rng.choice("wxyz"), rng.choice("wxyz"), key]
    return "".join(out)


def test_memory_beats_the_stateless_mode_on_a_copy_task(raw_params):
    text = copy_task(3000)
    split = split_corpus(text, 0.9)
    tokenizer = CharTokenizer(character_vocabulary(text))
    raw_params["models"]["astra_alpha"].update(
        {"embd": 8, "hidden": 32, "layers": 1, "dropout": 0.0, "epochs": 4, "steps_per_epoch": 100, "lr": 1e-2})
    raw_params["train"].update({"batch_size": 32, "seq_len": 32, "device": "cpu"})
    params = parse_params(raw_params)
    result = train_model(params, "astra_alpha", tokenizer, split.train, split.val)
    model = result.checkpoint.build_model()
    val_ids = tokenizer.encode(split.val)
    chars = predicted_chars(tokenizer, split.val, val_ids)
    ids = torch.tensor(val_ids)
    carried = streamed_token_nll(model, ids)
    curve = reset_curve(model, ids, [1, 2, 4, 8, 64], chars, carried)
    stateless, stateful = curve[0].bpc, curve[-1].bpc
    bigram = ngram_floor(tokenizer.encode(split.train), val_ids, tokenizer.vocab_size, params.evaluate, chars)[2]
    assert stateful < 1.8  # near the 1.5 bits the task allows
    assert stateless > stateful + 1.0  # resetting the state throws the memory away
    assert stateless > bigram - 0.15  # and leaves a model no better than counting pairs
    assert 2.8 < bigram < 3.2
    bpcs = [p.bpc for p in curve]
    assert bpcs == sorted(bpcs, reverse=True)  # more context never hurts
    # The repeated key lies 3 symbols back: from 2 symbols of context it cannot be known, from 3 it can.
    context = context_curve(model, ids, carried, torch.ones(tokenizer.vocab_size), [1, 2, 3, 4, 8], 2000, 0, 0.01)
    assert context.horizon() >= 3
    assert context.bpc[1] > context.stateful_bpc + 0.3  # two symbols back: a quarter of the targets guessed
    assert context.bpc[2] == pytest.approx(context.stateful_bpc, rel=0.01)
    # The weights after epoch 1 are scored the same two ways; here, given the final weights as
    # epoch 1's, they must give the curve's two ends.
    as_first = dataclasses.replace(result.checkpoint, first_epoch_state=result.checkpoint.model_state)
    scores = first_epoch_scores(as_first, ids, chars, "cpu")
    assert scores["stateful_bpc"] == pytest.approx(stateful, rel=1e-9)
    assert scores["stateless_bpc"] == pytest.approx(stateless, rel=1e-9)
    epoch_1 = first_epoch_scores(result.checkpoint, ids, chars, "cpu")  # the real epoch-1 weights
    assert epoch_1["stateful_bpc"] > stateful  # three more epochs helped
    assert first_epoch_scores(dataclasses.replace(result.checkpoint, first_epoch_state=None), ids, chars, "cpu") is None


def test_bits_per_character_for_sentencepiece_by_hand():
    proto = train_sentencepiece(synthetic_play(30_000), TokenizerParams(100, "unigram", 1.0))
    tokenizer = SentencePieceTokenizer(proto)
    text = "ROMEO:\nGood night, sweet lord.\n"
    ids = tokenizer.encode(text)
    first = tokenizer.decode(ids[:1])
    chars = predicted_chars(tokenizer, text, ids)
    assert chars == len(text) - len(first) and len(ids) < chars  # pieces cover several characters
    model = RecurrentLM(ModelConfig("gru", vocab_size=100, embd=4, hidden=4, layers=1))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # uniform predictions: ln 100 nats per piece
    curve = reset_curve(model, torch.tensor(ids), [1, 4], chars, streamed_token_nll(model, torch.tensor(ids)))
    expected = (len(ids) - 1) * math.log(100) / chars / math.log(2)
    assert [p.bpc for p in curve] == pytest.approx([expected] * 3)
    assert curve[-1].k is None and curve[-1].label == "never"


def test_ngram_floor_orders(raw_params):
    params = parse_params(raw_params)
    ids = [0, 1, 0, 1, 0, 2] * 10
    floor = ngram_floor(ids, ids, 3, params.evaluate, chars=len(ids) - 1)
    assert list(floor) == [1, 2, 3, 4, 5]
    assert floor[2] < floor[1]  # the alternation is visible from one symbol back
