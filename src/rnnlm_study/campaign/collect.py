"""`collect`: every (model, seed)'s newest finished run, copied from git into `reports/study/`.

The runs are what `rnnlm_study.campaign.experiments` finds in git (DVC experiments and committed repros).

For each (model, seed) the newest run (by commit date) is copied, file by file, from the commit into
its folder (`FOLDER`: the params, the training metrics and curves, the evaluation, both reports of
the samples), with a `provenance.json`: the run's commit and experiment name, the commit it was run
from, its date, seed, device, processor, GEMM and training seconds, its steps scale, and what wrote
it. Runs at `train.steps_scale` 1 (full scale) go to `reports/study/<model>/seed-<seed>/`, one
folder per seed, so one seed's run never replaces another's; others (quick runs) to
`reports/study/quick/<model>/`, the newest whatever its seed, so a quick run never replaces a full
one. A folder is replaced only by a newer run than the one it holds.

A folder is written whole, checked by the report's own checks, and only then swapped in
(`rnnlm_study.campaign.swap`): a run that fails leaves the folder as it was, is named in one line with its file
and problem, and makes `collect` exit non-zero, while the runs that pass are still collected.

`--archives` also takes in runs trained where there is no DVC (a lent GPU machine):
`benchmarks/gpu_check.py --study` packs each as `<model>-seed-<seed>.tar.gz` holding the same files
and a provenance naming the GPU; `collect_archive` reads it (`rnnlm_study.campaign.archive`, which
checks that its folder, params, training metrics and provenance name one run) and writes it through
the same swap, the archive's name and checksum in its provenance.

Everything else is read with git (`git for-each-ref`, `git show`), so the experiments need not be in
the workspace: `dvc exp pull origin NAME` brings another machine's run here as a ref.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import NamedTuple


from rnnlm_study.campaign.archive import ARCHIVE_MADE_BY, read_archive
from rnnlm_study.campaign.experiments import CollectError, CommitFiles, Run, find_runs, newest
from rnnlm_study.folders import FOLDER, REQUIRED, StudyFolderError, load_run
from rnnlm_study.piece_counts import other_tokenizer_folders
from rnnlm_study.registration import Registration, registrations
from rnnlm_study.registration_git import code_record, sealed_registrations
from rnnlm_study.study_run import provenance_date
from rnnlm_study.campaign.swap import mend, write_folder
from rnnlm.params_base import parse_yaml

COLLECTED_BY = "python -m rnnlm_study collect"


def provenance(repo: Path, files: CommitFiles, run: Run, registered: Sequence[Registration] = ()) -> dict[str, object]:
    """The provenance.json of `run`, a commit of `repo` read through `files`: the run, the machines and
    seconds of its training metrics, and what git says of the registration (`code_record`)."""
    train = json.loads(files.text(run.rev, FOLDER["train_metrics.json"]) or "{}")
    return {
        "model": run.model,
        "seed": run.seed,
        "steps_scale": run.steps_scale,
        "experiment": run.experiment,
        "rev": run.rev,
        "commit": run.baseline,
        "date": run.date,
        "device": train.get("device"),
        "processor": train.get("processor"),
        "gemm": train.get("gemm"),
        **_machines(train),
        "train_seconds": train.get("seconds"),
        "made_by": COLLECTED_BY,
        **code_record(repo, registered, run.seed, run.baseline),
    }


def _machines(train: dict) -> dict[str, object]:
    """`machines` of the training metrics (each machine the run trained on, from which epoch: more
    than one where it resumed on another CPU or GEMM), where the run recorded them."""
    return {"machines": train["machines"]} if train.get("machines") else {}


class Outcome(NamedTuple):
    """What collecting one run did: the run's label ("astra_gamma seed 4"), what was done ("up to
    date (...)", "wrote ..."), and whether the run was new to its folder (written where the folder
    held no run or an older one)."""
    label: str
    done: str
    new: bool

    @property
    def line(self) -> str:
        """The line `collect` says of the run."""
        return f"{self.label}: {self.done}"


class CollectFailed(CollectError):
    """Some runs could not be collected (each named in one line); the others were."""

    def __init__(self, said: list[str], failures: list[str]):
        super().__init__("\nerror: ".join(failures))
        self.said, self.failures = said, failures


def _held(folder: Path) -> dict | None:
    """The provenance the folder holds, or None when it has none or a damaged one (not JSON, not a
    mapping, or a date that does not parse): such a folder is replaced like an empty one."""
    path = folder / "provenance.json"
    try:
        held = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None
    if not isinstance(held, dict) or ("date" in held and provenance_date(held["date"]) is None):
        return None
    return held


def _complete(folder: Path, held: dict) -> bool:
    """Whether every file the folder's provenance lists is there (a folder is complete only then; a
    list that is not one of names, complete never: collecting the run again mends it)."""
    files = held.get("files", REQUIRED)
    if not isinstance(files, (list, frozenset)) or not all(isinstance(name, str) for name in files):
        return False
    return all((folder / name).is_file() for name in files)


@contextlib.contextmanager
def _one_at_a_time(repo: Path):
    """Hold the repository's collect lock (`.git/rnnlm-collect.lock`, an flock the system drops when
    its holder dies): a second `collect` waits for the first instead of rewriting the same folders."""
    with open(repo / ".git" / "rnnlm-collect.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("waiting for another `collect` of this repository to finish", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _checked(label: str, model: str, seed: int, quick: bool) -> Callable[[Path], None]:
    """The check a run's folder must pass before it replaces anything: the report's own
    (`rnnlm_study.folders.load_run`), as a one-line CollectError naming the run, file and problem."""
    def check(partial: Path) -> None:
        try:
            load_run(partial, model, None if quick else seed, quick)
        except StudyFolderError as error:
            why = str(error).replace(str(partial) + "/", "").split("; expected")[0]
            raise CollectError(f"{label}: not collected, its {why}; the study folder keeps what it held") from None
    return check


def run_files(files: CommitFiles, run: Run) -> dict[str, str]:
    """The study folder's files of `run`, read from its commit (older runs lack the `OPTIONAL` ones)."""
    texts = {name: files.text(run.rev, path) for name, path in FOLDER.items()}
    return {name: text for name, text in texts.items() if text is not None}


def _replace(folder: Path, label: str, source: str, same: Callable[[dict], bool], date: str,
             write: Callable[[], None]) -> Outcome:
    """Write a run into `folder` through `write()` unless the folder holds it already (`same(held
    provenance)`) or a newer run; returns what was done."""
    held = _held(folder)
    if held is not None and same(held):
        if _complete(folder, held):
            return Outcome(label, f"up to date ({source})", new=False)
        write()
        return Outcome(label, f"rewrote {folder}, which lacked some of its files, from {source}", new=False)
    if held is not None and "date" in held and provenance_date(held["date"]) > datetime.fromisoformat(date):
        return Outcome(label, f"kept the newer run already in {folder} (found {source}, of {date})", new=False)
    write()
    return Outcome(label, f"wrote {folder} from {source}", new=True)


def collect_archive(path: Path, out: Path, repo: Path = Path("."),
                    registered: Sequence[Registration] = ()) -> Outcome:
    """Write the run in the archive at `path` (`read_archive`) into its study folder under `out`,
    unless the folder holds it already or a newer run; returns what was done. Its
    provenance is the archive's (the GPU, library versions, stage times, how many runs shared the
    GPU, that the checkpoint stayed behind) with the training metrics' device, processor, GEMM and
    seconds, the archive's name and checksum, and this command as the collector."""
    folder_name, files, record = read_archive(path)
    params, train = parse_yaml(files["params.yaml"]), json.loads(files["train_metrics.json"])
    steps_scale = float(params.get("train", {}).get("steps_scale", 1.0))
    run = Run(rev="", experiment=None, baseline=str(record.get("commit", "")), date=str(record.get("date")),
              model=params["model"], seed=int(params["seed"]), steps_scale=steps_scale)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    merged = {**record, "model": run.model, "seed": run.seed, "steps_scale": steps_scale,
              "device": train.get("device"), "processor": train.get("processor"), "gemm": train.get("gemm"),
              **_machines(train), "train_seconds": train.get("seconds"),
              "archive": path.name, "archive_sha256": digest,
              "run_by": record.get("made_by", ARCHIVE_MADE_BY), "made_by": f"{COLLECTED_BY} --archives",
              **code_record(repo, registered, run.seed, run.baseline)}
    folder = run.folder(out)
    check = _checked(f"{_label(run)} (archive {path.name})", run.model, run.seed, not run.full)
    return _replace(folder, _label(run), f"archive {path.name}",
                    lambda held: held.get("archive_sha256") == digest and held.get("registration") ==
                    merged.get("registration"), run.date, lambda: write_folder(files, merged, folder, check))


def collect(repo: str | Path = ".", out: str | Path = "reports/study", archives: list[str | Path] = ()) -> list[str]:
    """Write each (model, seed)'s newest run into its study folder, after mending what an interrupted
    collect left, then each archive's run (`collect_archive`); returns one line per folder saying
    what was done."""
    repo, out = Path(repo), Path(out)
    if not (repo / ".git").is_dir():
        raise CollectError(f"{repo}: not a git repository; expected the root of a clone of this project")
    if out.exists() and not out.is_dir():
        raise CollectError(f"--out {out}: not a folder; expected the study's folder (reports/study)")
    with _one_at_a_time(repo):
        return _collect(repo, out, archives)


def _collect(repo: Path, out: Path, archives: list[str | Path]) -> list[str]:
    """`collect`'s work, under its lock: mend `out`, write each experiment's newest run, then each
    archive's; the lines it says, or CollectFailed with them and the runs it could not collect."""
    said = mend(out) if out.is_dir() else []
    refused: list[str] = []
    failures: list[str] = []
    runs = find_runs(repo, refused)
    said += refused
    registered = sealed_registrations(out) if registrations(out) else []
    outcomes: list[Outcome] = []
    with CommitFiles(repo) as files:
        for _, run in sorted(newest(runs).items(), key=lambda item: _folder_order(*item[0])):
            try:
                outcomes.append(_collect_run(repo, files, out, run, registered))
            except CollectError as error:
                failures.append(str(error))
    for path in archives:
        try:
            outcomes.append(collect_archive(Path(path), out, repo, registered))
        except CollectError as error:
            failures.append(str(error))
    notes = tokenizer_notes(out)
    said += [outcome.line for outcome in outcomes]
    said += [notes[outcome.label] for outcome in outcomes if outcome.new and outcome.label in notes]
    if failures:
        raise CollectFailed(said, failures)
    return said


def _folder_order(model: str, seed: int | None) -> tuple[str, bool, int]:
    """The order `collect` writes the study's folders in: by model, its seeds ascending, its quick
    runs' folder (seed None) last."""
    return model, seed is None, seed or 0


def _collect_run(repo: Path, files: CommitFiles, out: Path, run: Run, registered: Sequence[Registration]) -> Outcome:
    """Write `run` (an experiment or commit of `repo`, read through `files`) into its folder of `out`
    unless the folder holds it already (the same commit read under the same registration) or a newer
    run; returns what was done."""
    folder, record = run.folder(out), provenance(repo, files, run, registered)

    def same(held: dict) -> bool:
        return held.get("rev") == run.rev and held.get("registration") == record.get("registration")

    def write() -> None:
        write_folder(run_files(files, run), record, folder, _checked(_label(run), run.model, run.seed, not run.full))

    return _replace(folder, _label(run), run.experiment or f"commit {run.rev[:7]}", same, run.date, write)


def tokenizer_notes(out: Path) -> dict[str, str]:
    """Per SentencePiece run under `out` tokenized by another SentencePiece than most
    (`rnnlm_study.piece_counts`: the report leaves it out of the claims), its label ("scribe_gamma
    seed 1") -> the line `collect` says of it."""
    return {f"{model} seed {seed}": f"{model} seed {seed}: {why}: marked and left out of the study's claims"
            for (model, seed), why in other_tokenizer_folders(out).items()}


def _label(run: Run) -> str:
    return f"{run.model} seed {run.seed}" if run.full else f"{run.model} (quick, steps scale {run.steps_scale:g})"
