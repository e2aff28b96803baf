"""Study runs on a machine with an NVIDIA GPU and no DVC: `python -m benchmarks.gpu_check --study`.

Each (model, seed) trains at full scale through the stage scripts in a scratch copy of the
repository, several at once on the one GPU (a process each), and comes back as one small archive,
`<model>-seed-<seed>.tar.gz`: its study folder (params, training metrics and curves, evaluation
metrics, reset and context curves, generations) and a provenance naming the machine (`environment`,
which the check's report opens with too); checkpoints stay behind. `python -m rnnlm_study collect
--archives DIR` takes them into reports/study/.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import sentencepiece
import torch
import yaml

from benchmarks import timing
from benchmarks.pipeline_runs import check_tokenizer, run_stages, scratch_copy, tokenizer_hash

from rnnlm.params import load_params
from rnnlm_study.campaign.archive import ARCHIVE_MADE_BY
from rnnlm_study.folders import FOLDER

REPO = Path(__file__).resolve().parents[1]


def environment() -> dict[str, object]:
    """GPU, driver, library versions, CPU."""
    smi = ""
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.strip()
    name, driver, memory = (smi.split(", ") + ["?", "?", "?"])[:3]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none", "driver": driver, "gpu_memory": memory, "nvidia_smi_name": name,
        "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "sentencepiece": sentencepiece.__version__,  # the stages import the same (stage_pythonpath)
        # this process leaves glibc's allocator as it is (the stages it runs keep freed memory themselves)
        "cpu": timing.machine_line(timing.machine(torch.device("cpu"), keeps_memory=False)),
        "python": platform.python_version(),
    }


OUTPUTS = {name: path for name, path in FOLDER.items() if name != "params.yaml"}
"""What --study keeps of each run besides its params: archive name -> path in the scratch repository."""


def study(runs: list[tuple[str, int | None]], corpus: Path, results: Path, log_dir: Path,
          steps_scale: float | None, jobs: int = 1, tokenizer: str | None = None) -> None:
    """Train each (model, seed) of `runs` through the stages, `jobs` of them at once on the one GPU,
    each in a scratch copy of its own and a process per stage (so runs share the GPU as separate
    processes: each computes what it computes alone). As each finishes, its outputs and provenance go
    to `results/<model>-seed-<seed>.tar.gz` (`<model>/seed-<seed>/<file>` inside; checkpoints stay
    behind), so a call cut short keeps the finished runs.

    A SentencePiece model trains only on the CPU's tokenizer: `tokenizer` is that tokenizer's sha256
    (`.gpu/tokenizer.sha256`, which `gpu_prepare.sh` writes), checked against the one the data stages
    train here before anything trains; without it, or where they differ, the call ends in one line
    and trains nothing (another SentencePiece build trains another tokenizer, and its runs would be
    left out of the claims)."""
    env = environment()
    results.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    models = load_params(REPO / "params.yaml").models
    subword = sorted({model for model, _ in runs if model in models and models[model].tokens == "sentencepiece"})
    if subword and tokenizer is None:
        sys.exit(f"error: --study {', '.join(subword)}: a SentencePiece model; expected --tokenizer-sha256 (the CPU's "
                 "tokenizer, .gpu/tokenizer.sha256 from benchmarks/gpu_prepare.sh); nothing trained")
    if subword:
        try:
            check_tokenizer(corpus, log_dir / "tokenizer.log", tokenizer, ", ".join(subword))
        except RuntimeError as error:
            sys.exit(f"error: {error}; nothing trained")
    threads = max(1, (os.cpu_count() or 1) // max(jobs, 1))
    batch_start = time.perf_counter()

    copies = copy_suffixes(runs)
    labels = [(f"{model}-seed-{seed}" if seed is not None else model) + copy
              for (model, seed), copy in zip(runs, copies)]

    def one(index: int) -> str:
        (model, seed), label = runs[index], labels[index]
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp, open(log_dir / f"{label}.log", "w") as log:
            work = scratch_copy(Path(tmp))
            try:
                result = run_stages(model, corpus, work, log, steps_scale, seed=seed, threads=threads)
            except RuntimeError as error:
                return f"{label}: {error}"
            seed = yaml.safe_load((work / "params.yaml").read_text())["seed"]
            provenance = {**env, "model": model, "seed": seed, "wall_seconds": time.perf_counter() - start,
                          "stage_seconds": result["stage_seconds"], "steps_scale": steps_scale or 1.0,
                          "runs_sharing_the_gpu": jobs, "checkpoint": "left on the GPU machine",
                          "commit": _commit(), "made_by": ARCHIVE_MADE_BY}
            if model in subword:  # the tokenizer this run trained on, as checked
                provenance["tokenizer_sha256"] = tokenizer_hash(work)
            pack(work, results / f"{model}-seed-{seed}{copies[index]}.tar.gz", f"{model}/seed-{seed}", provenance)
        return (f"{label}: val {result['train']['val_loss']:.4f}, stateful {result['stateful_bpc']:.3f}, "
                f"stateless {result['stateless_bpc']:.3f}, {time.perf_counter() - start:.0f} s "
                f"(at {time.perf_counter() - batch_start:.0f} s)")

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        for said in pool.map(one, range(len(runs))):
            print(said, flush=True)
    print(f"{len(runs)} runs, {jobs} at a time: {time.perf_counter() - batch_start:.0f} s", flush=True)


def copy_suffixes(runs: list[tuple[str, int | None]]) -> list[str]:
    """Per run of `runs`, what its log's and archive's names end in: "-copy-K" for the K-th of a run
    listed more than once (the same training twice, to compare them), "" for a run listed once."""
    return [f"-copy-{runs[:i].count(run) + 1}" if runs.count(run) > 1 else "" for i, run in enumerate(runs)]


def study_runs(names: list[str], seeds: list[int] | None) -> list[tuple[str, int | None]]:
    """(model, seed) pairs from `--study` words: MODEL (at each of `seeds`, or params.yaml's seed) or
    MODEL:SEED (that seed alone). A word that is neither is refused in one line."""
    runs: list[tuple[str, int | None]] = []
    for name in names:
        model, _, seed = name.partition(":")
        if seed:
            if not seed.isdigit():
                sys.exit(f"error: --study {name}: expected MODEL or MODEL:SEED with SEED a whole number")
            runs.append((model, int(seed)))
        else:
            runs += [(model, s) for s in (seeds or [None])]
    return runs


def pack(work: Path, archive: Path, folder: str, provenance: dict[str, object]) -> None:
    """The study folder's files of the run in `work`, and its provenance, into `archive` (written
    under a temporary name, then renamed)."""
    data = (json.dumps(provenance, indent=2) + "\n").encode()
    partial = archive.with_name(f".{archive.name}")
    with tarfile.open(partial, "w:gz") as tar:
        for name, path in OUTPUTS.items():
            if (work / path).exists():  # the optional files (rnnlm_study.folders.OPTIONAL) may be missing
                tar.add(work / path, arcname=f"{folder}/{name}")
        tar.add(work / "params.yaml", arcname=f"{folder}/params.yaml")
        info = tarfile.TarInfo(f"{folder}/provenance.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    partial.rename(archive)


def _commit() -> str:
    """The commit that ran: RNNLM_COMMIT when set (a copy of a working tree may carry a stale git
    history, as the GPU machines' copies do), else git's HEAD."""
    if os.environ.get("RNNLM_COMMIT"):
        return os.environ["RNNLM_COMMIT"]
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"
