"""The runner every command line ends in (`rnnlm.command_line`): Ctrl-C while still importing, what an
interrupted command tells the user to do, and a killed writer's temporary file kept out of git."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from rnnlm import atomic, command_line
from tests.conftest import REPO_ROOT


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}


def test_ctrl_c_while_a_command_is_still_importing_is_one_line():
    """Ctrl-C in the first seconds (PyTorch, pandas still loading, before run_main) used to end in a
    KeyboardInterrupt traceback: rnnlm's import sets the hook that ends it in one line and 130."""
    done = subprocess.run([sys.executable, "-c", "import rnnlm\nraise KeyboardInterrupt"], env=_env(),
                          capture_output=True, text=True)
    assert done.returncode == 130
    assert done.stderr == "error: interrupted (while starting); nothing was written\n"
    other = subprocess.run([sys.executable, "-c", "import rnnlm\nraise ValueError('a bug')"], env=_env(),
                           capture_output=True, text=True)
    assert other.returncode == 1 and "Traceback" in other.stderr  # a bug keeps its traceback


@pytest.mark.parametrize("again, said", [
    ("run the same command again", "error: interrupted; run the same command again\n"),
    (command_line.RESUMES, "error: interrupted; run the same command again to go on (training resumes from its last "
                     "saved state)\n"),
], ids=["any command", "the train stage"])
def test_an_interrupted_command_says_what_to_do_and_only_training_mentions_resuming(capsys, again, said):
    def interrupted() -> None:
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as stopped:
            command_line.run_main(interrupted, again=again)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.code == 130 and capsys.readouterr().err == said


def test_a_killed_writers_temporary_file_is_ignored_by_git():
    """A `study report` killed mid-write leaves reports/.study.md.<pid>.<random>.tmp until the next
    write removes it: git must not offer it for a commit meanwhile."""
    name = atomic.temporary_sibling(REPO_ROOT / "reports/study.md").relative_to(REPO_ROOT)
    assert name.name.startswith(".study.md.") and name.suffix == ".tmp"
    assert subprocess.run(["git", "check-ignore", "-q", str(name)], cwd=REPO_ROOT).returncode == 0
