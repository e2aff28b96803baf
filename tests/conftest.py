"""Shared fixtures: a small synthetic play, a valid params mapping, and a scratch DVC repository."""

from __future__ import annotations

import copy
import fcntl
import hashlib
import os
import random
import runpy
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]

# Without a GPU, Triton's kernels run in its interpreter (numpy), so the tests can hold them to the
# readable cells; it must be set before a cell's Triton module is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# pytest-xdist runs one worker per core (pyproject's -n 2): each worker, and the stages and DVC runs
# it starts, computes on one thread, instead of two threads each spinning on cores the other holds.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)

# No DVC command a test starts sends usage analytics, those run outside a repository and before
# `dvc init` included: each one left a report file in the temporary folder and a daemon behind.
os.environ["DVC_NO_ANALYTICS"] = "1"

# A cell written in the tests, with Python loops only, joins the registry with one line: every test
# that runs "each cell" runs it too (tests/softsign_cell.py).
from rnnlm.models.cells import CELLS  # noqa: E402
from rnnlm.params import GenerateParams  # noqa: E402
from tests import softsign_cell  # noqa: E402

CELLS.setdefault(softsign_cell.SPEC.name, softsign_cell.SPEC)


@pytest.fixture(scope="session")
def _cores_folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cores")


@pytest.fixture(autouse=True)
def _none_of_the_users_folders(monkeypatch):
    """The user's own settings that name folders (`USERS_FOLDERS`: a corpus mirror, the resume folder
    the README has them export) never reach a stage a test runs in its own process: the tests'
    corpora and resume files are their own (`run` drops them for subprocesses too)."""
    for name in USERS_FOLDERS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _own_core_share(monkeypatch, _cores_folder):
    """A stage run inside a test's process joins a share of the cores of its own, left at the test's
    end, not the machine's (`rnnlm.compute.threads`), where it would stay for the worker's life."""
    from rnnlm.compute import threads

    share = threads.CoreShare(_cores_folder)
    monkeypatch.setattr(threads, "SHARE", share)
    yield
    share.leave()


def cell_configs(variant: dict | None = None, **common) -> list:
    """A small model config for every registered cell (vocab 11, embd 6, hidden 8, two layers unless
    `common` says otherwise), with `variant` (more layers, dropout, a LayerNorm) applied to every
    other cell in turn, so that each feature meets several cells."""
    from rnnlm.models.config import ModelConfig

    base = {"vocab_size": 11, "embd": 6, "hidden": 8, "layers": 2, **common}
    return [ModelConfig(name, **{**base, **({} if i % 2 else variant or {})}) for i, name in enumerate(CELLS)]

_WORDS = (
    "the and my lord thou art not of to be heart love king good sweet night day come go "
    "speak hear what shall will with death life blood crown fair honour noble grace"
).split()
_SPEAKERS = ["ROMEO", "JULIET", "KING RICHARD", "FIRST CITIZEN", "MENENIUS", "QUEEN"]


def synthetic_play(n_chars: int, seed: int = 0) -> str:
    """A deterministic Shakespeare-shaped text: speaker labels, short lines, blank lines."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_chars:
        speech = [f"{rng.choice(_SPEAKERS)}:"]
        for _ in range(rng.randint(1, 4)):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 9))]
            words[0] = words[0].capitalize()
            speech.append(" ".join(words) + rng.choice([",", ".", "!", "?", ";"]))
        block = "\n".join(speech) + "\n\n"
        parts.append(block)
        size += len(block)
    return "".join(parts)[:n_chars]


@pytest.fixture
def play_text() -> str:
    return synthetic_play(20_000)


@pytest.fixture
def raw_params() -> dict:
    """The repository's params.yaml as a fresh mutable mapping."""
    return copy.deepcopy(yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8")))


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(cmd: list[str], cwd: Path, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run `cmd` in `cwd`, capturing text output; raise with the output when `check` fails."""
    full_env = {k: v for k, v in os.environ.items() if k not in USERS_FOLDERS}  # never the user's, by accident
    full_env.update(env or {})
    done = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done


USERS_FOLDERS = ("RNNLM_CORPUS_MIRROR", "RNNLM_RESUME_DIR")
"""Settings of the user's shell that name their own folders: no test reads or writes there."""


def make_dvc_repo(root: Path, corpus: str, params_update) -> Path:
    """A git+DVC repository in `root` with this project's pipeline, the given corpus as its source
    (a file:// URL with its own sha256), and params edited by `params_update(params)`."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", ".gitignore"):
        shutil.copy(REPO_ROOT / name, root / name)
    shutil.copytree(REPO_ROOT / "stages", root / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    source = root.parent / f"{root.name}-corpus.txt"
    source.write_bytes(corpus.encode("utf-8"))
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))
    params["data"]["url"] = source.as_uri()
    params["data"]["sha256"] = sha256_of(corpus.encode("utf-8"))
    params_update(params)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    run(["git", "init", "-q"], root)
    run(["git", "config", "user.email", "test@example.invalid"], root)
    run(["git", "config", "user.name", "test"], root)
    run(["dvc", "init", "-q"], root)
    run(["dvc", "config", "core.analytics", "false"], root)
    shutil.copy(REPO_ROOT / ".dvcignore", root / ".dvcignore")  # over dvc init's: what a folder dep leaves out
    shutil.copytree(REPO_ROOT / ".dvc" / "plots", root / ".dvc" / "plots")  # the plot templates dvc.yaml names
    run(["git", "add", "-A"], root)
    run(["git", "commit", "-qm", "pipeline"], root)
    return root


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, worker_id) -> Path:
    """A repository where `dvc repro` has run the whole pipeline once on tiny models, the result
    committed. Built once per test session, both xdist workers included: the first to ask builds it
    under a lock, the other waits for it. Modules copy it (`copy_repo`) instead of training again;
    never change it in place."""
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":  # each worker's base folder sits in the session's own
        shared = shared.parent
    root, built = shared / "finished-run" / "repo", shared / "finished-run.built"
    with open(shared / "finished-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            shutil.rmtree(root.parent, ignore_errors=True)  # a build cut short by a failure
            make_dvc_repo(root, synthetic_play(30_000), tiny_models)
            run(["dvc", "repro"], root)
            run(["git", "add", "-A"], root)
            run(["git", "commit", "-qm", "a finished run"], root)
            built.touch()
    return root


def copy_repo(source: Path, root: Path) -> Path:
    """A copy of the repository at `source` (its git history, DVC cache and run-cache) at `root`."""
    shutil.copytree(source, root, symlinks=True)
    return root


def save_tiny_checkpoint(path: Path, tokenizer, model_name: str = "astra_alpha", cell: str = "gru") -> Path:
    """An untrained tiny model for `tokenizer`, saved as a real checkpoint at `path`."""
    import torch

    from rnnlm.models.checkpoint import Checkpoint, save_checkpoint
    from rnnlm.models.config import ModelConfig
    from rnnlm.models.language_model import RecurrentLM

    torch.manual_seed(0)
    config = ModelConfig(cell, vocab_size=tokenizer.vocab_size, embd=8, hidden=16, layers=2)
    model = RecurrentLM(config)
    save_checkpoint(path, Checkpoint(model_name=model_name, model_config=config, model_state=model.state_dict(),
                                     tokenizer_state=tokenizer.state(), params={}, step=0, epoch=0))
    return path


@pytest.fixture(scope="session")
def char_checkpoint(tmp_path_factory) -> Path:
    from rnnlm.data.corpus import character_vocabulary
    from rnnlm.data.tokenizers import CharTokenizer

    tokenizer = CharTokenizer(character_vocabulary(synthetic_play(20_000)))
    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "char.pt", tokenizer)


@pytest.fixture(scope="session")
def sentencepiece_checkpoint(tmp_path_factory) -> Path:
    from rnnlm.params import TokenizerParams
    from rnnlm.data.tokenizers import SentencePieceTokenizer, train_sentencepiece

    proto = train_sentencepiece(synthetic_play(30_000), TokenizerParams(100, "unigram", 1.0))
    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "sp.pt", SentencePieceTokenizer(proto), "scribe_alpha")


@pytest.fixture(params=["python", "cpp-mkl", "cpp-onednn", "triton"])
def backend(request, monkeypatch, gemm):
    """Run the test once with each backend of the per-step loops (training scans, sampling advances, the
    whole model's advance and the generation loop): the Python loops (ATen calls), the compiled C++
    ones (what the CPU runs) with each of the two float32 GEMMs (MKL, oneDNN: the large products
    of `rnnlm.compute.products` follow too), and the Triton ones (what CUDA runs; here in Triton's
    interpreter, on CPU tensors). A failed C++ build fails here. float64 products always run ATen's
    own GEMM; the float32 tests are the ones that reach oneDNN."""
    from rnnlm.compute import backend as switch
    from rnnlm.compute import build

    loops, _, library = request.param.partition("-")
    if loops == "cpp":
        assert build.compiled() is not None, "the C++ code did not build (see the warning above)"
    if loops == "triton":
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("Triton kernels run on CPU tensors only in its interpreter (tests/test_cuda.py runs them on a GPU)")
        assert switch.triton_available(), "triton is not installed"
    monkeypatch.setattr(switch, "backend_for", lambda device: loops)
    gemm(library or "mkl")
    return request.param


@pytest.fixture
def gemm():
    """`gemm("mkl:onednn")` (or a `Gemms`) makes that the process's GEMM choice, through the one call
    the library has for it (`rnnlm.compute.backend.use_gemm`); the machine's own choice comes back after
    the test."""
    from rnnlm.compute import backend

    def choose(choice) -> object:
        choice = backend.Gemms.parse(choice) if isinstance(choice, str) else choice
        backend.use_gemm(choice)
        return choice

    yield choose
    backend.use_gemm(None)


def small_tokenizer(params: dict) -> None:
    """A SentencePiece vocabulary of 100: the tests' corpora are small."""
    params["tokenizer"]["vocab_size"] = 100


def tiny_models(params: dict) -> None:
    """Every model the tests train made tiny: seconds per run on a CPU."""
    small_tokenizer(params)
    params["train"].update({"batch_size": 4, "seq_len": 16, "device": "cpu"})
    # the context curve at 4 lengths and 100 targets: at full size it would be most of each evaluate stage
    params["evaluate"].update({"context_targets": 100, "context_lengths": [1, 2, 4, 8]})
    for name in ("astra_alpha", "rnn_alpha", "scribe_alpha", "leviathan", "mgu_alpha"):
        params["models"][name].update({"embd": 8, "hidden": 12, "layers": 1, "epochs": 2, "steps_per_epoch": 3})


def randomised_model(config):
    """A float64 model in eval mode, its weights and biases moved off their initial values."""
    from rnnlm.models.language_model import RecurrentLM

    torch.manual_seed(0)
    model = RecurrentLM(config).double().eval()
    with torch.no_grad():  # biases away from their zero init, so that folding them is tested
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


SETTINGS = GenerateParams(prompts=("ROMEO: ", "KING: ", "FIRST CITIZEN: "), max_new_tokens=30, temperature=0.8,
                          top_k=5, top_k_temperature=1.0, top_p=0.9, top_p_temperature=1.0)
"""Generation settings of the report and generation tests: three prompts, 30 tokens."""

METRICS = {  # a metrics.json as the evaluate stage writes it
    "val_chars": 1000, "val_tokens": 999, "stateful_bpc": 2.39, "stateless_bpc": 3.76, "bigram_bpc": 3.59,
    "stateless_minus_bigram_bpc": 0.17,
    "context_targets": 2000, "context_stateful_bpc": 2.40, "context_horizon": 16, "context_horizon_range": [8, 32],
    "context_horizon_tolerance": 0.01, "context_curve_bpc": {"1": 3.70, "16": 2.41, "64": 2.40},
    "context_curve_se_bpc": {"1": 0.05, "16": 0.001, "64": 0.0}, "context_curve_chars": {"1": 1.0, "16": 16.0, "64": 64.0},
    "reset_curve_bpc": {"1": 3.76, "128": 2.41, "never": 2.39},
    "ngram_bpc": {"unigram": 4.83, "bigram": 3.59, "5gram": 2.44},
    "text": {mode: {"known_word_share": 0.5, "distinct_1": 0.7, "distinct_2": 0.8, "distinct_3": 0.9,
                    "repeated_4gram_share": 0.1, "char_loglik": -2.0, "speaker_line_share": None}
             for mode in ("stateless", "stateful", "validation")},
}


SLURM_COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol")


def why_no_slurm() -> str | None:
    """Why this machine cannot start the one-node test cluster of tests/study/test_slurm.py, or None."""
    missing = [d for d in SLURM_COMMANDS if shutil.which(d) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing: Debian's slurm-wlm and munge; .ci/run installs them)"
    if os.geteuid() != 0:
        return "the single-node test cluster runs its daemons as root"
    return None


@pytest.fixture
def in_process(monkeypatch, capsys):
    """`call(command, cwd)` runs one of our command lines inside this test's process, as a subprocess
    would (exit status, stdout and stderr in a CompletedProcess) but without starting an interpreter
    and importing PyTorch, seconds each. `command` is `[script, *args]` or `["-m", module, *args]`,
    ending in `rnnlm.command_line.run_main`. Only for commands that leave no process-wide setting behind:
    not the train and evaluate stages, which set the allocator (`keep_freed_memory`)."""
    def call(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
        command = [str(word) for word in command]
        monkeypatch.chdir(cwd)
        sigterm = signal.getsignal(signal.SIGTERM)  # run_main installs its own
        capsys.readouterr()
        code = 0
        try:
            if command[0] == "-m":
                monkeypatch.setattr(sys, "argv", command[1:])
                with warnings.catch_warnings():  # the module is imported already, by the tests or the library
                    warnings.simplefilter("ignore", RuntimeWarning)
                    runpy.run_module(command[1], run_name="__main__", alter_sys=True)
            else:
                monkeypatch.setattr(sys, "argv", command)
                runpy.run_path(command[0], run_name="__main__")
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        finally:
            signal.signal(signal.SIGTERM, sigterm)
        out = capsys.readouterr()
        return subprocess.CompletedProcess(command, code, out.out, out.err)

    return call


def pytest_collection_modifyitems(config, items):
    """The files with slow (end-to-end) tests first. Each worker takes whole files (--dist loadfile);
    a long file started last would run alone while the other worker idles."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the order within a file is kept


@pytest.fixture
def study_cli(in_process):
    """`study_cli(repo, *args)`: `python -m rnnlm_study ARGS` in `repo`, run in this process."""
    return lambda repo, *args: in_process(["-m", "rnnlm_study", *args], repo)


def shallow_clone() -> bool:
    """Whether this checkout lacks git's whole history (what the study's reading of the registration needs)."""
    done = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO_ROOT, capture_output=True, text=True)
    return done.returncode != 0 or done.stdout.strip() != "false"


def train_model(params, name, tokenizer, train_text, val_text, **record):
    """`rnnlm.training.train.train` for the entry `name` of `params`, no progress bar; `record`: the
    `RunRecord`'s options (resume_dir, save_every_s, on_progress, on_epoch_end)."""
    from rnnlm.training.record import RunRecord
    from rnnlm.training.settings import run_settings
    from rnnlm.training.train import train

    return train(run_settings(params, name, tokenizer.vocab_size), tokenizer, train_text, val_text,
                 RunRecord(bar=False, **record))
