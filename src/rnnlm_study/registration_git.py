"""The registrations as git holds them: which one counts, and which runs were trained after it.

What counts is read from git alone (`sealed_registrations`): every registration file committed,
each as the bytes of the one commit that added it (`registering_commit` refuses a file that git
shows changed after that commit, or that the working copy holds otherwise), and
reports/study/sealed.tsv (`seal`, written by `python -m rnnlm_study register --seal FILE` after that
commit) recording each with those bytes' sha256 and that commit, as git does; an edit, an
uncommitted registration or a sealed.tsv that disagrees is refused. A run is *confirmatory* for a
registration when its seed is one the registration names and the commit its provenance records,
which git must hold, descends from the commit that added it (`trained_after`, asked of git by the
report). `collect` also writes that answer into the run's provenance (`code_record`), for a reader
of the folder; the report holds it to git and refuses a folder whose record git does not bear out.

In:  the registration files under reports/study/, sealed.tsv, and git.
Out: `sealed_registrations` (every one, oldest first), `current_registration` (the newest),
     `registering_commit`, `descends_from`, `trained_after`, `code_record`;
     `write_registration` fills a draft's history from git and writes the file; `seal` records its
     commit.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rnnlm.atomic import write_text_atomic
from rnnlm_study.registration import (NAME, SEALED, Registration, RegistrationError, load_registration,
                                      parse_registration, registrations)


def sealed(study_dir: Path) -> dict[str, tuple[str, str]]:
    """sealed.tsv of `study_dir`: registration file name -> (its sha256, the commit that added it)."""
    path = study_dir / SEALED
    if not path.is_file():
        return {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise RegistrationError(f"{path}: cannot be read ({why}); expected lines of file, sha256, commit and date, "
                                "tab-separated") from None
    rows = [line.split("\t") for line in lines[1:] if line.strip()]
    if not lines or lines[0].split("\t") != ["file", "sha256", "commit", "date"] or any(len(row) != 4 for row in rows):
        raise RegistrationError(f"{path}: expected a header line, then lines of file, sha256, commit and date, "
                                "tab-separated")
    return {name: (digest, commit) for name, digest, commit, _ in rows}


def repository_of(folder: Path) -> Path:
    """The root of the git repository that holds `folder`; RegistrationError when none does."""
    done = _git(folder, "rev-parse", "--show-toplevel") if folder.is_dir() else None
    if done is None or done.returncode != 0:
        raise RegistrationError(f"{folder}: not inside a git repository; expected a clone of the study's repository "
                                "(what is registered, and which runs came after it, is read from git)")
    return Path(done.stdout.strip())


def _committed_registrations(repo: Path, study_dir: Path) -> set[str]:
    """The registration files that HEAD's tree holds in `study_dir`."""
    relative = study_dir.resolve().relative_to(repo.resolve()).as_posix()
    done = _git(repo, "ls-tree", "--name-only", "HEAD", "--", f"{relative}/")
    return {Path(line).name for line in done.stdout.splitlines() if NAME.match(Path(line).name)}


def sealed_registrations(study_dir: Path) -> list[Registration]:
    """The study's registrations as git holds them, oldest first: every registration-<n>.yaml of
    `study_dir` committed (none only in the working copy, none deleted from it), each as the bytes of
    the one commit that added it, and sealed.tsv recording each with those bytes' sha256 and that
    commit. Each is read from git, with that commit (`sealed_by`); anything else is a
    RegistrationError, since the verdicts turn on which rules count and from when."""
    repo = repository_of(study_dir)
    here = {p.name for p in registrations(study_dir)}
    committed = _committed_registrations(repo, study_dir)
    if here and not committed:
        raise RegistrationError(f"{study_dir}: none of its registrations is committed in the git repository it lies in "
                                f"({repo}{_git_dir_note()}): an export or a copy inside another clone, or GIT_DIR "
                                "pointing elsewhere; expected a clone of the study's own repository (seal nothing here)")
    for name in sorted(here - committed):
        raise RegistrationError(f"{study_dir / name}: not committed; a registration counts from the commit that adds "
                                "it (commit it, then `python -m rnnlm_study register --seal`), or remove it")
    for name in sorted(committed - here):
        raise RegistrationError(f"{study_dir / name}: committed but missing here; expected the registered file "
                                f"(`git checkout -- {study_dir / name}`)")
    if not here:
        raise RegistrationError(f"{study_dir}: no registration-<n>.yaml; expected the study's registered rules")
    table, found = sealed(study_dir), []
    for path in registrations(study_dir):
        commit = registering_commit(repo, path)
        relative = path.resolve().relative_to(repo.resolve()).as_posix()
        data = subprocess.run(["git", "show", f"{commit}:{relative}"], cwd=repo, capture_output=True).stdout
        registration = parse_registration(data, path)
        record = table.get(path.name)
        if record is None:
            raise RegistrationError(f"{study_dir / SEALED}: no line for {path.name}; expected each registration "
                                    f"sealed (`python -m rnnlm_study register --seal {relative}`, then commit)")
        if record != (registration.sha256, commit):
            raise RegistrationError(f"{study_dir / SEALED}: records {path.name} as {record[0][:12]} added by "
                                    f"{record[1][:12]}, but git holds {registration.sha256[:12]} added by {commit[:12]}; "
                                    "a registration is sealed once, by the commit that added it, and never edited")
        found.append(dataclasses.replace(registration, sealed_by=commit, sealed_date=_when(repo, commit)["date"]))
    if found[0].scope is not None:
        raise RegistrationError(f"{found[0].path}: the first registration has a scope; expected it to register "
                                "every claim (a later one may judge some again)")
    for later in found[1:]:
        if later.scope is None:
            raise RegistrationError(f"{later.path}: no scope; expected a later registration to name the claims it "
                                    "judges again (scope: [4]), each on seeds of its own")
        shared = sorted(set(later.seeds) & {s for earlier in found[:found.index(later)] for s in earlier.seeds})
        if shared:
            raise RegistrationError(f"{later.path}: names seeds {shared}, which an earlier registration names; "
                                    "expected fresh seeds (a pass never pools another's seeds)")
    return found


def current_registration(study_dir: Path) -> Registration:
    """The newest of `sealed_registrations`."""
    return sealed_registrations(study_dir)[-1]


def seal(repo: Path, path: Path) -> str:
    """Record in sealed.tsv beside `path` the commit that added it (`registering_commit`); returns it."""
    commit = registering_commit(repo, path)
    registration = load_registration(path)
    table = path.parent / SEALED
    if path.name in sealed(path.parent):
        raise RegistrationError(f"{table}: {path.name} is sealed already")
    head = "" if table.is_file() else "file\tsha256\tcommit\tdate\n"
    date = _git(repo, "show", "-s", "--format=%cI", commit).stdout.strip()
    text = (table.read_text(encoding="utf-8") if table.is_file() else "") + head
    write_text_atomic(table, text + f"{path.name}\t{registration.sha256}\t{commit}\t{date}\n")
    return commit


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def _git_dir_note() -> str:
    """", read through GIT_DIR=..." where the environment points git elsewhere, else ""."""
    return f", read through GIT_DIR={os.environ['GIT_DIR']}" if os.environ.get("GIT_DIR") else ""


def _cut_at(repo: Path, commit: str) -> bool:
    """Whether `commit` is where a shallow clone's history stops (`git clone --depth`): git then says
    it added every file it holds, whichever commit really did."""
    if _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() != "true":
        return False
    boundary = Path(_git(repo, "rev-parse", "--git-path", "shallow").stdout.strip())
    boundary = boundary if boundary.is_absolute() else Path(repo) / boundary
    return boundary.is_file() and commit in boundary.read_text(encoding="ascii").split()


def _short_list(commits: list[str], most: int = 3) -> str:
    """At most `most` commits, short, then how many more."""
    shown = ", ".join(c[:7] for c in commits[:most])
    return shown + (f" and {len(commits) - most} more" if len(commits) > most else "")


def registering_commit(repo: Path, path: Path) -> str:
    """The commit that added the registration at `path` (relative to `repo` or absolute), checked:
    the file is committed, exactly one commit ever touched it, and the working copy is those bytes.
    RegistrationError otherwise: a registered file is never edited in place."""
    if not Path(path).is_file() or not NAME.match(Path(path).name):
        raise RegistrationError(f"{path}: not a registration file; expected one file named registration-<n>.yaml "
                                "(say reports/study/registration-2.yaml)")
    try:
        relative = Path(path).resolve().relative_to(Path(repo).resolve()).as_posix()
    except ValueError:
        raise RegistrationError(f"{path}: outside the repository {repo}; expected a registration file of the study "
                                "in this repository") from None
    # The path's own history: `--follow` would also count the commits of a file it was copied from,
    # as a new registration written from an older one is.
    done = _git(repo, "log", "--format=%H", "--", relative)
    commits = done.stdout.split()
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no reason given"])[0]
        raise RegistrationError(f"{relative}: git cannot read its history in {repo} ({why}); expected a complete clone "
                                "(`git fetch`, or a fresh clone where `git fsck` finds objects missing)")
    if not commits:
        raise RegistrationError(f"{relative}: not committed in {repo}{_git_dir_note()}; a registration counts from the "
                                "commit that adds it")
    if _cut_at(repo, commits[-1]):
        raise RegistrationError(f"{relative}: git's history in {repo} is cut short (a shallow clone) at {commits[-1][:7]}, "
                                "so the commit that added it cannot be read; expected the whole history "
                                "(`git fetch --unshallow`)")
    moved = [line.split("\t")[1] for line in _git(repo, "show", "--format=", "--name-status", "-M", commits[-1]
                                                   ).stdout.splitlines() if line.startswith("R") and
             line.split("\t")[-1] == relative]
    if moved:
        raise RegistrationError(f"{relative}: renamed from {moved[0]} by {commits[-1][:7]}; a registration keeps the "
                                "name of the commit that added it")
    if len(commits) > 1:
        raise RegistrationError(f"{relative}: changed after the commit that registered it ({commits[-1][:7]}, then "
                                f"{_short_list(list(reversed(commits[:-1])))}); a rule change is a new "
                                "registration, never an edit")
    committed = subprocess.run(["git", "show", f"{commits[0]}:{relative}"], cwd=repo, capture_output=True).stdout
    if committed != (Path(repo) / relative).read_bytes():
        raise RegistrationError(f"{relative}: differs from the registered file of {commits[0][:7]}; a rule change is "
                                "a new registration, never an edit")
    return commits[0]


def descends_from(repo: Path, commit: str, ancestor: str) -> bool:
    """Whether `commit` is `ancestor` or one of its descendants (False for a commit git lacks)."""
    return _git(repo, "merge-base", "--is-ancestor", ancestor, commit).returncode == 0


def _when(repo: Path, commit: str) -> dict[str, str]:
    done = _git(repo, "show", "-s", "--format=%H %cI", commit)
    if done.returncode != 0:
        raise RegistrationError(f"commit {commit}: not in this repository; expected a commit that set a rule")
    full, date = done.stdout.split()
    return {"commit": full[:12], "date": date}


def _first_committed(repo: Path, folders: list[str]) -> dict[str, str] | None:
    """The first commit that added a file under any of `folders`."""
    done = _git(repo, "log", "--diff-filter=A", "--reverse", "--format=%H %cI", "--", *folders)
    lines = done.stdout.split("\n")
    if done.returncode != 0 or not lines[0]:
        return None
    full, date = lines[0].split()
    return {"commit": full[:12], "date": date}


def write_registration(draft: Path, out: Path, repo: Path = Path(".")) -> Registration:
    """Fill the draft's `history` from git and write it to `out` (which must not exist yet): per
    claim, the commit and date of each commit its `rule_commits` name, and the first commit that
    added a run folder of any model its `data_models` name. The draft's other text is kept."""
    if out.exists():
        raise RegistrationError(f"{out}: exists; a registration is never rewritten (write registration-<n+1>.yaml)")
    text, claims = _read_draft(draft)
    lines = [text.rstrip("\n"), "", "# Read from git when this file was written (`python -m rnnlm_study register`).",
             "history:", *_history_lines(repo, claims)]
    written = "\n".join(lines) + "\n"
    parse_registration(written.encode(), out)  # refused whole, before anything is written
    write_text_atomic(out, written)
    return load_registration(out)


def _read_draft(draft: Path) -> tuple[str, dict[Any, dict[str, Any]]]:
    """(its text, its claims) of the draft at `draft`: YAML with a mapping of claims and no history,
    each claim's `rule_commits` a list of commits written as text and its `data_models` a list;
    else RegistrationError saying what to mend."""
    try:
        text = draft.read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        why = error.strerror if isinstance(error, OSError) else str(error).splitlines()[0]
        raise RegistrationError(f"{draft}: cannot be read ({why}); expected a draft: the last registration, "
                                "edited") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("claims"), dict) or "history" in raw:
        raise RegistrationError(f"{draft}: expected a draft with a mapping of claims and no history (the last "
                                "registration, edited, its history removed: it is read from git)")
    for number, entry in raw["claims"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("rule_commits", []), list) or not isinstance(
                entry.get("data_models", []), list):
            raise RegistrationError(f"{draft}: claims.{number}: expected a mapping whose rule_commits and data_models "
                                    "are lists")
        numbers = [commit for commit in entry.get("rule_commits", []) if not isinstance(commit, str)]
        if numbers:  # YAML reads 1234567, or 0123456 (octal), as a number
            raise RegistrationError(f"{draft}: claims.{number}.rule_commits: {numbers[0]!r} is read as a number; "
                                    "expected each commit as text, quoted where it is all digits ('1234567')")
    return text, raw["claims"]


def _history_lines(repo: Path, claims: dict[Any, dict[str, Any]]) -> list[str]:
    """The `history:` entries of `claims`, as YAML lines read from git: per claim, when each of its
    rule commits was made and when a run folder of its data models was first committed."""
    lines = []
    for number, entry in claims.items():
        rules = [_when(repo, c) for c in entry.get("rule_commits", [])]
        data = _first_committed(repo, [f"reports/study/{m}" for m in entry.get("data_models", [])])
        lines.append(f"  {number}:")  # commits quoted: a hash's first 12 digits can all be decimal ones
        lines.append("    rule_set: [" + ", ".join(f"{{commit: '{r['commit']}', date: '{r['date']}'}}" for r in rules) + "]")
        lines.append("    data_first_committed: " + ("null" if data is None else
                                                     f"{{commit: '{data['commit']}', date: '{data['date']}'}}"))
    return lines


def _holds_commit(repo: Path, commit: object) -> bool:
    return isinstance(commit, str) and bool(commit) and _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0


def trained_after(repo: Path, registration: Registration, seed: int, provenance: dict[str, Any], where: Path) -> bool:
    """Whether a run is confirmatory for `registration`, asked of git alone: its seed is one the
    registration names and the commit its provenance records (which git must hold) descends from the
    commit that added the registration. A `registration` record the provenance carries (collect writes
    one) must say what git says, of the file it names; else a RegistrationError naming `where`."""
    record, commit = provenance.get("registration"), provenance.get("commit")
    if seed not in registration.seeds and record is None:
        return False
    if not _holds_commit(repo, commit):
        raise RegistrationError(f"{where}: records the commit {commit!r}, which this repository does not hold; "
                                "expected the commit the run was trained on (a run of a registered seed is "
                                "confirmatory only when git shows that commit descends from the registration)")
    descends = descends_from(repo, commit, registration.sealed_by)
    if record is not None:
        _check_code_record(repo, registration, record, commit, descends, where)
    return seed in registration.seeds and descends


def _check_code_record(repo: Path, registration: Registration, record: dict[str, Any], commit: str,
                       descends: bool, where: Path) -> None:
    """Raise a RegistrationError naming `where` unless the `registration` record of a run's provenance
    (`code_record`: file, commit, code_descends) says what git says of the registration file it names
    and of the run's `commit`. `descends`: whether `commit` descends from `registration`'s own commit,
    which `current_registration` has checked already (most records name that file)."""
    named = registration.path.parent / str(record.get("file"))
    if record.get("file") == registration.path.name:  # the registration this pass has read from git
        added, named_descends = registration.sealed_by, descends
    else:
        added = registering_commit(repo, named) if NAME.match(named.name) and named.is_file() else None
        named_descends = added is not None and descends_from(repo, commit, added)
    if added is not None and record.get("commit") == added and record.get("code_descends") is named_descends:
        return
    if added is None:
        which = " (no such registration)"
    elif record.get("commit") != added:
        which = f" ({named.name} was added by {added[:7]})"
    else:
        which = ""
    said = "descends" if record.get("code_descends") else "does not descend"
    raise RegistrationError(f"{where}: says its code {said} from {record.get('file')} "
                            f"({str(record.get('commit'))[:7]}), which git does not bear out{which}; expected the "
                            "record `collect` writes from git (collect the run again)")


def code_record(repo: Path, registered: Sequence[Registration], seed: int, commit: str) -> dict[str, object]:
    """What a run's provenance says of the sealed registration of `registered` that names its seed
    (the newest that does): the registration, its commit, and whether the code the run was trained
    on (`commit`) descends from it (read with git here, so that `report` needs none); nothing for a
    seed none names."""
    naming = [r for r in registered if r.sealed_by is not None and seed in r.seeds]
    if not naming:
        return {}
    chosen = naming[-1]
    return {"registration": {"file": chosen.path.name, "commit": chosen.sealed_by,
                             "code_descends": bool(commit) and descends_from(repo, commit, chosen.sealed_by)}}
