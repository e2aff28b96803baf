"""Check a machine with an NVIDIA GPU, in one command (under 10 minutes on an H100):

    python -m benchmarks.gpu_check --corpus PATH/tinyshakespeare.txt

1. the CUDA tests (`tests/test_cuda.py`: the Python loops on CUDA against float64 CPU references,
   graph and eager training steps, a CUDA-trained checkpoint on the CPU, sampling on the GPU);
2. the training-step benchmark on CUDA (`benchmarks/speed.py`'s, medians of side-by-side rounds):
   the study's step-by-step cell, ours eager, ours replayed as a CUDA graph, and cuDNN's
   nn.GRU / nn.LSTM, all at the same float32 precision (exact unless --allow-tf32);
3. astra_alpha trained on CUDA through the stage scripts (download from the local corpus, prepare,
   tokenizer, train, generate, evaluate, report) in a scratch copy of the repository, its validation
   loss against the CPU run committed in reports/train/metrics.json, and its checkpoint scored on
   the CPU.

It writes one report, `reports/gpu/check.md` (GPU model, driver, PyTorch, CUDA and cuDNN versions,
every figure), and the same figures as JSON beside it. A check split over several device calls
(`--skip` some parts in each) is joined afterwards, anywhere: `--merge A.json B.json --note ...`.

    python -m benchmarks.gpu_check --corpus PATH --study astra_gamma leviathan --results DIR

trains the named models at full scale through the same stage scripts instead (`--seeds 1 2` for
several seeds each, `--jobs N` for N runs at once, one process each, on the one GPU) and packs each
run's study folder into DIR/<model>-seed-<seed>.tar.gz (`gpu_study`). A SentencePiece model trains
only with `--tokenizer-sha256 HEX`, the CPU's tokenizer, which the data stages must reproduce here
before anything trains.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import timing
from benchmarks.pipeline_runs import run_stages, scratch_copy
from benchmarks import training_speed
from benchmarks.gpu_profile import profile
from benchmarks.gpu_study import environment, study, study_runs

from rnnlm.reporting.markdown import table_head, table_row

from rnnlm.models.checkpoint import load_checkpoint
from rnnlm.data.corpus import VAL_FILE, read_corpus
from rnnlm.compute.device import set_float32_precision
from rnnlm.evaluation.scoring import windowed_nll

REPO = Path(__file__).resolve().parents[1]

TARGET_MODELS = ("astra_beta", "astra_gamma", "scribe_gamma", "leviathan")


def run_tests(log) -> dict[str, object]:
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda.py"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    log.write(done.stdout + done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {"exit_code": done.returncode, "summary": lines[-1] if lines else "", "seconds": time.perf_counter() - start,
            "failures": [line for line in lines if line.startswith("FAILED")]}


def run_speed(models: list[str], repeats: int) -> dict[str, object]:
    device = torch.device("cuda")
    settings = dataclasses.replace(timing.FULL, repeats=repeats)
    configs = timing.model_configs(str(REPO / "params.yaml"), models, 1)
    matmul = max(timing.matmul_gflops(settings.matmul_size, settings.repeats, device).values())
    rows, errors = [], {}
    for name, config in configs.items():
        try:
            measured = training_speed.benchmark_training(name, config, settings, device)
        except Exception as error:  # noqa: BLE001 - record it, measure the other shapes
            errors[name] = f"{type(error).__name__}: {error}"
            continue
        for row in measured:
            rows.append({"model": row.model, "implementation": row.implementation, "ms_per_step": row.seconds * 1e3,
                         "tokens_per_second": row.tokens / row.seconds, "gflops": row.flops / row.seconds / 1e9,
                         "peak_mb": row.peak / 2**20})
        print(f"  measured {name}", flush=True)
    by = {(r["model"], r["implementation"]): r["ms_per_step"] for r in rows}
    for r in rows:
        r["x_step_by_step"] = by[(r["model"], "step-by-step")] / r["ms_per_step"]
        r["x_cudnn"] = by[(r["model"], "PyTorch")] / r["ms_per_step"]
    return {"matmul_gflops": matmul, "repeats": repeats, "rows": rows, "errors": errors}


def check_pipeline(corpus: Path, log, steps_scale: float | None = None) -> dict[str, object]:
    """astra_alpha through the stages on CUDA (at `steps_scale`, default params.yaml's); its CPU
    twin's numbers; its checkpoint on the CPU."""
    cpu_run = json.loads((REPO / "reports/train/metrics.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        work = scratch_copy(Path(tmp))
        result = run_stages("astra_alpha", corpus, work, log, steps_scale)
        checkpoint = load_checkpoint(work / "models/model.pt")
        val_ids = torch.tensor(checkpoint.tokenizer().encode(read_corpus(work / "data/prepared" / VAL_FILE)))
        seq_len = checkpoint.params["train"]["seq_len"]
        on_cpu = windowed_nll(checkpoint.build_model("cpu"), val_ids, seq_len).mean
        result["generations_md"] = (work / "reports/generations.md").read_text()
    result["cpu_run"] = {"val_loss": cpu_run["val_loss"], "device": cpu_run["device"], "seconds": cpu_run["seconds"]}
    result["val_loss_gap_to_cpu_run"] = result["train"]["val_loss"] - cpu_run["val_loss"]
    result["val_loss_of_checkpoint_on_cpu"] = on_cpu
    return result


def markdown(report: dict[str, object]) -> str:
    env = report["environment"]
    lines = [
        "# GPU check", "",
        f"Written by `benchmarks/gpu_check.py` on {env['date']}.", "",
        f"- GPU: {env['gpu']} ({env['gpu_memory']}), driver {env['driver']}",
        f"- PyTorch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, Python {env['python']}, "
        f"SentencePiece {env.get('sentencepiece', '?')}",
        f"- CPU: {env['cpu']}",
        f"- float32 products: {report['precision']}", "",
    ]
    tests = report.get("tests")
    if tests:
        lines += ["## CUDA tests", "", f"`pytest tests/test_cuda.py`: {tests['summary']} (exit {tests['exit_code']}, "
                  f"{tests['seconds']:.0f} s)", *[f"- {f}" for f in tests["failures"]], ""]
    bench = report.get("speed")
    if bench:
        lines += [f"## Training step (batch 64, 128 steps; medians of {bench['repeats']} side-by-side rounds)", "",
                  f"float32 matrix product 4096²: {bench['matmul_gflops']:,.0f} GFLOP/s", "",
                  *table_head(["model", "implementation", "ms/step", "tokens/s", "× step-by-step", "× cuDNN",
                               "peak MB"], "llrrrrr")]
        for r in bench["rows"]:
            impl = "cuDNN (nn.GRU/nn.LSTM)" if r["implementation"] == "PyTorch" else r["implementation"]
            lines.append(table_row([r["model"], impl, f"{r['ms_per_step']:,.2f}", f"{r['tokens_per_second']:,.0f}",
                                    f"{r['x_step_by_step']:.2f}", f"{r['x_cudnn']:.2f}", f"{r['peak_mb']:,.1f}"]))
        lines += ["", *[f"- {model} failed: `{error}`" for model, error in bench["errors"].items()], ""]
    pipe = report.get("pipeline")
    if pipe:
        t = pipe["train"]
        lines += ["## astra_alpha through the stage scripts on CUDA", "",
                  f"- trained on {t['device']}: {t['steps']} steps in {t['seconds']:.1f} s "
                  f"({t['tokens_per_second']:,.0f} tokens/s), validation loss {t['val_loss']:.4f}",
                  f"- the CPU run committed in reports/train/metrics.json: {pipe['cpu_run']['val_loss']:.4f} "
                  f"({pipe['cpu_run']['seconds']:.0f} s); difference {pipe['val_loss_gap_to_cpu_run']:+.4f} nats "
                  f"(target: within 0.02)",
                  f"- the CUDA checkpoint scored on the CPU: validation loss {pipe['val_loss_of_checkpoint_on_cpu']:.6f}",
                  f"- stateful {pipe['stateful_bpc']:.3f} bpc, stateless {pipe['stateless_bpc']:.3f}, "
                  f"bigram {pipe['bigram_bpc']:.3f}",
                  "- stage seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in pipe["stage_seconds"].items()), ""]
    for key, error in report.get("errors", {}).items():
        lines += [f"**{key} failed**: `{error}`", ""]
    if report.get("parts"):
        lines += ["## How it ran", "", *[f"- {', '.join(part['sections'])}: {part['date']}"
                                         + (f"; {part['note']}" if part.get("note") else "")
                                         for part in report["parts"]], ""]
    return "\n".join(lines)


def merge(paths: list[Path], notes: list[str]) -> dict[str, object]:
    """One report from the JSON reports of a check split over several device calls (tests and
    pipeline in one, the speed table in another): each section from the last report that has it,
    the environment of the last, and for each part its date, its sections and the note given for
    it (`notes[i]` for `paths[i]`, e.g. what else ran on the GPU meanwhile)."""
    merged: dict[str, object] = {"errors": {}, "parts": []}
    for i, path in enumerate(paths):
        part = json.loads(path.read_text(encoding="utf-8"))
        sections = [key for key in ("tests", "speed", "pipeline") if key in part]
        merged.update({key: part[key] for key in ("environment", "precision", *sections)})
        merged["errors"].update(part.get("errors", {}))
        merged["parts"].append({"date": part["environment"]["date"], "sections": sections,
                                "note": notes[i] if i < len(notes) else ""})
    return merged


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="a local copy of Tiny Shakespeare")
    parser.add_argument("--out", type=Path, default=REPO / "reports/gpu/check.md", help="the report to write")
    parser.add_argument("--models", nargs="+", default=list(TARGET_MODELS), help="shapes for the benchmark")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--allow-tf32", action="store_true")
    parser.add_argument("--skip", nargs="*", default=[], choices=["tests", "speed", "pipeline"])
    parser.add_argument("--study", nargs="+", metavar="MODEL",
                        help="train these models (MODEL or MODEL:SEED) instead of the check")
    parser.add_argument("--seeds", nargs="+", type=int, help="with --study: train each model at each of these seeds "
                        "(default: params.yaml's seed)")
    parser.add_argument("--jobs", type=int, default=1, help="with --study: runs at once on the GPU (processes)")
    parser.add_argument("--results", type=Path, help="with --study: the folder for <model>-seed-<seed>.tar.gz")
    parser.add_argument("--tokenizer-sha256", metavar="HEX", help="with --study: the CPU's SentencePiece model's "
                        "sha256 (.gpu/tokenizer.sha256); needed by SentencePiece runs, checked before anything trains")
    parser.add_argument("--steps-scale", type=float, help="train.steps_scale of the study runs and the pipeline "
                        "check (default: params.yaml's)")
    parser.add_argument("--dry-run", action="store_true", help="on a machine without a GPU: the same steps on the "
                        "CPU (the CUDA tests skip themselves, no speed table), to find a broken step before a lent call")
    parser.add_argument("--profile", nargs="+", metavar="MODEL", help="print where a step's GPU time goes")
    parser.add_argument("--log", type=Path, help="where the stages' and tests' output goes (default: beside --out)")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                        help="write --out from the JSON reports of a check split over several calls (no GPU needed)")
    parser.add_argument("--note", action="append", default=[], help="with --merge: a note for each part, in order")
    return parser


def _save(report: dict[str, object], out: Path) -> None:
    """The check's report as markdown to `out` and as JSON beside it, each written whole or not at all."""
    timing.save_report(markdown(report) + "\n", report, out, out.with_suffix(".json"))


def _check(args: argparse.Namespace, precision: str, log) -> dict[str, object]:
    """The check's parts not in `--skip` (tests, speed, pipeline), in turn; the report is saved first
    (the machine) and after each part, so that a call cut off keeps what was done. A part that raises
    is written under errors, and the others still run."""
    report: dict[str, object] = {"environment": environment(), "precision": precision, "errors": {}}
    _save(report, args.out)
    parts = {"tests": lambda: run_tests(log), "speed": lambda: run_speed(args.models, args.repeats),
             "pipeline": lambda: check_pipeline(args.corpus.resolve(), log, args.steps_scale)}
    for key in (key for key in parts if key not in args.skip):
        start = time.perf_counter()
        try:
            report[key] = parts[key]()
        except Exception as error:  # noqa: BLE001 - one broken part must not hide the others' figures
            report["errors"][key] = f"{type(error).__name__}: {error}"
        print(f"{key}: {time.perf_counter() - start:.0f} s", flush=True)
        _save(report, args.out)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.merge:
        _save(merge(args.merge, args.note), args.out)
        return
    if not torch.cuda.is_available() and not args.dry_run:
        sys.exit("error: no CUDA GPU here; this command checks a GPU machine (--dry-run tries its steps on the CPU)")
    if args.dry_run and "speed" not in args.skip and not args.study:
        sys.exit("error: --dry-run measures no speed; expected --skip speed with it")
    if not args.corpus.is_file():
        sys.exit(f"error: --corpus {args.corpus}: no such file; expected a local copy of Tiny Shakespeare")
    if args.study and args.results is None:
        parser.error("--study needs --results")
    precision = set_float32_precision(args.allow_tf32)
    log_path = args.log or args.out.with_suffix(".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if args.profile:
        print(profile(args.profile))
        return
    with open(log_path, "w") as log:
        if args.study:
            study(study_runs(args.study, args.seeds), args.corpus.resolve(), args.results,
                  log_path.with_name(f"{log_path.stem}-runs"), args.steps_scale, args.jobs, args.tokenizer_sha256)
            return
        report = _check(args, precision, log)
    print(markdown(report))


if __name__ == "__main__":
    main()
