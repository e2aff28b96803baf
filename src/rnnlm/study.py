"""`python -m rnnlm.study run | report`: queue the whole study as DVC experiments, or build its
table and figure (see `rnnlm.reporting.study`)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rnnlm.errors import run_main
from rnnlm.params import load_params
from rnnlm.reporting.study import MISSING, StudyError, report, run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rnnlm.study", description="Queue the study as DVC experiments, or report it.")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="queue one experiment per model and start the queue")
    run_parser.add_argument("--models", nargs="+", help="entries of models: in params.yaml (default: all)")
    run_parser.add_argument("--steps-scale", type=float, default=1.0, help="train.steps_scale for every run")
    run_parser.add_argument("--wait", action="store_true", help="return only when the queue is empty")
    run_parser.add_argument("--params", default="params.yaml")
    report_parser = commands.add_parser("report", help="write the study table and figure")
    report_parser.add_argument("--markdown", type=Path, default=Path("reports/study.md"))
    report_parser.add_argument("--figure", type=Path, default=Path("reports/study.png"))
    report_parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    if args.command == "run":
        if not 0 < args.steps_scale < math.inf:
            raise StudyError(f"--steps-scale {args.steps_scale:g}: expected a finite positive number")
        models = args.models or list(load_params(args.params).models)
        run(models, args.steps_scale, args.wait, args.params)
    else:
        rows = report(args.markdown, args.figure, args.params)
        print(f"wrote {args.markdown} and {args.figure}: {int((rows['source'] != MISSING).sum())} runs, "
              f"{int((rows['source'] == MISSING).sum())} models missing")


if __name__ == "__main__":
    run_main(main)
