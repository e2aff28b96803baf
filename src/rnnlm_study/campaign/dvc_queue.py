"""DVC's experiment queue in a repository, read from its files: its entries, and which of its workers
and runs are alive.

Not through `dvc queue status`. That command also asks the workers what they run, by writing a
control message into the queue's folder for each worker to read, and kombu's filesystem transport
(DVC's broker) lets a worker take a message file before its writer has filled it: the worker then
stops with "Unrecoverable error: JSONDecodeError" and takes no further run (treeverse/dvc-task#73):
the run it has goes on to its end, and the runs queued behind it wait for a worker that never comes.
Polling that command makes it likely. (Queuing a run beside a busy worker writes a message the same
way, once per run queued.) DVC's worker asks itself too: its monitor thread (dvc-task's
`TemporaryWorker.monitor`) inspects it every 10 s to learn whether the queue is empty, so a worker
can stop with nothing else writing, and one busy with the queue's only run can find the queue empty
and be told to shut down after it (what the study's runs met: docs/study-log.md). That we cannot
prevent from outside DVC; a worker whose log says it will take no further run counts as
stopped (`WORKER_STOPPED`), `status` says when queued runs have no worker to take them, and
`run --wait` starts one.

Here nothing is written: the entries come from DVC's own reader of the queue's message and result
files (`celery_queue.status()`, what `dvc queue status` prints), and whether a worker or a run is
alive from the records DVC's process manager (dvc-task) keeps of each, a process id checked against
the processes running now.

DVC's reader goes through every message the queue has ever held, so its cost grows with the queue's
history (seconds a call once a queue has held a study's runs); `busy` answers from the process
records alone, for a caller that polls while runs train.

A run can train with no entry listing it: a worker took a message whose entry was removed (a worker
started later runs a seed removed before it, ahead of the run it was started for, when `dvc queue
remove NAME` took that name's failed entry, which DVC resolves a name to before a queued one: see
`status`). `read` names
such runs and their processes, so that `status` can say what holds the worker.

In:  the repository's root.
Out: `read(repo)`, a `QueueState`; `busy(repo)`, whether a worker and a run of the queue are alive.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from rnnlm.errors import RnnlmError

EXPS = Path(".dvc/tmp/exps")
WORKER_STOPPED = ("Unrecoverable error", "Got shutdown from remote")
"""What celery logs when a worker will take no further run (it finishes the one it has, then exits):
its consumer died, or it was told to shut down, as DVC's monitor thread does when it finds the queue
empty ("monitor: shutting down due to empty queue", which a worker busy with the queue's only run
can read, and then take none of the runs queued after it)."""
WORKER_READY = "ready."
RANK = {"Running": 2, "Queued": 1}
"""Which of a name's entries `QueueState.by_name` keeps: the running one, else the queued one."""


@dataclass(frozen=True)
class Task:
    """One entry of the queue: its stash revision (the task id; `dvc queue status` prints its first 7
    characters), its experiment's name and DVC's status (Queued, Running, Success, Failed), and, for a
    Running one, whether the process that runs it is alive (a Running entry whose process is gone was
    cut off: its worker's session ended, or the process was killed)."""

    rev: str
    name: str
    status: str
    alive: bool = False


@dataclass(frozen=True)
class Unlisted:
    """A run alive in the queue's worker that DVC's listing does not hold as running: its entry was
    removed (`dvc queue remove`), yet a worker took its message and runs it. It holds that worker
    until it ends, ahead of every run in line. `pids`: its process and those it started (the
    stage's), the ones to stop."""

    name: str
    pids: tuple[int, ...]


@dataclass(frozen=True)
class QueueState:
    """The queue's entries in DVC's order, the workers whose process is alive, how many of those have
    stopped taking runs (their consumer died: each finishes the run it has, then exits), and the runs
    alive that the listing does not hold."""

    tasks: list[Task]
    workers: int
    stopped: int = 0
    unlisted: tuple[Unlisted, ...] = ()

    @property
    def training(self) -> int:
        """How many runs are training now (a Running entry whose process is alive, or one unlisted)."""
        return sum(task.alive for task in self.tasks) + len(self.unlisted)

    @property
    def idle(self) -> int:
        """Workers alive with no run of their own: one about to exit, its queue empty."""
        return max(0, self.workers - self.training)

    @property
    def taking(self) -> int:
        """Workers that will take the next queued run when theirs ends."""
        return self.workers - self.stopped

    @property
    def pending(self) -> set[str]:
        """The names queued or running (a name queued again after a failure is listed twice)."""
        return {task.name for task in self.tasks if task.status in ("Queued", "Running")}

    @property
    def queued(self) -> list[str]:
        """The names waiting for a worker, sorted."""
        return sorted({task.name for task in self.tasks if task.status == "Queued"})

    def in_line(self) -> list[str]:
        """The names of the entries waiting for a worker, in the order a worker takes them: DVC lists
        them in its broker's order, its message files' names sorted as text. Those names begin with
        the milliseconds since the machine started (kombu's filesystem transport), so a run queued
        later goes first when its count has more digits but a smaller first one, and after a reboot.
        A name queued twice (DVC allows it) is listed twice: it would train twice."""
        return [task.name for task in self.tasks if task.status == "Queued"]

    def by_name(self) -> dict[str, Task]:
        """name -> its entry; of a name queued again after a failure, the running entry, else the
        queued one, else the last listed."""
        found: dict[str, Task] = {}
        for task in self.tasks:
            kept = found.get(task.name)
            if kept is None or RANK.get(task.status, 0) >= RANK.get(kept.status, 0):
                found[task.name] = task
        return found


def read(repo: Path) -> QueueState:
    """The queue of the DVC repository at `repo`, asking nothing of its workers."""
    entries = _entries(repo)
    exps = repo / EXPS
    workers = _live_workers(exps)
    tasks = [Task(entry["rev"], entry["name"] or entry["rev"][:7], entry["status"],
                  entry["status"] == "Running" and _running(exps / "run" / entry["rev"] / f"{entry['rev']}.json",
                                                            entry["rev"], bool(workers)))
             for entry in entries]
    stopped = sum(_stopped(record.with_suffix(".out")) for record in workers)
    listed = {task.rev for task in tasks if task.status == "Running"}
    return QueueState(tasks, len(workers), stopped, tuple(_unlisted(exps, listed)))


def _unlisted(exps: Path, listed: set[str]) -> list[Unlisted]:
    """The runs whose process record names a live process but whose revision is not in `listed`,
    each named by its run file (`<rev>.run`, JSON holding "name")."""
    found = []
    for record in _run_records(exps):
        rev = record.stem
        process = None if rev in listed else _process(record, rev)
        if process is None:
            continue
        try:
            name = json.loads(record.with_suffix(".run").read_text(encoding="utf-8"))["name"]
            pids = (process.pid, *(child.pid for child in process.children(recursive=True)))
        except (OSError, ValueError, KeyError, TypeError, psutil.Error):
            continue  # ended, or its run file not written yet: nothing to stop
        found.append(Unlisted(name or rev[:7], pids))
    return found


def _run_records(exps: Path) -> list[Path]:
    """dvc-task's process records of the queue's runs, `run/<rev>/<rev>.json`, by revision."""
    return [record for record in sorted((exps / "run").glob("*/*.json")) if record.stem == record.parent.name]


def busy(repo: Path) -> bool:
    """Whether a queue worker and a run the queue started are both alive now, read from dvc-task's
    process records alone (no DVC): while it holds, nothing a waiting caller would do has changed."""
    exps = repo / EXPS
    return bool(_live_workers(exps)) and any(_alive(record, record.stem) for record in _run_records(exps))


def _live_workers(exps: Path) -> list[Path]:
    """The process records of the queue's workers that are alive now, by name."""
    return [record for record in sorted((exps / "celery").glob("dvc-exp-worker-*.json"))
            if _alive(record, "queue-worker")]


class QueueReadError(RnnlmError):
    """A message file of DVC's queue that does not parse (cut short, binary, not DVC's)."""


READ_TRIES = 3
"""How often a message that does not parse is read again, `READ_PAUSE_S` apart: one being written
now is whole a moment later; one that stays broken is named."""
READ_PAUSE_S = 0.5


def _entries(repo: Path) -> list[dict]:
    """DVC's entries of the queue (rev, name, status, ...), as `dvc queue status` lists them; DVC's
    errors (no repository there) go up as DvcException, a message file that does not parse (after
    `READ_TRIES` reads) as QueueReadError naming it."""
    for _ in range(READ_TRIES - 1):
        try:
            return _status(repo)
        except ValueError:  # json's JSONDecodeError and UnicodeDecodeError are ValueErrors
            time.sleep(READ_PAUSE_S)  # a message being written now is whole a moment later
    try:
        return _status(repo)
    except ValueError as error:
        broker = repo / EXPS / "celery" / "broker"
        bad = next(iter(_unparsable_messages(broker)), broker)
        raise QueueReadError(f"{bad}: a message of DVC's queue does not parse ({str(error).splitlines()[0]}); "
                             "expected JSON written by DVC's queue: remove that file (`dvc queue status` fails on "
                             "it too), then ask again") from None


def _status(repo: Path) -> list[dict]:
    """DVC's own reading of the queue (`dvc queue status`'s entries), which reads its message files."""
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc_repo:
        return dvc_repo.experiments.celery_queue.status()


def _unparsable_messages(broker: Path) -> list[Path]:
    """The message files under `broker` that are not UTF-8 JSON, oldest name first."""
    bad = []
    for path in sorted(broker.glob("*/*.msg")):
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            bad.append(path)
    return bad


def _alive(record: Path, marker: str) -> bool:
    """Whether the process that dvc-task recorded in `record` runs now (`_process`)."""
    return _process(record, marker) is not None


def _process(record: Path, marker: str) -> psutil.Process | None:
    """The process that dvc-task recorded in `record` (JSON: its pid, and its return code once it
    ended), if it runs now: no return code, and a process of that pid whose command line holds
    `marker` (the run's revision, or "queue-worker"), which a pid reused by another program would
    not; else None."""
    try:
        info = json.loads(record.read_text(encoding="utf-8"))
        if info.get("returncode") is not None:
            return None
        process = psutil.Process(int(info["pid"]))
        return process if any(marker in word for word in process.cmdline()) else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, psutil.Error):
        return None


def _running(record: Path, rev: str, worker_alive: bool) -> bool:
    """Whether the run DVC lists as Running is alive: its process record names a live process, or it
    has none yet while a worker lives (a worker marks a run Running a moment before the run's process
    writes its record: such a run is starting, not cut off)."""
    return _alive(record, rev) or (worker_alive and not record.exists())


def _stopped(log: Path) -> bool:
    """Whether the worker whose log is `log` stopped taking runs since it last started: one of
    `WORKER_STOPPED` after its last "ready." line."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return max(text.rfind(marker) for marker in WORKER_STOPPED) > text.rfind(WORKER_READY)
