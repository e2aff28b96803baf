"""The one exception type users see, and the wrapper that turns it into one line and an exit code.

A stage or command raises `RnnlmError` (or a subclass) for anything wrong with its input; the
`main` wrapper prints `error: <message>` on stderr and exits with the error's code. Everything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class RnnlmError(Exception):
    """Bad input or environment: the message names what was wrong and what was expected."""

    exit_code = 1


class ParamsError(RnnlmError):
    """params.yaml (or a value derived from it) is invalid."""

    exit_code = 2


class UsageError(RnnlmError):
    """A command was given the wrong arguments."""

    exit_code = 2


def command_args(doc: str, argv: list[str] | None = None) -> list[str]:
    """The arguments of a stage script whose docstring has a line `Usage: python stages/x.py A B ...`:
    argv[1:] (sys.argv by default) when it holds one value per name, else a UsageError quoting that line."""
    argv = sys.argv if argv is None else argv
    usage = next(line for line in doc.splitlines() if line.startswith("Usage: "))[len("Usage: "):]
    expected = len(usage.split()) - 2  # after "python stages/x.py"
    if len(argv) - 1 != expected:
        raise UsageError(f"usage: {usage} (expected {expected} arguments, got {len(argv) - 1})")
    return argv[1:]


def run_main(main: Callable[[], None]) -> None:
    """Call `main()`; on `RnnlmError` print one line to stderr and exit with its code."""
    try:
        main()
    except RnnlmError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
