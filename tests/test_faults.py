"""Faults lose nothing: a full disk, Ctrl-C, SIGTERM or SIGKILL at a chosen moment leaves every earlier
output and the run's resume file as they were, says so in one line, and the same command run again
finishes the job. A full disk is a write that raises ENOSPC; a kill comes from outside the process
(a log line read, or strace's fault injection at a chosen system call)."""

from __future__ import annotations

import errno
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from rnnlm import atomic
from rnnlm_study.campaign import dvc_queue
from rnnlm.training.resume import read_header
from tests.conftest import REPO_ROOT, copy_repo, make_dvc_repo, synthetic_play, tiny_models

CORPUS = synthetic_play(30_000)
STAGES = {  # stage -> its command line after `python stages/<stage>.py`, and the output it writes
    "download": (["data/raw/tinyshakespeare.txt"], "data/raw/tinyshakespeare.txt"),
    "prepare": (["data/raw/tinyshakespeare.txt", "data/prepared"], "data/prepared"),
    "tokenizer": (["data/prepared/train.txt", "models/tokenizer"], "models/tokenizer/spm.model"),
    "train": (["data/prepared", "models/tokenizer", "models/model.pt", "reports/train", ".resume",
               "reports/timing/train.json"], "models/model.pt"),
    "generate": (["models/model.pt", "reports/generations.json", "reports/timing/generate.json"],
                 "reports/generations.json"),
    "evaluate": (["models/model.pt", "data/prepared", "reports/generations.json", "reports/metrics.json",
                  "reports/plots/reset_curve.csv", "reports/plots/context_curve.csv", "reports/validation_blocks.csv",
                  "reports/timing/evaluate.json"],
                 "reports/metrics.json"),
    "report": (["reports/generations.json", "reports/metrics.json", "reports/generations.md"], "reports/generations.md"),
}


LONG = 4000
"""Epochs of a run the tests below stop in the middle. The tiny run's epochs take a fraction of a
second each, so a run of 40 could end before a test on a busy machine has read its second epoch's
line and sent the signal (it did once, under a suite beside a full-scale training)."""


def _train_longer(root: Path, epochs: int = LONG) -> None:
    """astra_alpha in the folder's params.yaml set to `epochs` epochs: long enough to be stopped in the middle."""
    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    params["models"]["astra_alpha"]["epochs"] = epochs
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")


def _command(stage: str) -> list[str]:
    return [sys.executable, str(REPO_ROOT / "stages" / f"{stage}.py"), *STAGES[stage][0]]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RNNLM_CORPUS_MIRROR", "RNNLM_RESUME_DIR")}
    return {**env, "PYTHONPATH": str(REPO_ROOT / "src")}


def _stage(root: Path, stage: str) -> subprocess.CompletedProcess:
    return subprocess.run(_command(stage), cwd=root, env=_env(), capture_output=True, text=True)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, finished_run) -> Path:
    """A folder where every stage has run once (tiny astra_alpha, two epochs): a copy of the suite's
    finished run, whose files the tests below copy again and run single stages in, without DVC."""
    return copy_repo(finished_run, tmp_path_factory.mktemp("faults") / "repo")


def _in_process(root: Path, stage: str, monkeypatch, capsys) -> tuple[int, str, str]:
    """Run a stage's script in this process (so a test can make its writes fail): exit code, out, err."""
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "argv", [f"stages/{stage}.py", *STAGES[stage][0]])
    previous = signal.getsignal(signal.SIGTERM)
    try:
        runpy.run_path(str(REPO_ROOT / "stages" / f"{stage}.py"), run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    finally:
        signal.signal(signal.SIGTERM, previous)
    out, err = capsys.readouterr()
    return code, out, err


def _disk_full_at(monkeypatch, name: str) -> None:
    """Every atomic write whose destination is called `name` fails for want of space."""
    real = atomic._put_in_place

    def full(tmp: Path, dest: Path) -> None:
        if dest.name == name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(tmp, dest)

    monkeypatch.setattr(atomic, "_put_in_place", full)


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*.tmp")]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_full_disk_ends_every_stage_in_one_line_and_changes_nothing(pipeline, stage, tmp_path, monkeypatch, capsys):
    root = tmp_path / "copy"
    shutil.copytree(pipeline, root)
    before = _snapshot(root)
    _disk_full_at(monkeypatch, Path(STAGES[stage][1]).name)
    code, out, err = _in_process(root, stage, monkeypatch, capsys)
    assert code == 1
    assert err == f"error: cannot write {STAGES[stage][1]}: No space left on device; free some space and run the same " \
                  f"command again\n"
    assert not _leftovers(root)
    after = _snapshot(root)
    if stage == "train":  # the run is kept, not lost: its resume file, and its report marked unfinished
        (added,) = set(after) - set(before)
        assert added.startswith(".resume/astra_alpha-") and read_header(root / added)["epoch"] == 2
        del after[added]
        live = json.loads(after.pop("reports/train/metrics.json"))
        assert (live["finished"], live["epochs"], live["epochs_planned"]) == (False, 2, 2)
        for name in ("reports/train/steps.tsv", "reports/train/epochs.tsv", "reports/train/metrics.json"):
            before.pop(name), after.pop(name, None)  # the figures so far (their timings are this run's)
    assert after == before


def test_a_full_disk_at_the_checkpoint_loses_no_training(pipeline, tmp_path, monkeypatch, capsys):
    root = tmp_path / "copy"
    shutil.copytree(pipeline, root)
    (root / "models/model.pt").unlink()
    with monkeypatch.context() as full:  # the disk full for the first run alone
        _disk_full_at(full, "model.pt")
        assert _in_process(root, "train", full, capsys)[0] == 1
    code, out, err = _in_process(root, "train", monkeypatch, capsys)
    assert code == 0, err
    assert "resuming astra_alpha after epoch 2" in out and "epoch 01/2" not in out  # nothing trained again
    assert (root / "models/model.pt").read_bytes() == (pipeline / "models/model.pt").read_bytes()
    assert not list((root / ".resume").iterdir())  # removed once every output is in place


def _strace_available() -> bool:
    return shutil.which("strace") is not None and subprocess.run(
        ["strace", "-qq", "-e", "trace=none", "true"], capture_output=True).returncode == 0


needs_strace = pytest.mark.skipif(not _strace_available(), reason="needs strace (Debian's strace package) to kill a "
                                                                  "process at a chosen system call")


RENAMES = "rename,renameat,renameat2"


def _killed_at_rename(command: list[str], cwd: Path, which: int) -> subprocess.CompletedProcess:
    """Run `command` under strace, killed by SIGKILL when it enters its `which`-th rename (the main
    process's own, not its children's)."""
    return subprocess.run(["strace", "-qq", "-o", os.devnull, "-e", f"trace={RENAMES}",
                           "-e", f"inject={RENAMES}:signal=KILL:when={which}", *command],
                          cwd=cwd, env=_env(), capture_output=True, text=True)


def _rename_onto(command: list[str], cwd: Path, onto: str) -> int:
    """Which of `command`'s renames (counted as `_killed_at_rename` counts them) puts a file at `onto`,
    from a first run traced in a copy of `cwd`."""
    trial = cwd.with_name(cwd.name + "-traced")
    shutil.copytree(cwd, trial)
    log = trial / "renames.log"
    subprocess.run(["strace", "-qq", "-o", str(log), "-e", f"trace={RENAMES}", *command], cwd=trial, env=_env(),
                   capture_output=True, check=True)
    calls = [line for line in log.read_text().splitlines() if line.split("(")[0] in RENAMES.split(",")]
    return next(i for i, line in enumerate(calls, start=1) if f'"{onto}")' in line or f'"{onto}", ' in line)


@needs_strace
def test_killed_at_the_checkpoints_rename_the_rerun_finishes_from_the_last_epoch(pipeline, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(pipeline, root)
    (root / "models/model.pt").unlink()
    which = _rename_onto(_command("train"), root, "models/model.pt")  # after every epoch's saves and reports
    killed = _killed_at_rename(_command("train"), root, which=which)
    assert killed.returncode != 0 and "epoch 02/2" in killed.stdout
    assert not (root / "models/model.pt").exists()
    (orphan,) = (root / "models").glob(".model.pt.*.tmp")  # what the killed writer could not remove
    (resume,) = (root / ".resume").iterdir()
    assert read_header(resume)["epoch"] == 2
    again = _stage(root, "train")
    assert again.returncode == 0, again.stderr
    assert "resuming astra_alpha after epoch 2" in again.stdout and "epoch 01/2" not in again.stdout
    assert not orphan.exists() and not _leftovers(root)  # the next writer of model.pt removed it
    assert (root / "models/model.pt").read_bytes() == (pipeline / "models/model.pt").read_bytes()


def _wait_for_line(process: subprocess.Popen, text: str) -> list[str]:
    lines = []
    for line in process.stdout:
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"the process ended before printing {text!r}: {''.join(lines)}")


@pytest.mark.parametrize("how, code, said", [(signal.SIGTERM, 143, "error: terminated (SIGTERM)"),
                                             (signal.SIGINT, 130, "error: interrupted")])
def test_sigterm_and_ctrl_c_keep_the_last_epoch_and_say_so_in_one_line(pipeline, tmp_path, how, code, said):
    root = tmp_path / "copy"
    shutil.copytree(pipeline, root)
    _train_longer(root)
    # SIGINT as a terminal's Ctrl-C delivers it: a test run in the background (where the shell has
    # SIGINT ignored, and Python then keeps ignoring it) must not pass that on to the stage.
    process = subprocess.Popen(_command("train"), cwd=root, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_for_line(process, f"epoch 02/{LONG}")  # printed once epoch 2 is saved
    process.send_signal(how)
    _, err = process.communicate(timeout=120)
    assert process.returncode == code
    assert err.startswith(said) and len(err.splitlines()) == 1, err
    (resume,) = (root / ".resume").iterdir()
    assert read_header(resume)["epoch"] >= 2
    assert not _leftovers(root)


@pytest.mark.slow
def test_ctrl_c_in_dvc_repro_loses_the_stages_earlier_outputs_and_dvc_checkout_brings_them_back(tmp_path, finished_run):
    """DVC removes a stage's outputs before it runs the stage: a `dvc repro` stopped in the train stage
    leaves no checkpoint and no training reports (the README says so), every other stage's outputs
    stay, and `dvc checkout train` (checkpoint) with `git checkout -- reports/train` (reports, kept in
    git) brings back what the last finished run committed."""
    root = copy_repo(finished_run, tmp_path / "repo")
    env = _env()
    kept = {p: (root / p).read_bytes() for p in ("models/model.pt", "reports/train/metrics.json",
                                                  "reports/metrics.json", "reports/generations.md")}
    params = root / "params.yaml"
    original = params.read_text()
    _train_longer(root)
    def as_in_a_terminal() -> None:  # its own process group, SIGINT as a terminal delivers it
        os.setpgrp()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    repro = subprocess.Popen(["dvc", "repro"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, preexec_fn=as_in_a_terminal)
    _wait_for_line(repro, f"epoch 02/{LONG}")
    os.killpg(repro.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group: DVC and its stage
    repro.communicate(timeout=120)
    assert repro.returncode != 0
    assert not (root / "models/model.pt").exists()
    live = json.loads((root / "reports/train/metrics.json").read_text())  # the figures so far, marked
    assert live["finished"] is False and live["epochs"] >= 1 and live["epochs_planned"] == LONG
    assert (root / "reports/metrics.json").read_bytes() == kept["reports/metrics.json"]  # later stages: untouched
    params.write_text(original)
    assert subprocess.run(["dvc", "checkout", "train"], cwd=root, env=env, capture_output=True).returncode == 0
    subprocess.run(["git", "checkout", "--", "reports/train"], cwd=root, check=True)
    assert {p: (root / p).read_bytes() for p in kept} == kept


def test_sample_into_a_closed_pipe_ends_quietly_and_a_full_stdout_in_one_line(pipeline):
    sample = [sys.executable, "-m", "rnnlm.sample", str(pipeline / "models/model.pt"), "--prompt", "ROMEO:",
              "--max-new-tokens", "2000"]
    process = subprocess.Popen(sample, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(process.stdout.read(5)) == 5
    process.stdout.close()  # like `| head -c 5`
    err = process.stderr.read()
    process.wait(timeout=120)
    assert err == b"" and process.returncode == 128 + signal.SIGPIPE
    with open("/dev/full", "w") as full:
        done = subprocess.run(sample, env=_env(), stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 1
    assert done.stderr == ("error: cannot write standard output: No space left on device; free some space and run "
                           "the same command again\n")


def test_the_train_stage_reads_its_resume_folder_from_the_environment(pipeline, tmp_path, in_process, monkeypatch):
    root = tmp_path / "copy"
    shutil.copytree(pipeline, root)
    _train_longer(root)
    elsewhere = tmp_path / "resume-files"
    process = subprocess.Popen(_command("train"), cwd=root, env={**_env(), "RNNLM_RESUME_DIR": str(elsewhere)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_line(process, f"epoch 01/{LONG}")
    process.kill()
    process.wait(timeout=60)
    (resume,) = elsewhere.iterdir()
    assert read_header(resume)["model"] == "astra_alpha" and not list((root / ".resume").iterdir())
    monkeypatch.setenv("RNNLM_RESUME_DIR", str(elsewhere))
    listed = in_process(["-m", "rnnlm_study", "resume-files"], root)
    assert "astra_alpha" in listed.stdout and f"1/{LONG} epochs done" in listed.stdout and resume.name in listed.stdout
    monkeypatch.delenv("RNNLM_RESUME_DIR")
    pruned = in_process(["-m", "rnnlm_study", "resume-files", "--dir", elsewhere, "--prune-older-than", "0"], root)
    assert "(removed)" in pruned.stdout and not resume.exists()


def _entry(root: Path, name: str, status: str) -> dvc_queue.Task | None:
    """The queue's entry of `name` that has `status` (a name queued again after a failure has two), read
    from the queue's files: `dvc queue status` every half second would ask the worker, which can stop it
    (dvc_queue)."""
    return next((task for task in dvc_queue.read(root).tasks if task.name == name and task.status == status), None)


def _run_log(root: Path, task: dvc_queue.Task) -> str:
    """What the queue's run `task` printed, from dvc-task's log of its revision. Not `dvc queue logs
    NAME`: of a name queued twice DVC shows whichever entry it lists last, the failed one in a CI run."""
    return (root / dvc_queue.EXPS / "run" / task.rev / f"{task.rev}.out").read_text()


def _wait(predicate, what: str, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"gave up waiting for {what}")


@pytest.mark.slow
@pytest.mark.long
def test_a_killed_queued_experiment_resumes_when_queued_again(tmp_path):
    """The study's runs go through DVC's queue, whose workspace (.dvc/tmp/exps/...) DVC deletes when
    a run fails: the resume file lives in the main repository's .resume/ instead, so queuing the same
    run again continues from its last epoch."""
    def slow_enough(params: dict) -> None:
        tiny_models(params)
        # Epochs of a few seconds each: the test must see epoch 2's save and kill the training before it
        # ends (at tiny_models' batch of 4 x 16 an epoch took 0.1 s and the run could end unseen).
        params["train"].update({"batch_size": 32, "seq_len": 64})
        params["models"]["astra_alpha"].update({"hidden": 96, "epochs": 6, "steps_per_epoch": 150})
        params["generate"]["max_new_tokens"] = 10

    root = make_dvc_repo(tmp_path / "repo", CORPUS, slow_enough)
    params = root / "params.yaml"  # an edit of a tracked file left uncommitted: DVC queues it with the commit
    params.write_text(params.read_text().replace("max_new_tokens: 10", "max_new_tokens: 12"))
    study = [sys.executable, "-m", "rnnlm_study", "run", "--models", "astra_alpha"]
    try:
        queued = subprocess.run(study, cwd=root, env=_env(), capture_output=True, text=True)
        assert queued.returncode == 0, queued.stderr
        assert "queued: -n astra_alpha-seed1337 -S model=astra_alpha -S seed=1337" in queued.stdout
        resume = root / ".resume"

        def saved_epoch() -> int:
            headers = [read_header(p) for p in resume.glob("astra_alpha-*.pt")] if resume.is_dir() else []
            return max((h["epoch"] for h in headers), default=0)

        def epoch_two_saved() -> bool:
            if saved_epoch() >= 2:
                return True
            logs = " ".join(p.read_text() for p in (root / ".dvc/tmp/exps/run").glob("*/*.out"))
            assert "Running stage 'generate'" not in logs, "the training ended before the test saw epoch 2 saved"
            return False

        _wait(epoch_two_saved, "epoch 2 of the queued run", 600)  # beside the Slurm test on 2 cores: slow
        # While it trains, `dvc exp show` lists the queued run with its figures so far (the live report).
        shown = subprocess.run(["dvc", "exp", "show", "--json"], cwd=root, env=_env(), capture_output=True, text=True)
        live = [rev["data"]["metrics"]["reports/train/metrics.json"]["data"] for record in json.loads(shown.stdout)
                for exp in (record.get("experiments") or []) for rev in exp["revs"]
                if "reports/train/metrics.json" in ((rev.get("data") or {}).get("metrics") or {})]
        assert any(m.get("finished") is False and m.get("epochs", 0) >= 1 and m.get("val_loss") for m in live), \
            shown.stdout
        # The stage's python, and the shell DVC may start it through (one process or two, by the $SHELL)
        trainers = [p for p in psutil.process_iter(["cmdline", "cwd"]) if "stages/train.py" in " ".join(
            p.info["cmdline"] or []) and str(root / ".dvc/tmp/exps") in (p.info["cwd"] or "")]
        assert trainers, "no train stage running in DVC's workspace"
        for trainer in trainers:
            trainer.kill()  # as the end of a session or a lost machine would: no cleanup runs
        _wait(lambda: _entry(root, "astra_alpha-seed1337", "Failed"), "the killed run to fail")
        assert not list((root / ".dvc/tmp/exps").glob("tmp*/.resume"))  # nothing kept in DVC's workspace
        reached = saved_epoch()
        assert 2 <= reached < 6

        again = subprocess.run(study, cwd=root, env=_env(), capture_output=True, text=True)
        assert again.returncode == 0 and "queued: -n astra_alpha-seed1337" in again.stdout, again.stderr
        finished = _wait(lambda: _entry(root, "astra_alpha-seed1337", "Success"), "the queued run to finish", 600)
        log = _run_log(root, finished)
        assert f"resuming astra_alpha after epoch {reached}" in log or "resuming astra_alpha at step" in log, log
        assert "epoch 01/6 " not in log.split("resuming astra_alpha")[-1]  # no epoch trained twice
        assert not list(resume.iterdir())  # removed once the run's outputs were in place
        collected = subprocess.run([sys.executable, "-m", "rnnlm_study", "collect"], cwd=root, env=_env(),
                                   capture_output=True, text=True)
        assert "astra_alpha seed 1337: wrote" in collected.stdout, collected.stderr
        epochs = (root / "reports/study/astra_alpha/seed-1337/epochs.tsv").read_text().splitlines()
        assert len(epochs) == 7
        shown = json.loads(subprocess.run(["dvc", "exp", "show", "--json"], cwd=root, env=_env(), capture_output=True,
                                          text=True).stdout)
        (run_params,) = [rev["data"]["params"]["params.yaml"]["data"] for record in shown
                         for exp in (record.get("experiments") or []) for rev in exp["revs"]
                         if not rev.get("error")]  # the killed attempt is listed too, as failed
        assert (run_params["model"], run_params["seed"], run_params["generate"]["max_new_tokens"]) == (
            "astra_alpha", 1337, 12)
    finally:
        subprocess.run(["dvc", "queue", "stop", "--kill"], cwd=root, env=_env(), capture_output=True)


def test_each_stage_records_where_its_time_went(pipeline):
    """reports/timing/<stage>.json: wall and CPU seconds of the stage and of each of its parts."""
    parts = {"train": {"training, per-epoch validation included", "per-epoch validation", "resume file",
                       "live report"},
             "generate": {"sampling"},
             "evaluate": {"stateful pass", "reset curve", "context curve", "n-gram floor", "text statistics",
                          "first epoch"}}
    for stage, names in parts.items():
        timing = json.loads((pipeline / f"reports/timing/{stage}.json").read_text())
        assert timing["stage"] == stage and set(timing["parts"]) == names, timing
        assert timing["wall_s"] > 0 and timing["cpu_s"] > 0 and timing["threads"] >= 1
        inside_training = ("per-epoch validation", "resume file", "live report")  # parts of the training part
        assert sum(p["wall_s"] for n, p in timing["parts"].items() if n not in inside_training) <= timing["wall_s"]
    train = json.loads((pipeline / "reports/timing/train.json").read_text())["parts"]
    assert 0 < train["per-epoch validation"]["wall_s"] < train["training, per-epoch validation included"]["wall_s"]
