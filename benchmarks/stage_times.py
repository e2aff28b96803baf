"""Where a run's time goes, per model: each stage's wall seconds and the parts of train and evaluate.

    PYTHONPATH=src python -m benchmarks.stage_times --corpus PATH/tinyshakespeare.txt \
        --markdown reports/speed/stage-times-NAME.md --json reports/speed/stage-times-NAME.json

runs every model of params.yaml (`--models` picks some) at `--steps-scale` (default 0.01: the
README's quick run) through the pipeline's stage scripts in one scratch copy (the data stages once,
as in a repository where they are done), and reads the timing file each stage writes
(`rnnlm.stage_clock`: reports/timing/<stage>.json); `--runs N` runs each model N times in a row and
shows the run of median total, and the machine's limit is timed just before and after (a cloud
machine's rate moves). Beside it, the full-scale figures the study holds:
the median training seconds of each model's collected runs and, for runs collected with timing
files, their evaluate stage. Run it on an idle machine: a second busy process changes everything.

`--full-evaluation` times the evaluate stage at full scale instead, part by part, for each model
trained one step of one epoch (`epochs: 1`, `steps_per_epoch: 1` in the scratch copy's params; what
an evaluation costs does not depend on the weights, and its first-epoch part still runs):

    PYTHONPATH=src python -m benchmarks.stage_times --corpus PATH --full-evaluation --models astra_gamma \
        --markdown reports/speed/evaluate-full-NAME.md --json reports/speed/evaluate-full-NAME.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks import timing
from benchmarks.pipeline_runs import run_stages, scratch_copy

from rnnlm.params import load_params
from rnnlm.reporting.markdown import table_head, table_row

REPO = Path(__file__).resolve().parents[1]

EVALUATE_PARTS = ("stateful pass", "reset curve", "context curve", "n-gram floor", "text statistics", "first epoch")

LIMIT_SIZE, LIMIT_REPEATS = 4096, 5
"""The machine's limit beside the quick runs: the faster library's 4096² float32 product, median of 5
(`timing.measure_limit`, as speed.py times it). A cloud machine's rate moves from hour to hour, so a
quick run's seconds are read beside the rate the machine had while it ran."""


def limit_gflops(device: torch.device, size: int = LIMIT_SIZE) -> float:
    """The machine's limit now, GFLOP/s."""
    return max(timing.measure_limit(size, LIMIT_REPEATS, device).rates.values())


def quick_runs(models: list[str], corpus: Path, steps_scale: float, log, runs: int = 1) -> list[dict[str, object]]:
    """Each model through the stages at `steps_scale`, `runs` times in a row; per model the run of median
    total (each stage's seconds and parts), with every run's total beside it."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = scratch_copy(Path(tmp))
        for model in models:
            tries = []
            for _ in range(runs):
                result = run_stages(model, corpus, work, log, steps_scale)
                timings = {stage: json.loads((work / f"reports/timing/{stage}.json").read_text())
                           for stage in ("train", "generate", "evaluate")}
                stages = result["stage_seconds"]
                # the data stages ran once, before the first run
                run_s = sum(stages[s] for s in ("cell", "train", "generate", "evaluate", "report"))
                tries.append({"model": model, "wall_s": run_s, "stage_s": stages, "timing": timings})
                print(f"  {model}: {run_s:.0f} s", flush=True)
            median = sorted(tries, key=lambda row: row["wall_s"])[(len(tries) - 1) // 2]  # the lower of two
            rows.append({**median, "runs_s": [row["wall_s"] for row in tries]})
    return rows


def one_step_entry(params_text: str, model: str) -> str:
    """params.yaml's text with `model`'s entry trained for one step of one epoch (comments kept)."""
    lines = params_text.splitlines(keepends=True)
    start = lines.index(f"  {model}:\n")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^  \S", lines[i]) or re.match(r"^\S", lines[i])),
               len(lines))
    block = "".join(lines[start:end])
    block = re.sub(r"(?m)^(    epochs:) .*$", r"\1 1", block, count=1)
    block = re.sub(r"(?m)^(    steps_per_epoch:) .*$", r"\1 1", block, count=1)
    return "".join(lines[:start]) + block + "".join(lines[end:])


def full_evaluations(models: list[str], corpus: Path, log, each=lambda rows: None) -> list[dict[str, object]]:
    """Each model, trained one step, through the stages at full scale; its evaluate stage's timing.
    `each(rows)` after every model: a long run's report is written as it goes."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = scratch_copy(Path(tmp))
        for model in models:
            (work / "params.yaml").write_text(one_step_entry((REPO / "params.yaml").read_text(), model))
            run_stages(model, corpus, work, log, steps_scale=1.0)
            rows.append({"model": model, "evaluate": json.loads((work / "reports/timing/evaluate.json").read_text())})
            print(f"  {model}: evaluate {rows[-1]['evaluate']['wall_s']:.0f} s", flush=True)
            each(rows)
    return rows


def evaluation_markdown(report: dict[str, object]) -> str:
    lines = ["# Full-scale evaluation per part", "",
             f"Written by `benchmarks/stage_times.py --full-evaluation` on {report['machine']}: each model trained "
             "one step (the cost of an evaluation does not depend on the weights), then the evaluate stage at full "
             "scale; seconds of wall time from the stage's own timing file (CPU seconds in the JSON).", "",
             *table_head(["model", "evaluate", *EVALUATE_PARTS], "l" + "r" * (1 + len(EVALUATE_PARTS)))]
    for row in report["full_evaluation"]:
        parts = row["evaluate"]["parts"]
        lines.append(table_row([row["model"], f"{row['evaluate']['wall_s']:.1f}",
                                *(f"{parts.get(p, {}).get('wall_s', 0.0):.1f}" for p in EVALUATE_PARTS)]))
    return "\n".join(lines) + "\n"


def full_scale(study: Path, models: list[str]) -> dict[str, dict[str, object]]:
    """Per model, from the study's folders: the median training seconds and machines of its runs, and
    the median evaluate seconds of those collected with timing files."""
    found = {}
    for model in models:
        folders = sorted((study / model).glob("seed-*"))
        trains = [json.loads((f / "train_metrics.json").read_text()) for f in folders]
        evaluates = [json.loads((f / "timing_evaluate.json").read_text())["wall_s"] for f in folders
                     if (f / "timing_evaluate.json").is_file()]
        if trains:
            found[model] = {"runs": len(trains), "train_s": statistics.median(t["seconds"] for t in trains),
                            "machines": sorted({t.get("processor") or t.get("device", "?") for t in trains}),
                            "evaluate_s": statistics.median(evaluates) if evaluates else None,
                            "evaluate_runs": len(evaluates)}
    return found


def markdown(report: dict[str, object]) -> str:
    scale = report["steps_scale"]
    lines = ["# Stage times per model", "", f"Written by `benchmarks/stage_times.py` on {report['machine']}.", "",
             f"## Quick runs (train.steps_scale {scale:g}), seconds of wall time", "",
             "Each stage as the pipeline runs it (one process each, imports included); train's per-epoch validation "
             "and evaluate's parts from the stage's own timing file.", "",
             *table_head(["model", "total", "train", "of which validation", "generate", "evaluate",
                          *EVALUATE_PARTS], "l" + "r" * (5 + len(EVALUATE_PARTS)))]
    if "limit_gflops" in report:
        before, after = report["limit_gflops"]
        lines[6:6] = [f"The machine's limit (the faster library's 4096² float32 product, median of {LIMIT_REPEATS}) "
                      f"was {before:.1f} GFLOP/s just before the runs and {after:.1f} just after.", ""]
    if any(len(row.get("runs_s", [])) > 1 for row in report["quick"]):
        lines[6:6] = ["Each model's run of median total is shown; every run's total: " + "; ".join(
            f"{row['model']} " + ", ".join(f"{t:.0f}" for t in row["runs_s"]) for row in report["quick"]) + " s.", ""]
    for row in report["quick"]:
        stage, parts = row["stage_s"], row["timing"]["evaluate"]["parts"]
        validation = row["timing"]["train"]["parts"].get("per-epoch validation", {}).get("wall_s", 0.0)
        lines.append(table_row([row["model"], f"{row['wall_s']:.0f}", f"{stage['train']:.1f}", f"{validation:.1f}",
                                f"{stage['generate']:.1f}", f"{stage['evaluate']:.1f}",
                                *(f"{parts.get(p, {}).get('wall_s', 0.0):.1f}" for p in EVALUATE_PARTS)]))
    lines += ["", "## Full scale, from the study's runs (their machines differ; medians)", "",
              *table_head(["model", "runs", "training s", "evaluate s (runs with a timing file)", "trained on"],
                          "lrrrl")]
    for model, full in report["full"].items():
        evaluate = "—" if full["evaluate_s"] is None else f"{full['evaluate_s']:,.0f} ({full['evaluate_runs']})"
        lines.append(table_row([model, str(full["runs"]), f"{full['train_s']:,.0f}", evaluate,
                                "; ".join(full["machines"])]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="a local copy of Tiny Shakespeare")
    parser.add_argument("--models", nargs="+", help="entries of params.yaml (default: all)")
    parser.add_argument("--steps-scale", type=float, default=0.01)
    parser.add_argument("--full-evaluation", action="store_true",
                        help="time the evaluate stage at full scale, per part, of each model trained one step")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--runs", type=int, default=1, help="quick runs of each model, in a row (the median is shown)")
    parser.add_argument("--limit-size", type=int, default=LIMIT_SIZE,
                        help="the square product that times the machine's limit beside the quick runs")
    parser.add_argument("--log", type=Path, default=Path("/tmp/stage_times.log"), help="the stages' output")
    args = parser.parse_args(argv)
    if not args.corpus.is_file():
        sys.exit(f"error: --corpus {args.corpus}: no such file; expected a local copy of Tiny Shakespeare")
    models = args.models or list(load_params(REPO / "params.yaml").models)
    # the device the stages pick (`train.device: auto`): CUDA where there is a GPU
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    machine = timing.machine_line(timing.machine(device, keeps_memory=True))

    def write(report: dict[str, object]) -> str:
        text = evaluation_markdown(report) if args.full_evaluation else markdown(report)
        timing.save_report(text, report, args.markdown, args.json)
        return text

    with open(args.log, "w") as log:
        if args.full_evaluation:
            report = {"machine": machine, "full_evaluation": full_evaluations(
                models, args.corpus.resolve(), log, each=lambda rows: write({"machine": machine, "full_evaluation": rows}))}
        else:
            before = limit_gflops(device, args.limit_size)
            quick = quick_runs(models, args.corpus.resolve(), args.steps_scale, log, args.runs)
            report = {"machine": machine, "steps_scale": args.steps_scale, "quick": quick,
                      "limit_gflops": [before, limit_gflops(device, args.limit_size)],
                      "full": full_scale(REPO / "reports/study", models)}
    print(write(report))


if __name__ == "__main__":
    main()
