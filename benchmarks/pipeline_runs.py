"""The pipeline's stage scripts run without DVC, in a scratch copy of the repository: what the
benchmarks use where DVC is not at hand (a lent GPU machine) or would add its own time.

- `scratch_copy(into)`: src/, stages/ and params.yaml copied into `into/repo`.
- `stage_commands()`: each stage's script and arguments, as dvc.yaml writes them.
- `run_stages(model, corpus, work, log, ...)`: every stage for `model` in `work` (the data stages
  once), with a steps scale, a seed and a thread count of one's choosing; its figures and each
  stage's seconds.
- `tokenizer_sha256(corpus, work, log)`: the data stages alone in `work`, and the sha256 of the
  SentencePiece model they wrote (`python -m benchmarks.pipeline_runs tokenizer-sha256 CORPUS`
  prints this machine's, through `scratch_tokenizer_sha256`: what a lent GPU machine's tokenizer
  is checked against, by `check_tokenizer`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sentencepiece
import yaml

from rnnlm.data.tokenizers import SENTENCEPIECE_FILE

REPO = Path(__file__).resolve().parents[1]

DATA_STAGES = ("download", "prepare", "tokenizer")
"""The stages every model shares, run once per scratch copy."""
TOKENIZER_FILE = f"models/tokenizer/{SENTENCEPIECE_FILE}"
"""Where the tokenizer stage writes its model in a scratch copy (dvc.yaml's output folder)."""


def stage_commands() -> list[list[str]]:
    """The pipeline's stages as dvc.yaml runs them, script and arguments (every stage reads the model
    from params.yaml's `model:`, which `run_stages` sets)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    commands = []
    for stage in stages.values():
        words = stage["cmd"].split()
        commands.append(words[words.index("python") + 1 :])
    return commands


def stage_pythonpath() -> str:
    """The stages' PYTHONPATH: the scratch copy's `src` first, then whatever this process was given
    (on a GPU machine, the folder of carried wheels that pin what its image has in other versions:
    without it the tokenizer stage trains with the image's SentencePiece, a different tokenizer)."""
    return os.pathsep.join(["src", *filter(None, [os.environ.get("PYTHONPATH")])])


def run_stages(model: str, corpus: Path, work: Path, log, steps_scale: float | None = None,
               seed: int | None = None, threads: int | None = None) -> dict[str, object]:
    """The pipeline's stage scripts for `model` (at `seed`, default params.yaml's), in `work` (a
    scratch copy of the repository), each stage's CPU work on `threads` threads (default: all)."""
    env = _stage_env(corpus, threads)
    params = work / "params.yaml"
    text = re.sub(r"(?m)^model: .*$", f"model: {model}", params.read_text(), count=1)
    if seed is not None:
        text = re.sub(r"(?m)^seed: .*$", f"seed: {seed}", text, count=1)
    if steps_scale is not None:
        text = re.sub(r"(?m)^  steps_scale: .*$", f"  steps_scale: {steps_scale}", text, count=1)
    params.write_text(text)
    data_done = (work / "data/prepared/train.txt").exists() and (work / "models/tokenizer").exists()
    seconds = {}
    for command in stage_commands():
        stage = Path(command[0]).stem
        if not (data_done and stage in DATA_STAGES):
            seconds[stage] = _run_stage(model, command, work, env, log)
    train = json.loads((work / "reports/train/metrics.json").read_text())
    metrics = json.loads((work / "reports/metrics.json").read_text())
    return {"model": model, "stage_seconds": seconds, "train": train,
            "stateful_bpc": metrics["stateful_bpc"], "stateless_bpc": metrics["stateless_bpc"],
            "bigram_bpc": metrics["bigram_bpc"]}


def tokenizer_sha256(corpus: Path, work: Path, log) -> str:
    """The data stages alone in `work` (a scratch copy; what `run_stages` then skips there), and the
    sha256 of the SentencePiece model the tokenizer stage wrote: one hash for the whole tokenizer."""
    env = _stage_env(corpus, None)
    for command in stage_commands():
        if Path(command[0]).stem in DATA_STAGES:
            _run_stage("the data", command, work, env, log)
    return tokenizer_hash(work)


def scratch_tokenizer_sha256(corpus: Path, log) -> str:
    """`tokenizer_sha256` in a scratch copy of this checkout, removed afterwards: this machine's
    tokenizer for `corpus`, as the pipeline's data stages train it."""
    with tempfile.TemporaryDirectory() as tmp:
        return tokenizer_sha256(corpus, scratch_copy(Path(tmp)), log)


def tokenizer_hash(work: Path) -> str:
    """The sha256 of the SentencePiece model the tokenizer stage wrote in `work`."""
    return hashlib.sha256((work / TOKENIZER_FILE).read_bytes()).hexdigest()


def check_tokenizer(corpus: Path, log_path: Path, expected: str, models: str) -> None:
    """Return when the data stages, run in a scratch copy of their own (output to `log_path`), train
    the tokenizer whose sha256 is `expected`; else raise RuntimeError saying what differs, naming
    `models` (the SentencePiece runs that would have trained on it)."""
    with open(log_path, "w") as log:
        try:
            here = scratch_tokenizer_sha256(corpus, log)
        except RuntimeError as error:
            raise RuntimeError(f"{error} (see {log_path})") from None
    if here != expected:
        raise RuntimeError(f"{TOKENIZER_FILE} trained here (SentencePiece {sentencepiece.__version__}) has sha256 "
                           f"{here}; expected the CPU's {expected} for {models}")


def _stage_env(corpus: Path, threads: int | None) -> dict[str, str]:
    """The stages' environment: our PYTHONPATH, the corpus as the download stage's mirror, and each
    stage's CPU work on `threads` threads (default: all)."""
    env = {**os.environ, "PYTHONPATH": stage_pythonpath(), "RNNLM_CORPUS_MIRROR": str(corpus), "PYTHONUNBUFFERED": "1"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def _run_stage(model: str, command: list[str], work: Path, env: dict[str, str], log) -> float:
    """One stage's script in `work`, its output to `log`; its seconds. A stage that fails raises
    RuntimeError naming it and `model`."""
    stage = Path(command[0]).stem
    start = time.perf_counter()
    log.write(f"\n$ python {' '.join(command)}\n")
    log.flush()
    done = subprocess.run([sys.executable, *command], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"stage {stage} of {model} exited {done.returncode}")
    return time.perf_counter() - start


def scratch_copy(into: Path) -> Path:
    work = into / "repo"
    for name in ("src", "stages"):
        shutil.copytree(REPO / name, work / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "params.yaml", work / "params.yaml")
    return work


def main() -> None:
    """`tokenizer-sha256 CORPUS`: this machine's tokenizer for the pinned corpus, as a hash on stdout
    (the stages' output on stderr)."""
    if len(sys.argv) != 3 or sys.argv[1] != "tokenizer-sha256":
        sys.exit("usage: python -m benchmarks.pipeline_runs tokenizer-sha256 CORPUS")
    corpus = Path(sys.argv[2]).resolve()
    if not corpus.is_file():
        sys.exit(f"error: {corpus}: no such file; expected a local copy of Tiny Shakespeare")
    try:
        print(scratch_tokenizer_sha256(corpus, sys.stderr))
    except RuntimeError as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
