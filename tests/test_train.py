"""Training: the loss falls, seeded runs repeat, an interrupted run resumes to the same end."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from rnnlm.data.corpus import character_vocabulary, split_corpus
from rnnlm.params import as_dict, parse_params
from rnnlm.data.tokenizers import CharTokenizer
from rnnlm.models.kinds import build_model
from rnnlm.training.resume import ResumeStore, read_resume_file
from rnnlm.evaluation.scoring import batch_nll
from rnnlm.errors import TrainingError
from rnnlm.training.batches import WindowSampler, val_batch_seed
from rnnlm.training.settings import run_settings, steps_per_epoch
from rnnlm.training.parts import build_parts
from rnnlm.training.train import train
from rnnlm.training.step import LossLog, NonFiniteLoss, make_optimizer
from rnnlm.compute import backend
from rnnlm.reporting.training_report import training_summary
from rnnlm_study.study_run import StudyRun
from tests.conftest import synthetic_play, train_model

TEXT = synthetic_play(12_000)
SPLIT = split_corpus(TEXT, 0.9)
TOKENIZER = CharTokenizer(character_vocabulary(TEXT))


def tiny_params(raw_params: dict, **entry) -> object:
    raw_params["models"]["astra_alpha"].update(
        {"embd": 8, "hidden": 24, "layers": 1, "epochs": 3, "steps_per_epoch": 12, "lr": 1e-2, **entry})
    raw_params["train"].update({"batch_size": 8, "seq_len": 24, "device": "cpu"})
    return parse_params(raw_params)


def _train(params, **record):
    return train_model(params, "astra_alpha", TOKENIZER, SPLIT.train, SPLIT.val, **record)


def _losses(result):
    return [r["train_loss"] for r in result.history.steps], [r["val_loss"] for r in result.history.epochs]


def _same_weights(a, b) -> bool:
    return all(torch.equal(a.checkpoint.model_state[k], b.checkpoint.model_state[k]) for k in a.checkpoint.model_state)


def test_tiny_model_loss_falls(raw_params):
    result = _train(tiny_params(raw_params))
    steps, vals = _losses(result)
    assert len(steps) == 36 and len(vals) == 3
    assert sum(steps[-5:]) / 5 < steps[0] - 0.8  # from ~ln(vocab) to well below
    assert vals[-1] < vals[0]
    assert result.checkpoint.step == 36 and result.checkpoint.epoch == 3
    assert result.checkpoint.tokenizer().identity == TOKENIZER.identity
    assert [r["lr"] for r in result.history.epochs] == pytest.approx([1e-2, 7.5e-3, 2.5e-3])  # cosine, per epoch


def test_seeded_runs_are_identical(raw_params):
    a = _train(tiny_params(raw_params, dropout=0.2))
    b = _train(tiny_params(raw_params, dropout=0.2))
    assert _losses(a) == _losses(b)
    assert _same_weights(a, b)
    raw_params["seed"] += 1
    c = _train(tiny_params(raw_params, dropout=0.2))
    assert _losses(c) != _losses(a)


def test_the_checkpoint_keeps_the_weights_after_epoch_1(raw_params):
    whole = _train(tiny_params(raw_params, dropout=0.2))
    one_epoch = _train(tiny_params(raw_params, dropout=0.2, epochs=1))  # epoch 1 runs at the same lr
    kept = whole.checkpoint.first_epoch_state
    assert kept.keys() == whole.checkpoint.model_state.keys()
    assert all(torch.equal(kept[k], one_epoch.checkpoint.model_state[k]) for k in kept)
    assert not all(torch.equal(kept[k], whole.checkpoint.model_state[k]) for k in kept)


class Interrupted(Exception):
    pass


def test_interrupted_run_resumes_to_the_same_end(raw_params, tmp_path, capsys):
    params = tiny_params(raw_params, dropout=0.2)
    whole = _train(params)

    def stop_after_first(epoch):
        if epoch == 1:
            raise Interrupted

    with pytest.raises(Interrupted):
        _train(params, resume_dir=tmp_path, on_epoch_end=stop_after_first)
    assert len(list(tmp_path.glob("astra_alpha-*.pt"))) == 1
    resumed = _train(params, resume_dir=tmp_path)
    assert "resuming astra_alpha after epoch 1" in capsys.readouterr().out
    assert _losses(resumed) == _losses(whole)
    assert _same_weights(resumed, whole)
    kept = resumed.checkpoint.first_epoch_state  # restored from the resume file, not retaken
    assert all(torch.equal(kept[k], whole.checkpoint.first_epoch_state[k]) for k in kept)
    assert resumed.checkpoint.optimizer_state["state"][0]["step"] == whole.checkpoint.optimizer_state["state"][0]["step"]
    assert resumed.resume.path.is_file()  # kept until the caller has written every output
    assert [(m["processor"], m["gemm"], m["from_epoch"]) for m in resumed.machines] == [
        (resumed.processor, resumed.gemm, 1)]  # one machine: nothing to tell apart
    again = _train(params, resume_dir=tmp_path)  # as if writing the checkpoint had failed: no epoch is trained again
    assert "resuming astra_alpha after epoch 3" in capsys.readouterr().out
    assert _losses(again) == _losses(whole) and _same_weights(again, whole) and again.seconds == resumed.seconds
    again.resume.clear()
    assert not list(tmp_path.iterdir())


def test_a_run_interrupted_on_one_gemm_library_goes_on_with_another_and_says_so(raw_params, tmp_path, capsys):
    """A long run lands on whatever CPU the next session has: it resumes from its file there, and its
    training metrics, the study folder's provenance and runs.csv's machine column name both
    machines and the epoch the second took over at."""
    params = tiny_params(raw_params, hidden=256)  # products past MIN_ONEDNN_MACS: oneDNN really runs them

    def stop_after_first(epoch):
        if epoch == 1:
            raise Interrupted

    previous = backend.use_gemm(backend.Gemms.parse("mkl"))
    try:
        with pytest.raises(Interrupted):
            _train(params, resume_dir=tmp_path, on_epoch_end=stop_after_first)
        backend.use_gemm(backend.Gemms.parse("onednn"))
        resumed = _train(params, resume_dir=tmp_path)
    finally:
        backend.use_gemm(previous)
    out = capsys.readouterr().out
    assert "resuming astra_alpha after epoch 1" in out
    assert "with mkl so far and goes on here on" in out and "with onednn: the last bits" in out
    assert [(m["gemm"], m["from_epoch"], m["from_step"]) for m in resumed.machines] == [("mkl", 1, 0), ("onednn", 2, 0)]
    assert len(resumed.history.epochs) == 3 and resumed.gemm == "onednn"
    summary = training_summary("astra_alpha", resumed)
    assert summary["machines"] == resumed.machines
    run = StudyRun("astra_alpha", 1337, Path("."), False, {}, summary, {}, {"machines": summary["machines"]}, ())
    assert run.where() == f"cpu: {resumed.processor}; cpu: {resumed.processor} from epoch 2"


def killed_at_read(params, reads: int, resume_dir: Path, monkeypatch) -> dict:
    """Train `params` with a resume file saved at every block and stop it at the `reads`-th reading
    of the losses (a block's end), as a kill would; returns what the resume file kept."""
    real_read, done = LossLog.read, []

    def read_then_stop(log):
        done.append(1)
        if len(done) == reads:
            raise Interrupted
        return real_read(log)

    monkeypatch.setattr(LossLog, "read", read_then_stop)
    with pytest.raises(Interrupted):
        _train(params, resume_dir=resume_dir, save_every_s=0.0)
    monkeypatch.setattr(LossLog, "read", real_read)
    return read_resume_file(next(resume_dir.glob("astra_alpha-*.pt")))[1]


def test_run_interrupted_inside_an_epoch_resumes_from_its_last_block(raw_params, tmp_path, capsys, monkeypatch):
    raw_params["train"]["check_every"] = 4  # 12 steps an epoch: blocks end after steps 4 and 8 inside it
    params = tiny_params(raw_params, dropout=0.2)
    whole = _train(params)
    kept = killed_at_read(params, 6, tmp_path, monkeypatch)  # epoch 2's last block: the file holds epoch 2 at step 8
    assert kept["epoch"] == 1 and kept["partial"]["steps"] == 8 and len(kept["partial"]["losses"]) == 8
    assert len(kept["history_steps"]) == 20
    resumed = _train(params, resume_dir=tmp_path)
    assert "resuming astra_alpha at step 8/12 of epoch 2" in capsys.readouterr().out
    assert _losses(resumed) == _losses(whole)
    assert [r["train_loss"] for r in resumed.history.epochs] == [r["train_loss"] for r in whole.history.epochs]
    assert [r["step"] for r in resumed.history.steps] == list(range(1, 37))
    assert _same_weights(resumed, whole)
    assert all(torch.equal(resumed.checkpoint.first_epoch_state[k], whole.checkpoint.first_epoch_state[k])
               for k in whole.checkpoint.first_epoch_state)


def test_runs_of_one_model_with_other_params_keep_their_own_resume_files(raw_params, tmp_path, capsys):
    def stop(epoch):
        raise Interrupted

    interrupted = tiny_params(raw_params)
    with pytest.raises(Interrupted):
        _train(interrupted, resume_dir=tmp_path, on_epoch_end=stop)
    (kept,) = tmp_path.iterdir()
    before = kept.read_bytes()
    raw_params["seed"] += 1
    other = tiny_params(raw_params)
    quick = _train(other, resume_dir=tmp_path)  # another seed of the same model, run to its end meanwhile
    assert quick.resume.path != kept and kept.read_bytes() == before
    assert _losses(quick) == _losses(_train(other))
    resumed = _train(interrupted, resume_dir=tmp_path)
    assert "resuming astra_alpha after epoch 1" in capsys.readouterr().out
    assert _losses(resumed) == _losses(_train(interrupted))


def test_non_finite_loss_names_the_step_and_drops_the_resume_file(raw_params, tmp_path, monkeypatch):
    """Resumed from its last save, the run would reach the same loss again: its file is removed."""
    real = torch.nn.functional.cross_entropy
    calls = []

    def poisoned(*args, **kwargs):
        loss = real(*args, **kwargs)
        if kwargs.get("reduction", "mean") != "mean":  # validation sums; only training steps count
            return loss
        calls.append(1)
        return loss * float("nan") if len(calls) == 15 else loss  # step 15 = epoch 2, step 3

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", poisoned)
    real_save, saved = ResumeStore.save, []
    monkeypatch.setattr(ResumeStore, "save", lambda self, state, epochs: saved.append(state["epoch"]) or
                        real_save(self, state, epochs))
    with pytest.raises(TrainingError, match=r"non-finite training loss \(nan\) at step 15 \(epoch 2\); expected "
                                            r"finite losses .*its resume file is removed, so a rerun starts afresh$"):
        _train(tiny_params(raw_params), resume_dir=tmp_path)
    assert saved == [1] and list(tmp_path.iterdir()) == []  # epoch 1 was saved, then dropped


def test_steps_scale():
    assert steps_per_epoch(200, 1.0) == 200
    assert steps_per_epoch(200, 0.01) == 2
    assert steps_per_epoch(200, 0.001) == 1


def test_window_sampler_shapes_and_shift():
    tokens = torch.arange(100)
    x, y = WindowSampler(tokens, batch_size=5, seq_len=10, seed=0).batches(3)
    assert x.shape == y.shape == (3, 5, 10)
    assert torch.equal(y, x + 1)
    assert int(y.max()) <= 99
    with pytest.raises(TrainingError, match="needs at least 11"):
        WindowSampler(torch.arange(10), batch_size=2, seq_len=10, seed=0)


def test_params_round_trip_through_the_checkpoint(raw_params):
    params = tiny_params(raw_params)
    result = _train(params)
    assert parse_params(result.checkpoint.params) == params
    assert as_dict(params) == result.checkpoint.params


def test_a_block_of_batches_is_the_same_windows_as_one_batch_at_a_time():
    tokens = torch.arange(1000)
    block = WindowSampler(tokens, batch_size=4, seq_len=16, seed=3).batches(5)
    one_by_one = WindowSampler(tokens, batch_size=4, seq_len=16, seed=3)
    singles = [one_by_one.batches(1) for _ in range(5)]
    for k in range(2):
        assert torch.equal(block[k], torch.cat([s[k] for s in singles]))


def test_training_is_bit_identical_to_a_loop_that_reads_every_loss(raw_params):
    """The sync-free step (losses read in blocks, masks without host tensors) changes no bit on the
    CPU: the same weights as the plain loop that reads each loss before the next step."""
    params = tiny_params(raw_params, dropout=0.2)
    result = _train(params)

    entry, settings = params.models["astra_alpha"], params.train
    torch.manual_seed(params.seed)
    model = build_model(entry.model_config(TOKENIZER.vocab_size))
    optimizer = make_optimizer(model, entry.lr, settings.weight_decay, torch.device("cpu"), graph=False)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=entry.epochs)
    train_ids = torch.tensor(TOKENIZER.encode(SPLIT.train))
    generator = torch.Generator().manual_seed(params.seed)
    offsets = torch.arange(settings.seq_len + 1)
    losses = []
    for _ in range(entry.epochs):
        model.train()
        for _ in range(entry.steps_per_epoch):
            starts = torch.randint(train_ids.numel() - settings.seq_len, (settings.batch_size,), generator=generator)
            chunk = train_ids[starts[:, None] + offsets]
            logits, _ = model(chunk[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            losses.append(loss.item())
            optimizer.step()
        scheduler.step()
    assert _losses(result)[0] == losses
    for key, value in model.state_dict().items():
        assert torch.equal(result.checkpoint.model_state[key], value), key


def test_loss_log_reads_in_blocks_and_names_the_first_bad_step():
    log = LossLog(4, torch.device("cpu"), first_step=11)
    for value in (2.0, 1.5):
        log.record(torch.tensor(value))
    assert log.read() == [2.0, 1.5]
    for value in (1.0, float("inf"), float("nan")):
        log.record(torch.tensor(value))
    with pytest.raises(NonFiniteLoss, match=r"non-finite training loss \(inf\) at step 14"):
        log.read()


def test_losses_are_read_every_check_every_steps(raw_params, monkeypatch):
    reads = []
    real_read = LossLog.read

    def counting_read(self):
        reads.append(self.count)
        return real_read(self)

    monkeypatch.setattr(LossLog, "read", counting_read)
    raw_params["train"]["check_every"] = 5
    result = _train(tiny_params(raw_params))
    assert reads == [5, 5, 2] * 3  # 12 steps an epoch: two full blocks and the rest at the epoch's end
    assert len(result.history.steps) == 36


def test_no_progress_bar_when_the_output_is_not_a_terminal(raw_params, capsys):
    params = tiny_params(raw_params)
    train(run_settings(params, "astra_alpha", TOKENIZER.vocab_size), TOKENIZER, SPLIT.train, SPLIT.val)  # not a tty
    out, err = capsys.readouterr()
    assert "it/s" not in err and "%|" not in err
    assert [line.split(" | ")[0] for line in out.splitlines()] == [f"astra_alpha epoch {e:02d}/3" for e in (1, 2, 3)]


def test_the_progress_bar_follows_each_epoch_on_a_terminal_and_not_when_asked_off(raw_params, capsys, monkeypatch):
    params = tiny_params(raw_params, epochs=2)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    train(run_settings(params, "astra_alpha", TOKENIZER.vocab_size), TOKENIZER, SPLIT.train, SPLIT.val)
    err = capsys.readouterr().err
    assert err.count("astra_alpha epoch 1/2") >= 1 and err.count("astra_alpha epoch 2/2") >= 1
    assert "12/12" in err and "loss=" in err and "tok_s=" in err  # every step of an epoch, with its loss and rate
    _train(params)  # RunRecord(bar=False)
    assert "astra_alpha epoch 1/2" not in capsys.readouterr().err


def test_a_sequence_longer_than_the_validation_split_is_refused_before_training(raw_params):
    tiny_params(raw_params)  # the tiny model and settings, written into raw_params
    n_val = len(TOKENIZER.encode(SPLIT.val))
    raw_params["train"]["seq_len"] = n_val
    with pytest.raises(TrainingError, match=rf"train.seq_len {n_val} is longer than the validation split "
                                            rf"\({n_val} tokens\) can fill once; expected at most {n_val - 1}"):
        _train(parse_params(raw_params))


def test_the_optimizer_is_the_fused_adamw_on_the_cpu(raw_params):
    """The fused update (one pass per parameter) is a speed choice the docs quote; pin it, and that
    it computes AdamW's update as the default implementation does, to float32 rounding."""
    torch.manual_seed(0)
    entry = tiny_params(raw_params).models["astra_alpha"]
    models = [build_model(entry.model_config(TOKENIZER.vocab_size)) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    fused = make_optimizer(models[0], 1e-2, 0.1, torch.device("cpu"), graph=False)
    plain = torch.optim.AdamW(models[1].parameters(), lr=1e-2, weight_decay=0.1)
    assert fused.defaults["fused"] is True and not plain.defaults["fused"]
    x = torch.randint(TOKENIZER.vocab_size, (4, 16))
    for step in range(3):
        for model, optimizer in zip(models, (fused, plain)):
            torch.manual_seed(step)  # the same dropout masks for both
            optimizer.zero_grad()
            model(x)[0].square().mean().backward()
            optimizer.step()
    for key, value in models[0].state_dict().items():
        torch.testing.assert_close(value, models[1].state_dict()[key], rtol=1e-5, atol=1e-6)


def test_each_epoch_records_the_studys_one_batch_estimator(raw_params):
    """Beside the whole split, the study's estimator: the loss on one random validation batch a
    epoch, from a generator of its own (training itself is unchanged: the plain-loop test above
    holds the weights to a loop that never draws it)."""
    params = tiny_params(raw_params, dropout=0.2)
    result = _train(params)
    settings = params.train
    val_ids = torch.tensor(TOKENIZER.encode(SPLIT.val))
    draws = WindowSampler(val_ids, settings.batch_size, settings.seq_len, val_batch_seed(params.seed))
    batches = [draws.batches(1) for _ in result.history.epochs]  # each (1, B, T)
    recorded = [row["val_batch_loss"] for row in result.history.epochs]
    for epoch, weights in ((1, result.checkpoint.first_epoch_state), (3, result.checkpoint.model_state)):
        model = build_model(params.models["astra_alpha"].model_config(TOKENIZER.vocab_size))
        model.load_state_dict(weights)
        x, y = batches[epoch - 1]
        assert recorded[epoch - 1] == batch_nll(model, x[0], y[0])
    assert len(set(recorded)) == 3 and all(r != row["val_loss"] for r, row in zip(recorded, result.history.epochs))


def test_the_random_validation_batch_holds_at_most_the_splits_whole_windows(raw_params):
    """A quick run's validation text is short (`rnnlm.scale`): its random batch is cut to the text's
    whole windows instead of scoring the same tokens several times over; a long split keeps the batch."""
    params = tiny_params(raw_params)
    run = run_settings(params, "astra_alpha", TOKENIZER.vocab_size)
    train_ids = torch.tensor(TOKENIZER.encode(SPLIT.train))
    batch, length = run.train.batch_size, run.train.seq_len  # 8 windows of 24 tokens
    for val_chars, windows in ((1200, batch), (24 * 3 + 1, 3), (24 * 3, 2), (25, 1)):
        val_ids = torch.tensor(TOKENIZER.encode(SPLIT.val[:val_chars]))
        x, y = build_parts(run, train_ids, val_ids).val_batches.batches(1)
        assert x.shape == y.shape == (1, windows, length)


def test_a_quick_run_saves_its_state_on_the_clock_not_after_every_epoch(raw_params, tmp_path):
    """Writing the whole state after each epoch took a tenth of a quick run's time: below full scale
    the resume file is written every save_every_s only (a full run still saves every epoch)."""
    raw_params["train"]["steps_scale"] = 0.5
    params = tiny_params(raw_params)

    def stop_after_second(epoch):
        if epoch == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        _train(params, resume_dir=tmp_path / "hourly", on_epoch_end=stop_after_second, save_every_s=3600)
    assert not (tmp_path / "hourly").exists() or not list((tmp_path / "hourly").iterdir())
    with pytest.raises(Interrupted):
        _train(params, resume_dir=tmp_path / "always", on_epoch_end=stop_after_second, save_every_s=0)
    _, kept = read_resume_file(next((tmp_path / "always").glob("astra_alpha-*.pt")))
    assert kept["epoch"] == 2


def test_a_run_under_other_loops_records_them_and_keys_its_resume_file_otherwise(raw_params, tmp_path, monkeypatch):
    """RNNLM_NATIVE=0 (or a build that failed) runs the Python loops, whose last bits differ from the
    compiled ones: the training metrics record the loops and MKL's mode, and the resume key differs,
    so a run never mixes them."""
    from rnnlm.compute import backend
    from rnnlm.reporting.training_report import training_summary

    params, folder = tiny_params(raw_params, epochs=1), tmp_path / "resume"
    runs = {}
    for loops in ("cpp", "python"):
        monkeypatch.setattr(backend, "backend_for", lambda device, loops=loops: loops)
        runs[loops] = _train(params, resume_dir=folder)
    machines = {loops: training_summary("astra_alpha", run)["machines"] for loops, run in runs.items()}
    assert {loops: (m[0]["loops"], m[0]["mkl_cbwr"]) for loops, m in machines.items()} == {
        "cpp": ("cpp", os.environ.get("MKL_CBWR", "")), "python": ("python", os.environ.get("MKL_CBWR", ""))}
    keys = {loops: run.resume.fields["key"] for loops, run in runs.items()}
    assert keys["cpp"] != keys["python"] and runs["cpp"].resume.path == runs["python"].resume.path
