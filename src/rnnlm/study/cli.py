"""`python -m rnnlm.study run | collect | report | resume-files`: the study across models and seeds.

    python -m rnnlm.study run [--models NAME ...] [--seeds N] [--steps-scale S] [--wait]
    python -m rnnlm.study collect [--repo .] [--out reports/study]
    python -m rnnlm.study report [--study reports/study] [--markdown reports/study.md] [--figure reports/study.png]
                                [--readme README.md]
    python -m rnnlm.study resume-files [--dir .resume] [--prune-older-than DAYS]

`run` queues one DVC experiment per (model, seed) not held yet (`rnnlm.study.queue`);
`collect` copies each (model, seed)'s newest finished run (an experiment, local or pulled with
`dvc exp pull`, or a commit) into `reports/study/<model>/seed-<seed>/`
(`rnnlm.study.collect`); `report` builds the tables, figure and summaries from those
folders alone (`rnnlm.study.report`); `resume-files` lists the resume files of
interrupted runs and removes old ones (`rnnlm.training.resume`).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rnnlm.params import load_params
from rnnlm.study.collect import collect
from rnnlm.study.queue import StudyError, run
from rnnlm.study.report import report
from rnnlm.training.resume import RESUME_ENV, ResumeHeader, list_resume_files, resume_folder


def _age(seconds: float) -> str:
    return f"{seconds / 86400:.1f} d" if seconds >= 86400 else f"{seconds / 3600:.1f} h"


def resume_files(folder: Path, prune_older_than: float | None) -> list[str]:
    """One line per resume file of `folder` (model, seed, progress, age, file), newest first; with
    `prune_older_than` (days), the older ones are removed and said so."""
    if prune_older_than is not None and not 0 <= prune_older_than < math.inf:
        raise StudyError(f"--prune-older-than {prune_older_than:g}: expected a finite number of days, 0 or more")
    found = list_resume_files(folder)
    if not found:
        return [f"no resume files in {folder}"]
    lines = [f"{'model':<14} {'seed':>6} {'reached':<22} {'age':>7}  file"]
    for item in found:
        if not isinstance(item, ResumeHeader):
            lines.append(f"unreadable: {item}")
            continue
        reached = f"epoch {item['epoch']}/{item['epochs']}" + (f" + {item['step_in_epoch']} steps"
                                                               if item["step_in_epoch"] else "")
        old = prune_older_than is not None and item.age_s() > prune_older_than * 86400
        if old:
            item.path.unlink(missing_ok=True)
        lines.append(f"{item['model']:<14} {item['seed']:>6} {reached:<22} {_age(item.age_s()):>7}  {item.path.name}"
                     + ("  (removed)" if old else ""))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rnnlm.study", description="The study across models: queue, collect, report.")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="queue one experiment per model and start the queue")
    run_parser.add_argument("--models", nargs="+", help="entries of models: in params.yaml (default: all)")
    run_parser.add_argument("--seeds", type=int, default=1,
                            help="seeds per model: params.yaml's pinned seed, then 1, 2, ... (default 1)")
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
    resume_parser = commands.add_parser("resume-files", help="list the resume files of interrupted runs; prune old ones")
    resume_parser.add_argument("--dir", default=".resume",
                               help=f"the resume folder (default: ${RESUME_ENV}, else .resume in the repository)")
    resume_parser.add_argument("--prune-older-than", type=float, metavar="DAYS",
                               help="remove the files written more than DAYS days ago")
    args = parser.parse_args(argv)
    if args.command == "run":
        if not 0 < args.steps_scale < math.inf:
            raise StudyError(f"--steps-scale {args.steps_scale:g}: expected a finite positive number")
        if args.seeds < 1:
            raise StudyError(f"--seeds {args.seeds}: expected a positive number of seeds")
        models = args.models or list(load_params(args.params).models)
        run(models, args.steps_scale, args.wait, args.params, args.seeds)
    elif args.command == "resume-files":
        for line in resume_files(resume_folder(args.dir), args.prune_older_than):
            print(line)
    elif args.command == "collect":
        for line in collect(args.repo, args.out):
            print(line)
    else:
        runs = report(args.study, args.markdown, args.figure, args.params, Path(args.readme) if args.readme else None)
        print(f"wrote {args.markdown} and {args.figure}: {sum(not r.quick for r in runs)} full-scale runs, "
              f"{sum(r.quick for r in runs)} quick runs")
