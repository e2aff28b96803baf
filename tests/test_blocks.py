"""The validation blocks: each scorer's nats summed per 2,048 characters by offset, the same blocks for
either tokenizer, and extra accumulators that leave the run's totals as they were."""

from __future__ import annotations

import math

import pytest
import torch

from rnnlm.data.corpus import split_corpus
from rnnlm.evaluation.blocks import BLOCK_CHARS, block_sums, blocks_csv, read_blocks, token_starts
from rnnlm.evaluation.evaluate import evaluate, first_epoch_scores, ngram_floor, predicted_chars, reset_curve
from rnnlm.evaluation.scoring import streamed_token_nll, windowed_nll, windowed_total
from rnnlm.inference.generation import run_generations
from rnnlm.models.checkpoint import load_checkpoint
from rnnlm.params import parse_params
from tests.conftest import synthetic_play


def test_a_token_counts_whole_in_the_block_its_first_character_falls_in():
    lengths = torch.tensor([2047, 3, 2046, 1, 5])  # token 1 starts at 2047 and ends in block 1
    losses = {"x": torch.tensor([1.0, 10.0, 100.0, 1000.0])}  # tokens 1..4
    table = block_sums(lengths, 4102, losses)
    assert table.first_char == [0, 2048, 4096]
    assert token_starts(lengths).tolist() == [0, 2047, 2050, 4096, 4097]
    assert table.tokens == [1, 1, 2] and table.chars == [3, 2046, 6]
    assert table.nats == {"x": [1.0, 10.0, 1100.0]}
    assert read_blocks(blocks_csv(table)) == table


def test_tokens_that_do_not_cover_the_text_are_refused():
    with pytest.raises(ValueError, match="span 10 characters, not the text's 11"):
        block_sums(torch.tensor([5, 5]), 11, {})


def test_a_table_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a table of validation blocks"):
        read_blocks("a,b\n1,2\n")
    with pytest.raises(ValueError, match="numbered"):
        read_blocks("block,first_char,chars,tokens,x_nats\n1,0,3,1,0.5\n")


@pytest.mark.parametrize("fixture", ["char_checkpoint", "sentencepiece_checkpoint"])
def test_the_blocks_add_up_to_the_totals_and_the_totals_are_unchanged(raw_params, request, fixture):
    """The sums over blocks give each total (to float32's rounding: the stateless total is summed in
    float32 per batch of windows, the blocks from each token's loss in float64), the blocks
    are the same 2,048-character spans for a character and a SentencePiece model, and the totals of
    metrics.json are bit for bit what the scorers give without the extra accumulators."""
    checkpoint = load_checkpoint(request.getfixturevalue(fixture))
    raw_params["evaluate"].update({"reset_every": [1, 4], "ngram_max_order": 2, "context_lengths": [1, 2],
                                   "context_targets": 50})
    raw_params["generate"].update({"max_new_tokens": 10, "prompts": ["ROMEO: "]})
    params = parse_params(raw_params)
    split = split_corpus(synthetic_play(30_000), 0.9)
    generations = run_generations(checkpoint, request.getfixturevalue(fixture), params.generate, params.seed)
    metrics, _, _, blocks = evaluate(checkpoint, split.train, split.val, generations, params.evaluate, params.seed)
    assert blocks.first_char == list(range(0, len(split.val), BLOCK_CHARS))
    assert sum(blocks.tokens) == metrics["val_tokens"] and sum(blocks.chars) == metrics["val_chars"]
    for name, key in (("stateful", "stateful_bpc"), ("stateless", "stateless_bpc"), ("bigram", "bigram_bpc")):
        assert math.isclose(sum(blocks.nats[name]) / metrics["val_chars"] / math.log(2), metrics[key], rel_tol=1e-6)
    assert "first_epoch_stateful" not in blocks.nats  # an untrained checkpoint keeps no epoch 1

    tokenizer, model = checkpoint.tokenizer(), checkpoint.build_model()
    val_ids = tokenizer.encode(split.val)
    ids, chars = torch.tensor(val_ids), predicted_chars(tokenizer, split.val, val_ids)
    carried = streamed_token_nll(model, ids)
    assert reset_curve(model, ids, [1, 4], chars, carried)[0].bpc == metrics["stateless_bpc"]
    assert ngram_floor(tokenizer.encode(split.train), val_ids, tokenizer.vocab_size, params.evaluate,
                       chars)[2] == metrics["bigram_bpc"]
    per_token = torch.empty_like(carried)
    assert windowed_total(model, ids, 1, token_nll=per_token).item() == windowed_nll(model, ids, 1).nats
    assert math.isclose(per_token.double().sum().item(), windowed_nll(model, ids, 1).nats, rel_tol=1e-6)


def test_the_first_epochs_scores_are_unchanged_by_the_accumulators(raw_params):
    from tests.test_train import TOKENIZER, SPLIT, _train, tiny_params

    result = _train(tiny_params(raw_params))
    ids = torch.tensor(TOKENIZER.encode(SPLIT.val))
    chars = predicted_chars(TOKENIZER, SPLIT.val, ids.tolist())
    losses: dict[str, torch.Tensor] = {}
    scores = first_epoch_scores(result.checkpoint, ids, chars, "cpu", losses)
    model = result.checkpoint.build_model(first_epoch=True)
    assert scores["stateless_bpc"] == windowed_nll(model, ids, 1).bits_per_char(chars)
    assert set(losses) == {"first_epoch_stateful", "first_epoch_stateless"}
    assert losses["first_epoch_stateful"].shape == (ids.numel() - 1,)
