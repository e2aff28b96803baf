"""Two trainings queued through DVC at once, against each trained alone: the speed each keeps, and
whether each checkpoint is the one it trains alone, bit for bit.

    python -m benchmarks.queue_pair --corpus PATH/tinyshakespeare.txt \\
        --markdown reports/speed/queue-pair-NAME.md --json reports/speed/queue-pair-NAME.json
    python -m benchmarks.queue_pair --corpus PATH --steps-scale 0.01      # minutes: checks that it runs

In a clone of this repository's HEAD (a temporary folder, its own DVC cache and resume folder, no
`OMP_NUM_THREADS`: no thread setting anywhere), each seed of `--seeds` is trained alone with
`dvc exp run -S model=M -S seed=S`, one after the other; then DVC's run-cache is emptied (it would
restore the same runs instead of training them), both are queued with `dvc exp run --queue` and
started with `dvc queue start -j 2`, DVC's documented way to run experiments side by side. Each run
shares the cores through `rnnlm.compute.threads`. A row per seed: tokens per second alone and beside
the other (the train stage's own figure, over its whole run), the share kept, the checkpoint's md5
in each (DVC's, from dvc.lock) and whether they are equal. The machine should be otherwise idle.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.timing import corpus_parser, cpu_report, write_report

REPO = Path(__file__).resolve().parents[1]


def _run(command: list[str], cwd: Path, env: dict[str, str], log) -> str:
    log.write(f"\n$ {' '.join(command)}\n")
    log.flush()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    log.write(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}; see the log")
    return done.stdout


def _settings(model: str, seed: int, scale: float) -> list[str]:
    return ["-S", f"model={model}", "-S", f"seed={seed}", "-S", f"train.steps_scale={scale}"]


def _figures(lock: str, metrics: str) -> dict[str, object]:
    """The checkpoint's md5 (dvc.lock's train stage) and the train stage's figures."""
    outs = yaml.safe_load(lock)["stages"]["train"]["outs"]
    md5 = next(o["md5"] for o in outs if o["path"] == "models/model.pt")
    train = json.loads(metrics)
    return {"md5": md5, "tokens_per_second": train["tokens_per_second"], "seconds": train["seconds"],
            "val_loss": train["val_loss"]}


def measure(corpus: Path, model: str, seeds: list[int], scale: float, log) -> dict[str, object]:
    """Each of `seeds` trained alone, then all queued at once (module docstring), in a temporary clone
    whose commands write to `log`: a row per seed (both runs' figures, the share of its speed kept,
    whether the checkpoints are equal) and the wall seconds of the queued runs together."""
    work = Path(tempfile.mkdtemp(prefix="queue-pair-"))
    try:
        repo = work / "repo"
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONPATH")}
        env.update({"RNNLM_CORPUS_MIRROR": str(corpus), "RNNLM_RESUME_DIR": str(work / "resume")})
        _run(["git", "clone", "-q", str(REPO), str(repo)], work, env, log)
        alone = {}
        for seed in seeds:
            start = time.perf_counter()
            _run(["dvc", "exp", "run", *_settings(model, seed, scale)], repo, env, log)
            alone[seed] = {**_figures((repo / "dvc.lock").read_text(),
                                      (repo / "reports/train/metrics.json").read_text()),
                           "wall_seconds": time.perf_counter() - start}
        shutil.rmtree(repo / ".dvc/cache/runs", ignore_errors=True)
        _run(["git", "checkout", "-q", "--", "."], repo, env, log)  # the queue takes HEAD's files, -S on top
        for seed in seeds:
            _run(["dvc", "exp", "run", "--queue", "-n", f"pair-seed{seed}", *_settings(model, seed, scale)], repo, env, log)
        start = time.perf_counter()
        _run(["dvc", "queue", "start", "-j", str(len(seeds))], repo, env, log)
        refs: dict[int, str] = {}
        while len(refs) < len(seeds):
            time.sleep(10)
            listed = _run(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], repo, env, log).split()
            refs = {s: r for s in seeds for r in listed if r.endswith(f"/pair-seed{s}")}
            status = _run(["dvc", "queue", "status"], repo, env, log)
            if len(refs) < len(seeds) and "Running" not in status and "Queued" not in status:
                raise RuntimeError(f"the queue ended with {len(refs)} of {len(seeds)} runs done; see the log")
        pair_seconds = time.perf_counter() - start
        together = {s: _figures(_run(["git", "show", f"{r}:dvc.lock"], repo, env, log),
                                _run(["git", "show", f"{r}:reports/train/metrics.json"], repo, env, log))
                    for s, r in refs.items()}
        _run(["dvc", "queue", "stop"], repo, env, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [{"seed": s, "alone": alone[s], "together": together[s],
             "kept": together[s]["tokens_per_second"] / alone[s]["tokens_per_second"],
             "same_checkpoint": together[s]["md5"] == alone[s]["md5"]} for s in seeds]
    return {"model": model, "steps_scale": scale, "pair_wall_seconds": pair_seconds, "rows": rows}


def markdown(report: dict[str, object]) -> str:
    lines = [f"# Two queued trainings at once ({report['machine_line']})", "",
             f"Written by `benchmarks/queue_pair.py`. {report['model']} (train.steps_scale {report['steps_scale']}), "
             "each seed trained alone with `dvc exp run`, then both queued and started with `dvc queue start -j 2`, "
             "no thread setting (the runs share the cores through `rnnlm.compute.threads`). Tokens per second: "
             f"the train stage's figure over its whole run. The pair took {report['pair_wall_seconds']:.0f} s, "
             "its evaluation stages included.", "",
             "| seed | alone tokens/s | together tokens/s | kept | checkpoint alone | checkpoint together | same bits |",
             "|---:|---:|---:|---:|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['seed']} | {r['alone']['tokens_per_second']:,} | {r['together']['tokens_per_second']:,} | "
                     f"{r['kept']:.0%} | {r['alone']['md5'][:8]} | {r['together']['md5'][:8]} | "
                     f"{'yes' if r['same_checkpoint'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = corpus_parser(__doc__)
    parser.add_argument("--seeds", nargs=2, type=int, default=[11, 12])
    parser.add_argument("--steps-scale", type=float, default=1.0)
    parser.add_argument("--log", type=Path, default=Path("queue-pair.log"), help="the commands' output")
    args = parser.parse_args(argv)
    report = cpu_report(args.corpus, keeps_memory=True)
    with open(args.log, "w") as log:
        report.update(measure(args.corpus.resolve(), args.model, args.seeds, args.steps_scale, log))
    write_report(markdown(report), report, args.markdown, args.json)


if __name__ == "__main__":
    main()
