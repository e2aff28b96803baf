"""The machine's cores shared among the rnnlm processes running on it, without changing a result.

Two runs that each compute on every core stall each other: PyTorch's OpenMP threads wait at every
barrier for peers that are not running (docs/study-log.md has the measurements). So a computing
stage joins the share (`join()`): it leaves a file named by its process id in one folder for the whole
machine (`share_folder`: every user's and every TMPDIR's rnnlm processes; a run that looked in
$TMPDIR missed a Slurm job's or another user's and lost up to 95% of its speed beside one), and
computes on `cores // (live processes + busy threads elsewhere)` threads (at least one): the busy
threads are those of processes outside the share running at its priority or above (`busy_elsewhere`:
`make -j`, a test suite, another PyTorch job), the load the folder cannot see, so that a run does not
keep a thread whose core another process holds and spin at every barrier waiting for it. Between
training steps `refresh()` counts again, at most once a second (the busy threads by the median of the
last few counts), so a run started alone gives up cores when a second run starts and takes them back
when it ends; however the runs were started (`dvc queue start -j 2`, two terminals, our runner).

This changes no bits where nothing in a training step depends on the thread count. Our own code
ensures it (the one PyTorch operation we use that did not, LayerNorm's backward, is replaced by
`rnnlm.models.language_model.layer_norm`), but a BLAS may split a product's sums by thread and so
give other bits at another count: MKL does on Intel CPUs for the weight gradients, each a sum over
every batch x sequence row (`benchmarks/thread_bits.py`), unless it runs in its strict mode, which
`rnnlm.compute.backend.strict_mkl()` asks for there before MKL's first call. So a run hands the share
a probe (`check_with`): one training step's gradients of the real model and batch shape. The first
time `refresh()` would change the run's count, it computes them at one thread and at every core:
where they differ in any bit, the run keeps its count for its whole life and says so. A run alone
on its machine never changes its count, so it never pays for the probe (a forward and backward pass
at each count). A count set by hand, `OMP_NUM_THREADS` (as `python -m rnnlm_study run --jobs N` sets
it for its workers), is kept too; such a process still joins, so that the others leave it its share.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil
import torch

REFRESH_SECONDS = 1.0
"""At most this often `refresh()` counts the live processes (a folder listing: tens of microseconds)."""


FOLDER_ENV = "RNNLM_CORES_DIR"
"""Names another share folder: a share of its own (the tests'), or a folder several machines'
containers see as one."""

MACHINE_FOLDERS = (Path("/dev/shm"), Path("/tmp"))
"""Where the share lives, the first that is a folder: the same for every process on the machine,
whatever its TMPDIR (a Slurm job sets its own) or its user."""


def share_folder() -> Path:
    """Where the processes that share this machine's cores leave their files: one folder for the whole
    machine (`MACHINE_FOLDERS`), every user's and every TMPDIR's rnnlm processes in it, unless
    RNNLM_CORES_DIR names another."""
    if os.environ.get(FOLDER_ENV):
        return Path(os.environ[FOLDER_ENV])
    root = next((folder for folder in MACHINE_FOLDERS if folder.is_dir()), Path(tempfile.gettempdir()))
    return root / "rnnlm-cores"


def _open_to_everyone(folder: Path) -> None:
    """Make the share folder one that every user may join (mode 1777, as /tmp: each may add files
    and remove only their own), where this process made it; elsewhere it is left as it is."""
    try:
        if folder.stat().st_uid == os.getuid() and folder.stat().st_mode & 0o7777 != 0o1777:
            folder.chmod(0o1777)
    except (OSError, AttributeError):
        pass  # another user's folder, or a system without modes: it shares as it is


def machine_cores() -> int:
    """The cores this process may run on (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def live_members(folder: Path) -> set[int]:
    """The process ids in `folder` that are alive and running (the same process id and start time as
    they wrote; one stopped by SIGSTOP, a paused training, holds no core until it goes on); the files
    of those that ended are removed."""
    live = set()
    for entry in folder.glob("*"):
        if entry.name.startswith(".") or not entry.is_file():
            continue  # a file being written (`join`): its writer renames it in a moment; or not a file of ours
        try:
            pid, started = int(entry.name), float(entry.read_text() or "nan")
            process = psutil.Process(pid)
            if abs(process.create_time() - started) < 1e-3:
                if process.status() != psutil.STATUS_STOPPED:
                    live.add(pid)
                continue
        except (ValueError, OSError, psutil.Error):
            pass  # not ours, unreadable, or the process is gone (or its id reused)
        try:
            entry.unlink(missing_ok=True)
        except OSError:
            pass  # a folder we may not write to: the file stays, uncounted
    return live


PROC = Path("/proc")
"""Linux's process table: what `busy_elsewhere` reads."""

PF_KTHREAD = 0x00200000
"""The kernel's flag of its own threads (in /proc/PID/stat's flags): never a neighbour of ours."""

BUSY_SAMPLES = 5
"""`refresh` counts the busy neighbours once a count (`REFRESH_SECONDS`) and goes by the median of this
many counts: a task that runs for a moment (a `git status`, a kernel worker) moves nothing."""


def busy_elsewhere(skip: frozenset[int] = frozenset(), proc: Path = PROC) -> int:
    """How many threads of other processes are running now at this process's priority or above (their
    nice value no higher): the load the share's folder cannot see (`make -j`, a test suite, another
    PyTorch job), which takes a core from under a barrier of ours. Processes of `skip` (this one, the
    share's members, already counted) and the kernel's threads are left out; threads at a higher nice
    value too, as the scheduler gives them the cores only when ours wait. Linux only: 0 elsewhere.
    Cheap when the machine is quiet: /proc/stat's runnable count first; the threads themselves are read
    only where something beyond this process runs."""
    try:
        running = int(next(line.split()[1] for line in (proc / "stat").read_text().splitlines()
                           if line.startswith("procs_running ")))
    except (OSError, StopIteration, ValueError, IndexError):
        return 0
    if running <= _running_threads(proc / "self" / "task"):
        return 0
    own = os.getpid()
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    busy = 0
    for process in proc.glob("[0-9]*"):
        if not process.name.isdigit() or int(process.name) in skip or int(process.name) == own:
            continue
        for task in _task_stats(process / "task"):
            state, flags, its_nice = task[0], int(task[6]), int(task[16])
            busy += state == "R" and not flags & PF_KTHREAD and its_nice <= nice
    return busy


def _task_stats(tasks: Path) -> list[list[str]]:
    """The fields after the command name of each thread's /proc stat line under `tasks` (a process that
    ended meanwhile has none)."""
    found = []
    try:
        for task in tasks.iterdir():
            try:
                line = (task / "stat").read_text()
            except OSError:
                continue
            fields = line[line.rindex(")") + 2:].split()
            if len(fields) > 16:
                found.append(fields)
    except (OSError, ValueError):
        pass
    return found


def _running_threads(tasks: Path) -> int:
    """How many of the threads under `tasks` are running."""
    return sum(fields[0] == "R" for fields in _task_stats(tasks))


class CoreShare:
    """This process's place in the share: `join()`, then `refresh()` as often as convenient."""

    def __init__(self, folder: Path | None = None, cores: int | None = None,
                 busy: Callable[[frozenset[int]], int] = busy_elsewhere):
        self.folder = folder
        self.cores = cores
        self.busy = busy  # the running threads of processes outside the share (`busy_elsewhere`)
        self.busy_counts: list[int] = []  # the last BUSY_SAMPLES counts of them
        self.fixed = "OMP_NUM_THREADS" in os.environ
        self.why_fixed = "OMP_NUM_THREADS is set" if self.fixed else ""
        self.probe: Callable[[], Sequence[torch.Tensor]] | None = None  # `check_with`'s gradients
        self.verified = False
        self.probed = False  # the probe's gradients were computed at two counts
        self.joined: Path | None = None
        self.checked = float("-inf")

    def join(self, adjust: bool = True) -> int:
        """Leave this process's file and (with `adjust`, once a probe is handed over: `check_with`) take
        its share of the cores; returns the threads it computes on. A process whose results depend on
        its thread count joins with `adjust=False`: the others still leave it its share."""
        if not adjust:
            self.fixed, self.why_fixed = True, "its results may depend on the thread count"
        self.folder = self.folder or share_folder()
        self.cores = self.cores or machine_cores()
        me = self.folder / str(os.getpid())
        partial = me.with_name(f".{me.name}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            _open_to_everyone(self.folder)
            partial.write_text(repr(psutil.Process().create_time()))
            partial.replace(me)  # whole, or not there: another process never reads half of it
        except OSError as error:
            self._cannot_share(error)
            return torch.get_num_threads()
        self.joined = me
        atexit.register(self.leave)
        return self.refresh(now=True)

    def _cannot_share(self, error: OSError) -> None:
        """A share folder this process cannot use costs the share, not the run: it keeps its thread
        count for its whole life (the bits do not depend on it) and says so once."""
        self.fixed, self.joined = True, None
        self.why_fixed = (f"the core share's folder {self.folder} cannot be used "
                          f"({error.strerror or type(error).__name__}); expected a folder this user may write")
        print(f"note: this process computes on {torch.get_num_threads()} threads from here on: {self.why_fixed}",
              flush=True)

    def check_with(self, gradients: Callable[[], Sequence[torch.Tensor]]) -> None:
        """Hand over the probe: `gradients()` computes one training step's gradients on a copy of the
        model, leaving the model and the random generators as they were. `refresh` compares them at
        one thread and at every core before it first changes this process's count; until a probe is
        handed over, it changes nothing."""
        self.probe = gradients

    def verify(self) -> bool:
        """Whether the probe's gradients have the same bits at one thread and at every core, computed
        once; where they differ (or nothing can change: a count fixed, one core, no probe yet) the
        count stays as it is, and a failed probe says so once."""
        if self.verified or self.probed or self.probe is None or self.joined is None or self.fixed \
                or (self.cores or 1) < 2:
            return self.verified
        one, every = at_one_and_every(self.probe, self.cores)
        self.probed = True
        self.verified = len(one) == len(every) and all(torch.equal(a, b) for a, b in zip(one, every))
        if not self.verified:
            self.fixed = True
            self.why_fixed = (f"a training step's gradients differ in their last bits at 1 and {self.cores} threads on "
                              "this machine (its BLAS), so the run keeps its thread count")
            print(f"note: this run computes on {torch.get_num_threads()} threads from here on: {self.why_fixed}",
                  flush=True)
        return self.verified

    def refresh(self, now: bool = False) -> int:
        """Set this process's threads to its share (unless fixed by hand or not joined); counts again
        only when `REFRESH_SECONDS` have passed since the last count, or `now`. The first change of
        the count waits for the probe to pass (`verify`)."""
        if self.joined is None or self.fixed:
            return torch.get_num_threads()
        clock = time.monotonic()
        if now or clock - self.checked >= REFRESH_SECONDS:
            self.checked = clock
            try:
                members = live_members(self.folder)
            except OSError as error:  # the folder replaced or made unreadable while the run goes on
                self._cannot_share(error)
                return torch.get_num_threads()
            self.busy_counts = [*self.busy_counts[1 - BUSY_SAMPLES:], self.busy(frozenset(members))]
            others = sorted(self.busy_counts)[(len(self.busy_counts) - 1) // 2]  # the median (the lower of two)
            share = max(1, self.cores // max(1, len(members) + others))
            if share != torch.get_num_threads() and self.verify():
                torch.set_num_threads(share)
        return torch.get_num_threads()

    def leave(self) -> None:
        if self.joined is not None:
            self.joined.unlink(missing_ok=True)
            self.joined = None


def at_one_and_every(compute: Callable[[], Sequence[torch.Tensor]], cores: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """`compute()`'s tensors at one thread and at `cores` threads, as detached copies; the process's
    thread count is left as it was. What `CoreShare.verify` compares, and `benchmarks/thread_bits.py`
    per product."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [t.detach().clone() for t in compute()]
        torch.set_num_threads(cores)
        every = [t.detach().clone() for t in compute()]
    finally:
        torch.set_num_threads(before)
    return one, every


SHARE = CoreShare()
"""The process's one share: the stage scripts `join()` it, the training loop `refresh()`es it."""


def join(adjust: bool = True) -> int:
    return SHARE.join(adjust)


def check_with(gradients: Callable[[], Sequence[torch.Tensor]]) -> None:
    SHARE.check_with(gradients)


def refresh() -> int:
    return SHARE.refresh()
