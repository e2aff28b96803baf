"""The exception types users see: `RnnlmError` (anything wrong with a command's input or
environment; its message names what was wrong and what was expected) and its kinds. The command
line turns one into one line and an exit code (`rnnlm.command_line.run_main`).
"""

from __future__ import annotations

import errno

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class RnnlmError(Exception):
    """Bad input or environment: the message names what was wrong and what was expected."""

    exit_code = 1


class ParamsError(RnnlmError):
    """params.yaml (or a value derived from it) is invalid."""

    exit_code = 2


class UsageError(RnnlmError):
    """A command was given the wrong arguments."""

    exit_code = 2


def no_space(error: OSError, what: object) -> RnnlmError:
    """The one-line error of a write to `what` that failed for want of space."""
    return RnnlmError(f"cannot write {what}: {error.strerror or 'no space left on device'}; free some space "
                      f"and run the same command again")


class TrainingError(RnnlmError):
    """Training cannot start or cannot go on (a split too short, a non-finite loss)."""
