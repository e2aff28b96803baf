"""The wrapper every command line runs in: it turns an `RnnlmError` into one line and an exit code.

A stage or command raises `RnnlmError` (or a subclass) for anything wrong with its input; `run_main`
prints `error: <message>` on stderr and exits with the error's code. It also ends what is not a bug
in one line: a full disk (naming the file), Ctrl-C and SIGTERM (after the `finally` blocks and
temporary-file cleanups ran), and a closed pipe on standard output (quietly, as Unix tools do:
nothing on stderr, exit status 141). Everything else is a bug and keeps its traceback.
`command_args` checks a stage script's arguments against its docstring's usage line.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from rnnlm.errors import NO_SPACE, RnnlmError, UsageError, no_space


def command_args(doc: str, argv: list[str] | None = None) -> list[str]:
    """The arguments of a stage script whose docstring has a line `Usage: python stages/x.py A B ...`:
    argv[1:] (sys.argv by default) when it holds one value per name, else a UsageError quoting that line."""
    argv = sys.argv if argv is None else argv
    usage = next(line for line in doc.splitlines() if line.startswith("Usage: "))[len("Usage: "):]
    expected = len(usage.split()) - 2  # after "python stages/x.py"
    if len(argv) - 1 != expected:
        raise UsageError(f"usage: {usage} (expected {expected} arguments, got {len(argv) - 1})")
    return argv[1:]


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C, so cleanups run."""


def _terminate(signum, frame) -> None:
    raise Terminated


def _quiet_broken_pipe() -> None:
    """Standard output's reader went away (`| head`): point stdout at /dev/null so that Python's
    final flush says nothing, and exit as a process killed by SIGPIPE would."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(128 + signal.SIGPIPE)


RESUMES = "run the same command again to go on (training resumes from its last saved state)"
"""What to do after an interrupted training: the train stage's advice (`run_main(..., again=RESUMES)`)."""


def run_main(main: Callable[[], None], again: str = "run the same command again") -> None:
    """Call `main()`; on `RnnlmError` print one line to stderr and exit with its code (see the module
    docstring for the full disk, interruptions and a closed pipe). `again`: what an interrupted run's
    line advises."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        main()
        sys.stdout.flush()  # a closed pipe or a full disk under stdout shows here, not at exit
    except RnnlmError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except BrokenPipeError:
        _quiet_broken_pipe()
    except OSError as error:
        if error.errno not in NO_SPACE:
            raise
        print(f"error: {no_space(error, error.filename or 'standard output')}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"error: interrupted; {again}", file=sys.stderr)
        sys.exit(130)
    except Terminated:
        print(f"error: terminated (SIGTERM); {again}", file=sys.stderr)
        sys.exit(143)


def interrupted_while_starting(kind, value, traceback) -> None:
    """`sys.excepthook` for a command line: Ctrl-C before `run_main` is reached (while PyTorch or
    pandas is still being imported) ends in one line and exit status 130, not a traceback; any other
    uncaught exception is Python's own."""
    if issubclass(kind, KeyboardInterrupt):
        sys.stderr.write("error: interrupted (while starting); nothing was written\n")
        sys.stderr.flush()
        os._exit(130)
    sys.__excepthook__(kind, value, traceback)
