"""`train.state: carried`: the training split as contiguous streams read in order, each window
starting from the state the previous one ended in (detached), reset at each epoch's start; the
`reset` recipe unchanged."""

from __future__ import annotations

import copy

import pytest
import torch

from rnnlm.models.checkpoint import save_checkpoint
from rnnlm.params import as_dict, parse_params, training_settings
from rnnlm.reporting.training_report import training_summary
from rnnlm.training.batches import StreamSampler
from tests.test_train import _losses, _same_weights, _train, killed_at_read, tiny_params


def carried_params(raw_params: dict, **entry):
    raw_params["models"]["astra_alpha"]["train"] = {"state": "carried"}
    return tiny_params(raw_params, **entry)


def test_the_streams_are_read_window_after_window_and_start_again_after_the_last():
    tokens = torch.arange(1000)
    sampler = StreamSampler(tokens, batch_size=4, seq_len=10, seed=0)  # streams of 250: 24 whole windows
    assert sampler.windows == 24 and torch.equal(sampler.streams[1, :3], torch.tensor([250, 251, 252]))
    sampler.position = 22
    x, y = sampler.batches(3)
    assert x.shape == y.shape == (3, 4, 10) and sampler.fresh == [False, False, True]
    assert torch.equal(x[0, 2], torch.arange(500 + 220, 500 + 230)) and torch.equal(y[0, 2], x[0, 2] + 1)
    assert torch.equal(x[1, 2], torch.arange(500 + 230, 500 + 240))  # the next window of the same stream
    assert torch.equal(x[2, 0], torch.arange(0, 10))  # after the last whole window: the stream's start
    assert sampler.position == 1
    assert len({StreamSampler(tokens, 4, 10, seed=s).position for s in range(10)}) > 1  # a run's start: its seed


def test_each_window_starts_from_the_detached_state_the_last_one_ended_in(raw_params, monkeypatch):
    from rnnlm.models.language_model import RecurrentLM

    calls = []
    forward = RecurrentLM.forward

    def recording(self, tokens, state=None):
        logits, new = forward(self, tokens, state)
        if self.training:
            calls.append((state, new))
        return logits, new

    monkeypatch.setattr(RecurrentLM, "forward", recording)
    _train(carried_params(raw_params))  # 3 epochs of 12 steps
    assert len(calls) == 36
    carried = 0
    for k, (state_in, _) in enumerate(calls):
        if k % 12 == 0:  # an epoch's first window: zeros
            assert state_in is None
        if state_in is None:  # or the first window of a new pass over the streams (once here at most)
            continue
        carried += 1
        previous_out = calls[k - 1][1]
        assert all(not t.requires_grad for t in state_in)  # detached: the gradient stops at the window
        assert all(torch.equal(a, b.detach()) for a, b in zip(state_in, previous_out))
    assert carried >= 32  # 36 windows, 3 epoch starts, at most one pass start


def test_the_reset_recipe_records_nothing_new(raw_params):
    """`state: reset` (the default) is left out of the params a checkpoint and a run's fingerprint
    record, so the runs made before it existed keep their bytes and resume files."""
    params = parse_params(raw_params)
    assert training_settings(params, "astra_alpha").state == "reset"
    assert "state" not in as_dict(params)["train"] and "train" not in as_dict(params)["models"]["astra_alpha"]
    raw_params["train"]["state"] = "reset"
    assert as_dict(parse_params(raw_params)) == as_dict(params)


def test_a_model_entry_overrides_the_shared_state_and_a_window_model_refuses_it(raw_params):
    raw_params["models"]["astra_beta"]["train"] = {"state": "carried"}
    params = parse_params(raw_params)
    assert training_settings(params, "astra_beta").state == "carried"
    assert training_settings(params, "astra_alpha").state == "reset"
    assert as_dict(params)["models"]["astra_beta"]["train"] == {"state": "carried"}
    raw_params["models"]["bengio_mlp"]["train"] = {"state": "carried"}
    with pytest.raises(Exception, match="models.bengio_mlp.train.state: 'carried' needs a recurrent model"):
        parse_params(raw_params)
    raw_params["models"]["bengio_mlp"]["train"] = {"state": "sometimes"}
    with pytest.raises(Exception, match="models.bengio_mlp.train.state: expected one of 'reset', 'carried'"):
        parse_params(raw_params)


def test_carried_and_reset_runs_differ_and_each_repeats_itself(raw_params):
    reset = _train(tiny_params(dict(raw_params)))
    carried = _train(carried_params(raw_params))
    again = _train(carried_params(raw_params))
    assert _losses(carried) != _losses(reset)
    assert _losses(carried) == _losses(again) and _same_weights(carried, again)
    assert training_summary("astra_alpha", carried)["state"] == "carried"
    assert "state" not in training_summary("astra_alpha", reset)  # the study's recipe goes unsaid, as before


def test_a_carried_run_killed_mid_epoch_resumes_to_the_same_bytes(raw_params, tmp_path, monkeypatch):
    raw_params["train"]["check_every"] = 4  # blocks end after steps 4 and 8 of each 12-step epoch
    params = carried_params(raw_params, dropout=0.2)
    whole = _train(params)
    kept = killed_at_read(params, 6, tmp_path, monkeypatch)  # epoch 2 at step 8, state and all
    assert kept["partial"]["steps"] == 8 and kept["carried_state"] is not None and "stream_position" in kept
    resumed = _train(params, resume_dir=tmp_path)
    assert _losses(resumed) == _losses(whole) and _same_weights(resumed, whole)
    paths = [tmp_path / "whole.pt", tmp_path / "resumed.pt"]
    for path, result in zip(paths, (whole, resumed)):
        save_checkpoint(path, result.checkpoint)
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_the_shared_carried_state_is_refused_for_the_window_model_alone(raw_params):
    """`train.state: carried` for every model is fine for the recurrent ones; the fixed-window model's
    settings are refused, naming the shared key (one rule, in params.py, for both places it is set)."""
    raw_params["train"]["state"] = "carried"
    params = parse_params(raw_params)
    assert training_settings(params, "astra_alpha").state == "carried"
    with pytest.raises(Exception, match=r"^train\.state: 'carried' needs a recurrent model; kind 'mlp' has no state"):
        training_settings(params, "bengio_mlp")


@pytest.mark.parametrize("recipe", ["reset", "carried"])
def test_the_parts_save_and_restore_their_whole_state_through_one_state_dict(raw_params, recipe):
    """`Parts.state_dict` / `load_state_dict` hold what a run continues from: parts built afresh and
    given the saved state go on to the same losses and weights as the parts that saved it."""
    from rnnlm.training.parts import build_parts
    from rnnlm.training.settings import run_settings
    from rnnlm.training.train import token_ids
    from tests.test_train import SPLIT, TOKENIZER

    params = (carried_params if recipe == "carried" else tiny_params)(raw_params)
    run = run_settings(params, "astra_alpha", TOKENIZER.vocab_size)
    train_ids, val_ids = token_ids(run, TOKENIZER, SPLIT.train, SPLIT.val)

    def steps(parts, n: int) -> list[float]:
        xs, ys = parts.sampler.batches(n)  # (n, B, T)
        losses = []
        for i in range(n):
            parts.start_window(i, epoch_start=False)
            losses.append(float(parts.step(xs[i], ys[i])))
        return losses

    parts = build_parts(run, train_ids, val_ids)
    steps(parts, 3)
    saved = copy.deepcopy(parts.state_dict())  # as a resume file keeps it (the dict holds the live weights)
    assert parts.carried is (recipe == "carried") and set(parts.required_keys()) <= set(saved)
    assert ("stream_position" in saved) is ("carried_state" in saved) is parts.carried
    assert parts.carried is (saved.get("carried_state") is not None)  # three windows in: a state to carry
    expected = steps(parts, 3)
    later = build_parts(run, train_ids, val_ids)  # seeds everything afresh: its own draws start again
    later.load_state_dict(saved)  # torch's generator (dropout) included
    assert steps(later, 3) == expected
    assert all(torch.equal(a, b) for a, b in zip(later.model.state_dict().values(), parts.model.state_dict().values()))
