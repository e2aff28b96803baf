"""Shared fixtures: a small synthetic play, a valid params mapping, and a scratch DVC repository."""

from __future__ import annotations

import copy
import hashlib
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]

# Without a GPU, Triton's kernels run in its interpreter (numpy), so the tests can hold them to the
# readable cells; it must be set before a cell's Triton module is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

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
    full_env = {k: v for k, v in os.environ.items() if k != _MIRROR}  # tests never use a mirror by accident
    full_env.update({"DVC_NO_ANALYTICS": "1", **(env or {})})
    done = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done


_MIRROR = "RNNLM_CORPUS_MIRROR"


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
    shutil.copytree(REPO_ROOT / ".dvc" / "plots", root / ".dvc" / "plots")  # the plot templates dvc.yaml names
    run(["git", "add", "-A"], root)
    run(["git", "commit", "-qm", "pipeline"], root)
    return root


def save_tiny_checkpoint(path: Path, tokenizer, model_name: str = "astra_alpha", cell: str = "gru") -> Path:
    """An untrained tiny model for `tokenizer`, saved as a real checkpoint at `path`."""
    import torch

    from rnnlm.models.checkpoint import Checkpoint, save_checkpoint
    from rnnlm.models.language_model import ModelConfig, RecurrentLM

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
def backend(request, monkeypatch):
    """Run the test once with each backend of the per-step loops (training scans, sampling steps, the
    whole model's step and the generation loop): the Python loops (ATen calls), the compiled C++
    ones (what the CPU runs) with each of the two float32 GEMMs (MKL, oneDNN: the large products
    of `rnnlm.models.products` follow too), and the Triton ones (what CUDA runs; here in Triton's
    interpreter, on CPU tensors). The switch's two functions, `rnnlm.backend.backend_for` and
    `gemm_for`, answer the parameter for every device (one library for both kinds of product). A failed C++ build fails here. float64
    products always run ATen's own GEMM; the float32 tests are the ones that reach oneDNN."""
    from rnnlm import backend as switch
    from rnnlm import native

    loops, _, gemm = request.param.partition("-")
    if loops == "cpp":
        assert native.compiled() is not None, "the C++ code did not build (see the warning above)"
    if loops == "triton":
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("Triton kernels run on CPU tensors only in its interpreter (tests/test_cuda.py runs them on a GPU)")
        assert switch.triton_available(), "triton is not installed"
    monkeypatch.setattr(switch, "backend_for", lambda device: loops)
    gemms = switch.Gemms(gemm or "mkl", gemm or "mkl")
    monkeypatch.setattr(switch, "gemm_for", lambda device: gemms)
    yield request.param
    if native.compiled() is not None:
        native.compiled().set_gemm(switch.gemm_for(torch.device("cpu")).step)  # the machine's own choice again
