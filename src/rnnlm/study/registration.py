"""Registered rules: the study's claims frozen in a file before the data that will test them exists.

A registration is `reports/study/registration-<n>.yaml`: per claim its question, logical form, rows,
rules (edge and unit), sensitivity grid and tests; the family-wise level; which seeds are
confirmatory; how the text is resampled; and, read from git once when it was written, when each
claim's rule was first set and changed and when the data it judges was first committed. The file
is committed once and never edited: a rule change is a new registration (`registration-<n+1>.yaml`,
with its own date), and `registering_commit` refuses a file that git shows changed after the commit
that added it. A run is *confirmatory* for a registration when its seed is one the registration
names and the code commit its provenance records descends from that commit (`descends_from`).

Once committed, a registration is *sealed* (`seal`, `python -m rnnlm.study register --seal FILE`): a
line of reports/study/sealed.tsv names the file, its sha256 and the commit that added it. `collect`
then writes into each run's provenance whether its code descends from that commit (it reads git
anyway), so `report` reads the folders alone and any clone, or a copy without git, rebuilds the
same bytes; a test holds sealed.tsv and every provenance to git.

In:  the registration files under reports/study/, sealed.tsv, and git (to seal, and to collect).
Out: `Registration` (the file read and checked, with its sha256 and the sealing commit),
     `registering_commit`, `descends_from`; `write_registration` fills a draft's history from git
     and writes the file; `seal` records its commit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rnnlm.atomic import write_text_atomic
from rnnlm.errors import RnnlmError

FORMS = ("all", "any", "list")
"""A claim's logical form: every part must hold (`all`), one part suffices (`any`), or separate
statements read one by one (`list`, the only form whose verdict may be "mixed")."""

NAME = re.compile(r"^registration-(\d+)\.yaml$")

SEALED = "sealed.tsv"
"""Beside the registrations: file, sha256 and the commit that added it, one line per registration."""


class RegistrationError(RnnlmError):
    """A registration file that is missing, malformed, or edited after it was registered."""


@dataclass(frozen=True)
class RegisteredRule:
    """One rule of a claim: the figure it judges, above an edge or inside a band, its unit and the
    edges (or band half-widths) of its sensitivity grid, in order."""

    name: str
    kind: str  # "above" or "within"
    edge: float  # above: the edge; within: the band's half-width b (inside [-b, +b])
    unit: str
    grid: tuple[float, ...]
    figure: str = ""
    why: str = ""


@dataclass(frozen=True)
class RegisteredClaim:
    number: int
    text: str
    question: str
    form: str
    why_form: str
    rules: dict[str, RegisteredRule]
    confirmatory_rows: tuple[str, ...]  # the rows (models or model pairs) the confirmatory pass judges
    history: dict[str, Any]

    def rule(self, name: str) -> RegisteredRule:
        return self.rules[name]


@dataclass(frozen=True)
class Registration:
    path: Path
    number: int
    date: str
    sha256: str
    level: float
    seeds: tuple[int, ...]
    at_least: int
    block_chars: int
    replicates: int
    generator_seed: int
    claims: dict[int, RegisteredClaim]
    raw: dict[str, Any]
    sealed_by: str | None = None  # the commit that added the file, as sealed.tsv records it

    def claim(self, number: int) -> RegisteredClaim:
        return self.claims[number]


def registrations(study_dir: Path) -> list[Path]:
    """The registration files of `study_dir`, oldest first."""
    found = [p for p in study_dir.glob("registration-*.yaml") if NAME.match(p.name)] if study_dir.is_dir() else []
    return sorted(found, key=lambda p: int(NAME.match(p.name).group(1)))


def _need(mapping: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = mapping.get(key) if isinstance(mapping, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise RegistrationError(f"{where}: no {key!r} of the expected kind; expected a registration file "
                                "written by `python -m rnnlm.study register`")
    return value


def _rule(name: str, raw: Any, where: str) -> RegisteredRule:
    kind = _need(raw, "kind", str, where)
    if kind not in ("above", "within"):
        raise RegistrationError(f"{where}: kind {kind!r}; expected above or within")
    grid = tuple(float(x) for x in _need(raw, "grid", list, where))
    return RegisteredRule(name, kind, float(_need(raw, "edge", (int, float), where)), _need(raw, "unit", str, where),
                          grid, str(raw.get("figure", "")), str(raw.get("why", "")))


def load_registration(path: Path) -> Registration:
    """The registration at `path`, read and checked; RegistrationError naming what is wrong."""
    try:
        data = path.read_bytes()
        raw = yaml.safe_load(data)
    except OSError as error:
        raise RegistrationError(f"{path}: cannot be read ({error.strerror or error})") from None
    except yaml.YAMLError as error:
        raise RegistrationError(f"{path}: does not parse ({str(error).splitlines()[0]})") from None
    where = str(path)
    confirmatory, text = _need(raw, "confirmatory", dict, where), _need(raw, "text_sample", dict, where)
    claims, history = {}, raw.get("history") or {}
    for number, entry in _need(raw, "claims", dict, where).items():
        at = f"{path}: claims.{number}"
        form = _need(entry, "form", str, at)
        if form not in FORMS:
            raise RegistrationError(f"{at}: form {form!r}; expected one of {', '.join(FORMS)}")
        rules = {name: _rule(name, rule, f"{at}.rules.{name}") for name, rule in _need(entry, "rules", dict, at).items()}
        claims[int(number)] = RegisteredClaim(int(number), _need(entry, "text", str, at), _need(entry, "question", str, at),
                                              form, _need(entry, "why_form", str, at), rules,
                                              tuple(entry.get("confirmatory_rows") or ()), history.get(number) or {})
    return Registration(path, int(_need(raw, "registration", int, where)), str(_need(raw, "date", str, where)),
                        hashlib.sha256(data).hexdigest(), float(_need(raw, "level", float, where)),
                        tuple(int(s) for s in _need(confirmatory, "seeds", list, where)),
                        int(_need(confirmatory, "at_least", int, where)),
                        int(_need(text, "block_chars", int, where)), int(_need(text, "replicates", int, where)),
                        int(_need(text, "generator_seed", int, where)), claims, raw)


def sealed(study_dir: Path) -> dict[str, tuple[str, str]]:
    """sealed.tsv of `study_dir`: registration file name -> (its sha256, the commit that added it)."""
    path = study_dir / SEALED
    if not path.is_file():
        return {}
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:] if line.strip()]
    if any(len(row) != 4 for row in rows):
        raise RegistrationError(f"{path}: expected lines of file, sha256, commit and date, tab-separated")
    return {name: (digest, commit) for name, digest, commit, _ in rows}


def current_registration(study_dir: Path) -> Registration:
    """The newest registration of `study_dir`, with the commit sealed.tsv names for it (refused when
    sealed.tsv records other bytes for it: a registration is never edited)."""
    found = registrations(study_dir)
    if not found:
        raise RegistrationError(f"{study_dir}: no registration-<n>.yaml; expected the study's registered rules")
    registration = load_registration(found[-1])
    record = sealed(study_dir).get(registration.path.name)
    if record is None:
        return registration
    if record[0] != registration.sha256:
        raise RegistrationError(f"{registration.path}: its sha256 is not the one {SEALED} sealed ({record[0][:12]}); a "
                                "rule change is a new registration, never an edit")
    return dataclasses.replace(registration, sealed_by=record[1])


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


def registering_commit(repo: Path, path: Path) -> str:
    """The commit that added the registration at `path` (relative to `repo` or absolute), checked:
    the file is committed, exactly one commit ever touched it, and the working copy is those bytes.
    RegistrationError otherwise: a registered file is never edited in place."""
    relative = Path(path).resolve().relative_to(Path(repo).resolve()).as_posix()
    done = _git(repo, "log", "--format=%H", "--follow", "--", relative)
    commits = done.stdout.split()
    if done.returncode != 0 or not commits:
        raise RegistrationError(f"{relative}: not committed; a registration counts from the commit that adds it")
    if len(commits) > 1:
        raise RegistrationError(f"{relative}: changed after the commit that registered it ({commits[-1][:7]}, then "
                                f"{', '.join(c[:7] for c in reversed(commits[:-1]))}); a rule change is a new "
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
    text = draft.read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    lines = [text.rstrip("\n"), "", "# Read from git when this file was written (`python -m rnnlm.study register`).",
             "history:"]
    for number, entry in raw["claims"].items():
        for commit in entry.get("rule_commits", []):
            if not isinstance(commit, str):  # YAML reads 1234567, or 0123456 (octal), as a number
                raise RegistrationError(f"{draft}: claims.{number}.rule_commits: {commit!r} is read as a number; "
                                        "expected each commit as text, quoted where it is all digits ('1234567')")
    for number, entry in raw["claims"].items():
        rules = [_when(repo, c) for c in entry.get("rule_commits", [])]
        data = _first_committed(repo, [f"reports/study/{m}" for m in entry.get("data_models", [])])
        lines.append(f"  {number}:")  # commits quoted: a hash's first 12 digits can all be decimal ones
        lines.append("    rule_set: [" + ", ".join(f"{{commit: '{r['commit']}', date: '{r['date']}'}}" for r in rules) + "]")
        lines.append("    data_first_committed: " + ("null" if data is None else
                                                     f"{{commit: '{data['commit']}', date: '{data['date']}'}}"))
    write_text_atomic(out, "\n".join(lines) + "\n")
    return load_registration(out)


def code_record(repo: Path, registration: Registration | None, seed: int, commit: str) -> dict[str, object]:
    """What a run's provenance says of the study's sealed registration, for a seed it names: the
    registration, its commit, and whether the code the run was trained on (`commit`) descends from
    it (read with git here, so that `report` needs none); nothing for another seed or no sealed one."""
    if registration is None or registration.sealed_by is None or seed not in registration.seeds:
        return {}
    return {"registration": {"file": registration.path.name, "commit": registration.sealed_by,
                             "code_descends": bool(commit) and descends_from(repo, commit, registration.sealed_by)}}
