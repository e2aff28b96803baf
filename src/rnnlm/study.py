"""`python -m rnnlm.study run | collect | report`: the study across models.

    python -m rnnlm.study run [--models NAME ...] [--steps-scale S] [--wait]
    python -m rnnlm.study collect [--repo .] [--out reports/study]
    python -m rnnlm.study report [--study reports/study] [--markdown reports/study.md] [--figure reports/study.png]
                                [--readme README.md]

`run` queues one DVC experiment per model (`rnnlm.reporting.study_queue`); `collect` copies each
model's newest finished run (an experiment, local or pulled with `dvc exp pull`, or a commit) into
`reports/study/<model>/` (`rnnlm.reporting.study_collect`); `report` builds the table and figure
from those folders alone (`rnnlm.reporting.study_report`).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rnnlm.errors import run_main
from rnnlm.params import load_params
from rnnlm.reporting.study_collect import collect
from rnnlm.reporting.study_queue import StudyError, run
from rnnlm.reporting.study_report import report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rnnlm.study", description="The study across models: queue, collect, report.")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="queue one experiment per model and start the queue")
    run_parser.add_argument("--models", nargs="+", help="entries of models: in params.yaml (default: all)")
    run_parser.add_argument("--steps-scale", type=float, default=1.0, help="train.steps_scale for every run")
    run_parser.add_argument("--wait", action="store_true", help="return only when the queue is empty")
    run_parser.add_argument("--params", default="params.yaml")
    collect_parser = commands.add_parser("collect", help="copy each model's newest finished run into reports/study/")
    collect_parser.add_argument("--repo", type=Path, default=Path("."), help="the repository's root (default: here)")
    collect_parser.add_argument("--out", type=Path, default=Path("reports/study"))
    report_parser = commands.add_parser("report", help="write the study table and figure from reports/study/")
    report_parser.add_argument("--study", type=Path, default=Path("reports/study"))
    report_parser.add_argument("--markdown", type=Path, default=Path("reports/study.md"))
    report_parser.add_argument("--figure", type=Path, default=Path("reports/study.png"))
    report_parser.add_argument("--params", default="params.yaml")
    report_parser.add_argument("--readme", default="README.md",
                               help="whose study table (between its markers) to rewrite; --readme '' for none")
    args = parser.parse_args(argv)
    if args.command == "run":
        if not 0 < args.steps_scale < math.inf:
            raise StudyError(f"--steps-scale {args.steps_scale:g}: expected a finite positive number")
        models = args.models or list(load_params(args.params).models)
        run(models, args.steps_scale, args.wait, args.params)
    elif args.command == "collect":
        for line in collect(args.repo, args.out):
            print(line)
    else:
        runs = report(args.study, args.markdown, args.figure, args.params, Path(args.readme) if args.readme else None)
        print(f"wrote {args.markdown} and {args.figure}: {sum(not r.quick for r in runs)} full-scale runs, "
              f"{sum(r.quick for r in runs)} quick runs")


if __name__ == "__main__":
    run_main(main)
