"""Write docs/cli.md from the commands' own ``--help``, or check it is current.

    python docs/generate_cli.py           # rewrite docs/cli.md
    python docs/generate_cli.py --check   # exit 1 when docs/cli.md is stale

The reference is generated so it cannot drift from the options; a test runs
the check. Help is rendered at a fixed width without colour, so the output
does not depend on the terminal it was made in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent / "cli.md"
COMMANDS = ["probe", "rescore", "diagnose", "certify", "compare-masks", "report", "gate", "timeline", "import"]
WIDTH = "100"


def _help(args: list[str]) -> str:
    env = {
        **os.environ,
        "TERMINAL_WIDTH": WIDTH,
        "COLUMNS": WIDTH,
        "NO_COLOR": "1",
        "_TYPER_FORCE_DISABLE_TERMINAL": "1",
    }
    env.pop("FORCE_COLOR", None)
    code = "import sys; from mismatchscope.cli.main import build_app; build_app()(args=sys.argv[1:], prog_name='mismatchscope')"
    out = subprocess.run(
        [sys.executable, "-c", code, *args, "--help"], capture_output=True, text=True, env=env, check=True
    ).stdout
    return "\n".join(line.rstrip() for line in out.splitlines()).strip("\n")


def render() -> str:
    parts = [
        "# Command reference",
        "",
        "Generated from `--help` by `python docs/generate_cli.py`; do not edit by hand.",
        "",
    ]
    for cmd in [None, *COMMANDS]:
        args = [] if cmd is None else [cmd]
        parts += [f"## `mismatchscope{'' if cmd is None else ' ' + cmd}`", "", "```text", _help(args), "```", ""]
    return "\n".join(parts)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not DOC.is_file() or DOC.read_text() != text:
            print("docs/cli.md is stale: run python docs/generate_cli.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
