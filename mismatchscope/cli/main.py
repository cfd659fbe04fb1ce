"""Entry point: builds the typer app and turns every ``MismatchscopeError``
into one line on stderr and exit code 2. ``MISMATCHSCOPE_DEBUG=1`` shows the
traceback instead."""

from __future__ import annotations

import os
import sys

import typer

from .. import __version__
from . import analyse, diagnose, gate, probe, timeline, importer

app = typer.Typer(
    name="mismatchscope",
    help="How far apart are the RL sampler and the trainer, where, and what would each masking rule throw away?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("compare-masks")(analyse.compare_masks)
app.command("report")(analyse.report)
app.command("probe")(probe.probe)
app.command("rescore")(probe.rescore)
app.command("timeline")(timeline.timeline)
app.command("gate")(gate.gate)
app.command("import")(importer.import_)
app.command("diagnose")(diagnose.diagnose)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mismatchscope {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit.")) -> None:
    pass


def main(argv: list[str] | None = None) -> None:
    from ..errors import MismatchscopeError

    try:
        app(args=argv, standalone_mode=True)
    except MismatchscopeError as e:
        if os.environ.get("MISMATCHSCOPE_DEBUG"):
            raise
        sys.stderr.write(f"error: {e}\n")
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
