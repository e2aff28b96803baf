"""`python -m rnnlm_study run | collect | report | resume-files`: the study across models and seeds.

    python -m rnnlm_study run [--models NAME ...] [--seeds N] [--steps-scale S] [--wait]
    python -m rnnlm_study run --slurm [--models ...] [--seeds N] [--partition P] [--time T] [--gpus G] ...
    python -m rnnlm_study status [--models ...] [--seeds N]
    python -m rnnlm_study collect [--repo .] [--out reports/study] [--archives PATH ...]
    python -m rnnlm_study report [--study reports/study] [--markdown reports/study.md] [--figure reports/study.png]
    python -m rnnlm_study resume-files [--dir .resume] [--prune-older-than DAYS]
    python -m rnnlm_study register DRAFT --out reports/study/registration-<n>.yaml
    python -m rnnlm_study register --seal reports/study/registration-<n>.yaml

`run` queues one DVC experiment per (model, seed) not held yet (`rnnlm_study.campaign.queue`), or with
`--slurm` submits them as one Slurm array job (`rnnlm_study.campaign.slurm`); `status` says where each stands;
`collect` copies each (model, seed)'s newest finished run (an experiment, local or pulled with
`dvc exp pull`, or a commit; with `--archives`, the archives a GPU machine's
`benchmarks/gpu_check.py --study` sends back) into `reports/study/<model>/seed-<seed>/`
(`rnnlm_study.campaign.collect`); `report` builds the tables, figure and summaries from those
folders, reading from git which rules are registered and which runs came after them
(`rnnlm_study.judging.report`), and prints what moved in findings.json: each claim's and row's verdict
that changed, each row that became judged or waits for less (`rnnlm_study.judging.moved`); `resume-files` lists the resume files of
interrupted runs and removes old ones (`rnnlm.training.resume`); `register` writes a new registration
of the study's rules from a draft, its history read from git, and once it is committed, `--seal` records
the commit that added it (`rnnlm_study.registration_git`).

Only `report` needs pandas, SciPy and matplotlib (the judging); it imports them when it runs, so
the other commands, `status` first of all, start in a fraction of a second instead of seconds.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rnnlm.params import load_params, steps_scale_ok
from rnnlm_study.campaign.archive import archive_paths
from rnnlm_study.campaign.collect import CollectFailed, collect
from rnnlm_study.campaign.queue import StudyError, held_runs, run, seeds_wanted
from rnnlm_study.campaign.slurm import CONFIG, load_settings, run_slurm
from rnnlm_study.campaign.status import age_words, epochs_done, status_lines
from rnnlm_study.registration import SEALED
from rnnlm_study.registration_git import seal, write_registration
from rnnlm.training.resume import RESUME_ENV, ResumeHeader, list_resume_files, resume_folder


def resume_files(folder: Path, prune_older_than: float | None) -> list[str]:
    """One line per resume file of `folder` (model, seed, progress, age, file), newest first; with
    `prune_older_than` (days), the older ones are removed and said so."""
    if prune_older_than is not None and not 0 <= prune_older_than < math.inf:
        raise StudyError(f"--prune-older-than {prune_older_than:g}: expected a finite number of days, 0 or more")
    found = list_resume_files(folder)
    if not found:
        return [f"no resume files in {folder}"]
    lines = [f"{'model':<14} {'seed':>6} {'reached':<30} {'saved':<11} file"]
    for item in found:
        if not isinstance(item, ResumeHeader):
            lines.append(f"unreadable: {item}")
            continue
        old = prune_older_than is not None and item.age_s() > prune_older_than * 86400
        if old:
            try:
                item.path.unlink(missing_ok=True)
            except OSError as error:
                raise StudyError(f"{item.path}: cannot be removed ({error.strerror}); expected a resume folder this "
                                 "user may write") from None
        lines.append(f"{item['model']:<14} {item['seed']:>6} {epochs_done(item):<30} {age_words(item.age_s()):<11} "
                     f"{item.path.name}" + ("  (removed)" if old else ""))
    return lines


MAX_RUNS = 100
"""`study run` queues at most this many (model, seed) runs unless --max-runs says more: nine models
at five seeds are 45; a typo of an extra digit should not queue days of training."""


STATUS_RUNS = 10_000
"""`study status` lists at most this many (model, seed) runs."""


def _selection(parser: argparse.ArgumentParser) -> None:
    """The options that say which runs: models, seeds, scale, params."""
    parser.add_argument("--models", nargs="+", help="entries of models: in params.yaml (default: all)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="seeds per model: params.yaml's pinned seed, then 1, 2, ... (default 1)")
    parser.add_argument("--seed-list", type=int, nargs="+", metavar="SEED",
                        help="exactly these seeds instead (the confirmatory ones: --seed-list 5 6 7 8 9)")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="train.steps_scale for every run")
    parser.add_argument("--params", default="params.yaml")


def _slurm_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Slurm (with --slurm; defaults from --slurm-config)")
    group.add_argument("--slurm", action="store_true", help="submit one Slurm array job instead of DVC's local queue")
    group.add_argument("--slurm-config", type=Path, default=CONFIG, help=f"settings file (default {CONFIG})")
    group.add_argument("--partition")
    group.add_argument("--time", help="per task, e.g. 04:00:00")
    group.add_argument("--cpus-per-task", type=int)
    group.add_argument("--gpus", type=int, help="per task (--gres=gpu:N); 0 for none")
    group.add_argument("--mem")
    group.add_argument("--venv", help="a virtual environment with requirements.txt installed, seen by every node")
    group.add_argument("--scratch", help="node-local scratch root (default: $TMPDIR, else /tmp)")
    group.add_argument("--remote", help="the git remote the tasks clone from and push to (default origin)")


def _which(args: argparse.Namespace, most: int, limit: str) -> tuple[list[str], list[int]]:
    """The models and seeds the options select, checked: at most `most` (model, seed) runs, else a
    StudyError that says how to ask for more (`limit`), before any list of seeds is built."""
    if not steps_scale_ok(args.steps_scale):
        raise StudyError(f"--steps-scale {args.steps_scale:g}: expected a number in (0, 1], as train.steps_scale")
    if args.seeds < 1:
        raise StudyError(f"--seeds {args.seeds}: expected a positive number of seeds")
    bad = [s for s in args.seed_list or () if not 0 <= s < 2**64]
    if bad:
        raise StudyError(f"--seed-list {bad[0]}: expected a seed from 0 to 2**64 - 1")
    params = load_params(args.params)
    models = args.models or list(params.models)
    unknown = [m for m in models if m not in params.models]
    if unknown:
        raise StudyError(f"--models {' '.join(unknown)}: not under models: in {args.params}; expected some of "
                         f"{', '.join(params.models)}")
    seed_list = list(dict.fromkeys(args.seed_list or ()))
    asked = len(models) * (len(seed_list) or args.seeds)
    if asked > most:
        what = f"--seed-list of {len(seed_list)}" if seed_list else f"--seeds {args.seeds}"
        raise StudyError(f"{what} for {len(models)} model{'s' if len(models) > 1 else ''} asks for {asked:,} runs, "
                         f"more than {limit.format(asked=asked)}")
    return models, seed_list or seeds_wanted(params.seed, args.seeds)


def _parser() -> argparse.ArgumentParser:
    """The command line: one subcommand each, its handler set as `handle` (each takes the parsed
    arguments and prints what it did)."""
    parser = argparse.ArgumentParser(prog="python -m rnnlm_study",
                                     description="The study across models and seeds: run, collect, report.")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="queue each (model, seed) not held yet (DVC's queue, or --slurm)")
    run_parser.set_defaults(handle=_run)
    _selection(run_parser)
    run_parser.add_argument("--wait", action="store_true", help="return only when DVC's queue is empty")
    run_parser.add_argument("--jobs", type=int, default=1,
                            help="queue workers training at once, each run on the cores divided by this (default 1)")
    run_parser.add_argument("--max-runs", type=int, default=MAX_RUNS,
                            help=f"refuse to queue more (model, seed) runs than this at once (default {MAX_RUNS})")
    _slurm_options(run_parser)
    status_parser = commands.add_parser("status", help="which (model, seed) are collected, finished, running, "
                                                       "failed or missing")
    status_parser.set_defaults(handle=_status)
    _selection(status_parser)
    status_parser.add_argument("--study", type=Path, default=Path("reports/study"))
    status_parser.add_argument("--resume-dir", default=".resume",
                               help=f"where the runs' resume files are (default: ${RESUME_ENV}, else .resume)")
    collect_parser = commands.add_parser("collect", help="copy each (model, seed)'s newest finished run into "
                                                         "reports/study/")
    collect_parser.set_defaults(handle=_collect)
    collect_parser.add_argument("--repo", type=Path, default=Path("."), help="the repository's root (default: here)")
    collect_parser.add_argument("--out", type=Path, default=Path("reports/study"))
    collect_parser.add_argument("--archives", nargs="+", type=Path, default=[], metavar="PATH",
                                help="also take in runs trained without DVC: <model>-seed-<seed>.tar.gz files "
                                     "written by benchmarks/gpu_check.py --study, or folders of them")
    report_parser = commands.add_parser("report", help="write the study's tables, figure and summaries from "
                                                       "reports/study/")
    report_parser.set_defaults(handle=_report)
    report_parser.add_argument("--study", type=Path, default=Path("reports/study"))
    report_parser.add_argument("--markdown", type=Path, default=Path("reports/study.md"))
    report_parser.add_argument("--figure", type=Path, default=Path("reports/study.png"))
    report_parser.add_argument("--params", default="params.yaml")
    resume_parser = commands.add_parser("resume-files", help="list the resume files of interrupted runs; prune old ones")
    resume_parser.set_defaults(handle=_resume_files)
    resume_parser.add_argument("--dir", default=".resume",
                               help=f"the resume folder (default: ${RESUME_ENV}, else .resume in the repository)")
    resume_parser.add_argument("--prune-older-than", type=float, metavar="DAYS",
                               help="remove the files written more than DAYS days ago")
    register_parser = commands.add_parser("register", help="register the study's rules: a draft, its history "
                                                           "read from git, written once")
    register_parser.set_defaults(handle=_register)
    register_parser.add_argument("draft", type=Path, nargs="?", help="the rules (the last registration, edited)")
    register_parser.add_argument("--out", type=Path, help="reports/study/registration-<n>.yaml")
    register_parser.add_argument("--seal", type=Path, metavar="FILE",
                                 help="record in sealed.tsv the commit that added FILE (commit it first, alone)")
    return parser


def _run(args: argparse.Namespace) -> None:
    if args.jobs < 1:
        raise StudyError(f"--jobs {args.jobs}: expected at least one queue worker")
    models, seeds = _which(args, args.max_runs, f"--max-runs {args.max_runs}; pass --max-runs {{asked}} to queue "
                                                "them (an over-long queue: `dvc queue remove --queued` empties it)")
    if args.slurm:
        overrides = {"partition": args.partition, "time": args.time, "cpus_per_task": args.cpus_per_task,
                     "gpus": args.gpus, "mem": args.mem, "venv": args.venv, "scratch": args.scratch,
                     "remote": args.remote}
        run_slurm(Path("."), models, seeds, args.steps_scale, load_settings(args.slurm_config, overrides),
                  held_runs(Path("."), Path("reports/study"), args.steps_scale))
    else:
        run(models, seeds, args.steps_scale, args.wait, jobs=args.jobs)


def _status(args: argparse.Namespace) -> None:
    if args.study.exists() and not args.study.is_dir():
        raise StudyError(f"--study {args.study}: not a folder; expected the study's folder (reports/study)")
    models, seeds = _which(args, STATUS_RUNS, f"status lists ({STATUS_RUNS:,})")
    for line in status_lines(Path("."), args.study, models, seeds, args.steps_scale,
                             resume_dir=resume_folder(args.resume_dir)):
        print(line)


def _register(args: argparse.Namespace) -> None:
    if args.seal is not None:
        commit = seal(Path("."), args.seal)
        print(f"sealed {args.seal}: registered by {commit}; commit {args.seal.parent / SEALED}")
    elif args.draft is None or args.out is None:
        raise StudyError("register: expected DRAFT --out FILE (write a registration) or --seal FILE")
    else:
        registered = write_registration(args.draft, args.out)
        print(f"wrote {args.out} (sha256 {registered.sha256}); commit it alone, then seal it with "
              f"`python -m rnnlm_study register --seal {args.out}`")


def _resume_files(args: argparse.Namespace) -> None:
    for line in resume_files(resume_folder(args.dir), args.prune_older_than):
        print(line)


def _collect(args: argparse.Namespace) -> None:
    try:
        said = collect(args.repo, args.out, archive_paths(args.archives))
    except CollectFailed as failed:  # the runs that passed are collected; each that failed is one line
        print("\n".join(failed.said), flush=True)
        raise
    for line in said:
        print(line)


def _report(args: argparse.Namespace) -> None:
    from rnnlm_study.judging.moved import read_findings, verdicts_moved
    from rnnlm_study.judging.report import report

    before = read_findings(args.study / "findings.json")
    runs = report(args.study, args.markdown, args.figure, args.params)
    print(f"wrote {args.markdown} and {args.figure}: {sum(not r.quick for r in runs)} full-scale runs, "
          f"{sum(r.quick for r in runs)} quick runs")
    for line in verdicts_moved(before, read_findings(args.study / "findings.json")):
        print(line)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    args.handle(args)
