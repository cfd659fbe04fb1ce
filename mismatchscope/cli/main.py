"""Entry point: builds the typer app and turns every ``MismatchscopeError``
into one line on stderr and exit code 2. ``MISMATCHSCOPE_DEBUG=1`` (or
``true``/``yes``) adds the traceback; it never changes the exit code.

Exit codes: 0 success; 1 only where a command gives it a meaning (``gate``: a
limit failed; ``certify``: not certified; ``doctor``: a pipeline problem is likely); 2 a usage, input or output error (one line, redacted); 3 an
internal error (a bug: the traceback is printed so it can be reported). An
operating-system error that escapes a command (a full disk, a permission) is
an environment problem, not a bug: one line and exit 2.
"""

from __future__ import annotations

import os
import sys

import typer

from .._version import __version__
from ._help import HelpCommand
from ._options import RulesInHelp
from ._streams import ReaderMayLeave

COMMANDS = (
    "compare-masks",
    "report",
    "doctor",
    "probe",
    "rescore",
    "timeline",
    "gate",
    "import",
    "diagnose",
    "certify",
    "provenance",
    "view",
)
"""every command, in the order ``--help`` lists them."""
RULE_LISTING = ("compare-masks", "timeline", "view")
"""the commands whose ``--help`` ends with the list of rules."""
ONE_BLAS_THREAD = ("compare-masks", "report", "doctor", "view")
"""commands whose only matrix products are tiny (the rules' agreement counts). OpenBLAS starts a thread per
core when numpy is imported, about 60 ms of their start-up on two cores, for nothing: they run with one
(an ``OPENBLAS_NUM_THREADS`` the user set is kept). Their matrix products hold counts, exact in any order."""


def _command(name: str):
    """The function behind command ``name``. Its module is imported only here, so a command pays for its own
    imports and nobody else's (``probe`` needs none of the analysis, ``report`` none of vLLM's options)."""
    if name in ("compare-masks", "report"):
        from . import analyse

        return analyse.compare_masks if name == "compare-masks" else analyse.report
    if name in ("probe", "rescore"):
        from . import probe

        return probe.probe if name == "probe" else probe.rescore
    if name == "doctor":
        from .doctor import doctor

        return doctor
    if name == "timeline":
        from .timeline import timeline

        return timeline
    if name == "gate":
        from .gate import gate

        return gate
    if name == "import":
        from .importer import import_

        return import_
    if name == "diagnose":
        from .diagnose import diagnose

        return diagnose
    if name == "provenance":
        from .provenance import provenance

        return provenance
    if name == "view":
        from .view import view

        return view
    from .certify import certify

    return certify


def build_app(names: tuple[str, ...] = COMMANDS) -> typer.Typer:
    """The typer app with the commands ``names`` (all of them unless asked otherwise).

    A command line that names one command gets an app with that command alone (``_invoked``): the
    others' modules stay unimported. Anything else (the top-level ``--help``, a misspelt command) gets
    all of them, so the listing and click's "no such command" stay what they are.
    """
    app = typer.Typer(
        name="mismatchscope",
        help="How far apart are the RL sampler and the trainer, where, and what would each masking rule throw away?",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    for name in names:
        app.command(name, cls=RulesInHelp if name in RULE_LISTING else HelpCommand)(_command(name))
    app.callback()(_root)
    return app


def _invoked(argv: list[str]) -> tuple[str, ...]:
    """The one command ``argv`` runs (its first word), or every command when it starts otherwise.

    A line that starts with an option (``--help``, ``--version``) is the top level's, whatever follows.
    """
    return (argv[0],) if argv and argv[0] in COMMANDS else COMMANDS


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mismatchscope {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    pass


INTERNAL_ERROR = 3


def debug_enabled() -> bool:
    """``MISMATCHSCOPE_DEBUG`` is on only for 1/true/yes/on: ``0`` or ``false`` means off."""
    return os.environ.get("MISMATCHSCOPE_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def _fail(message: str, code: int, traceback_too: bool) -> None:
    from ..redact import redact

    if traceback_too:
        import traceback

        sys.stderr.write(redact(traceback.format_exc()))
    from ..terminal import shown

    line = shown(" ".join(redact(message).split()))  # one line, whatever the message held; no control character
    sys.stderr.write(_for_terminal(f"error: {line}") + "\n")
    sys.exit(code)


def _for_terminal(line: str) -> str:
    """On a terminal, the line broken between words at its width: the terminal's own wrap cuts words,
    numbers and paths. To a pipe or a file it stays one line, whole for ``grep`` and CI logs."""
    import textwrap

    if not sys.stderr.isatty():
        return line
    columns = os.environ.get("COLUMNS", "").strip()
    try:  # stderr's own terminal: stdout may be a pipe (``| cat``) while errors still reach the screen
        width = int(columns) if columns.isdigit() and int(columns) > 0 else os.get_terminal_size(2).columns
    except OSError:
        width = 80
    return "\n".join(textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False)) or line


class _Tolerant:
    """A text stream that drops what cannot be written (stderr on a full device, or closed).

    Progress, warnings and errors go to stderr; when it cannot take them, the
    command still runs and its exit code still says what happened. Without
    this, a failed write to stderr would escape as an exception and exit 1,
    which ``gate`` reserves for a failed limit.
    """

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            if self._stream is not None:
                self._stream.write(text)
        except (OSError, ValueError):  # ValueError: the stream was closed
            pass
        return len(text)

    def flush(self) -> None:
        try:
            if self._stream is not None:
                self._stream.flush()
        except (OSError, ValueError):
            pass

    def isatty(self) -> bool:
        try:
            return self._stream is not None and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _guard_streams() -> None:
    """stderr never fails a command; a closed stdout (``>&-``) or one whose reader left (``| head``) discards the
    output instead of failing the command."""
    if not isinstance(sys.stderr, _Tolerant):
        sys.stderr = _Tolerant(sys.stderr)
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")
    elif not isinstance(sys.stdout, ReaderMayLeave):
        sys.stdout = ReaderMayLeave(sys.stdout)


def _click_exceptions():
    """click's exception module: typer >= 0.2x vendors its own copy of click."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def _usage_error(e) -> None:
    """click's own usage errors (a missing argument, a bad choice) as one line, like every other error."""
    if isinstance(e, getattr(_click_exceptions(), "NoArgsIsHelpError", ())):  # bare command: its help, as before
        sys.stdout.write(e.ctx.get_help() + "\n")
        sys.exit(2)
    ctx = getattr(e, "ctx", None)
    hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    _fail(f"{e.format_message()}{hint}", 2, False)


def _os_error(e: OSError) -> None:
    import errno

    where = f"{e.filename}: " if getattr(e, "filename", None) else ""
    hints: dict[int | None, str] = {
        errno.ENOSPC: " (free space on the device, or write elsewhere)",
        errno.EACCES: " (check the permissions)",
        errno.EPERM: " (check the permissions)",
    }
    hint = hints.get(e.errno, "")
    _fail(f"{where}{e.strerror or e}{hint}", 2, debug_enabled())


def main(argv: list[str] | None = None) -> None:
    from ..errors import MismatchscopeError

    click_exceptions = _click_exceptions()
    _guard_streams()
    args = sys.argv[1:] if argv is None else argv
    names = _invoked(args)
    if len(names) == 1 and names[0] in ONE_BLAS_THREAD and "numpy" not in sys.modules:  # read once, at import
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        code = build_app(names)(args=args, standalone_mode=False)
    except MismatchscopeError as e:
        _fail(str(e), e.exit_code, debug_enabled())
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except click_exceptions.ClickException as e:
        _usage_error(e)
    except SystemExit as e:
        # Outside standalone mode typer exits by itself only on a closed stdout (EPIPE, code 1):
        # 1 is the verdict of gate and certify ("a limit failed", "not certified"), so a closed pipe must not say it.
        if e.code == 1:
            _fail("stdout was closed before the output was written", 2, False)
        raise
    except OSError as e:
        _os_error(e)
    except RecursionError:
        _fail("the input is nested too deeply to read", 2, debug_enabled())
    except Exception as e:  # a bug: never exit 1, which gate and certify keep for their verdicts
        _fail(
            f"internal error ({type(e).__name__}: {e}); please report it with the traceback above", INTERNAL_ERROR, True
        )
    sys.stdout.flush()  # what the buffer holds meets a reader who left here, not in the interpreter's exit
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
