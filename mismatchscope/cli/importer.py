"""``import``: a training framework's own dumps into the token-pair format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import UsageError
from ..importers import IMPORTERS, PICKLED_FORMATS, ROUTE_ENCODINGS
from ..importers.registry import logged_by
from ._options import DEFAULT_FORMAT, FormatOpt, ImportColumnOpt, ImportOutOpt
from ._streams import info, reader_left, warn

FORMATS = tuple(IMPORTERS)
_ENCODINGS = tuple(ROUTE_ENCODINGS)


def _mapping(items: list[str] | None) -> dict[str, str]:
    # Not reader.parse_column_mapping: importers also take non-schema keys such as ``mask``
    # (each importer checks its own keys). A key mapped twice is refused by the same rule.
    from ..reader import check_mapped_once

    out: dict[str, str] = {}
    for item in items or []:
        key, eq, src = item.partition("=")
        key, src = key.strip(), src.strip()
        if not eq or not key or not src:
            raise UsageError(
                f"cannot parse --column {item!r}", hint="write --column CANONICAL=NAME_IN_FILE, e.g. mask=response_mask"
            )
        check_mapped_once(item, key, src, out)
        out[key] = src
    return out


def _routes_options(src: str | None, encoding: str | None, config: str | None):
    given = {"--routes": src, "--routes-format": encoding, "--routes-config": config}
    if not any(given.values()):
        return None
    missing = [name for name, v in given.items() if not v]
    if missing:
        raise UsageError(
            f"routes need {', '.join(missing)} too",
            hint="give --routes FILE --routes-format ENCODING --routes-config CHECKPOINT together",
        )
    from ..importers.routes import RoutesOptions

    return RoutesOptions(Path(src), encoding, Path(config))  # type: ignore[arg-type]


def import_(
    fmt: Annotated[str, typer.Argument(metavar="FORMAT", help=f"One of: {', '.join(FORMATS)}.", show_default=False)],
    src: Annotated[
        str, typer.Argument(help="The framework's dump folder or file (see docs/import.md).", show_default=False)
    ],
    out: ImportOutOpt,
    column: ImportColumnOpt = None,
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip and count malformed records instead of stopping."),
    trust_pickle: bool = typer.Option(
        False,
        "--trust-pickle",
        help=f"{', '.join(PICKLED_FORMATS)}: unpickle in full what the safe loader refuses "
        "(runs code from the file: only for files you produced).",
    ),
    routes: str | None = typer.Option(
        None,
        "--routes",
        metavar="JSONL",
        help="MoE routes the sampler recorded: a .jsonl file or folder, one line per sequence "
        "(see docs/import.md, Routes). Needs --routes-format and --routes-config.",
    ),
    routes_format: str | None = typer.Option(
        None,
        "--routes-format",
        metavar="ENCODING",
        help=f"How the routes are encoded: {', '.join(_ENCODINGS[:-1])} or {_ENCODINGS[-1]}.",
    ),
    routes_config: str | None = typer.Option(
        None,
        "--routes-config",
        metavar="CHECKPOINT",
        help="The model that recorded the routes: its checkpoint folder or config.json "
        "(decoder layers, MoE layers, experts, top-k).",
    ),
    format: FormatOpt = DEFAULT_FORMAT,
) -> None:
    # the help's summary is written from the registry, under the function
    from ..importers import import_run
    from ..importers.document import ImportDocument
    from ..render import seam

    src_path = _source(fmt, src, trust_pickle, routes_format)
    out_dir = _out_dir(out, src_path)
    result = import_run(
        fmt,
        src_path,
        out_dir,
        columns=_mapping(column),
        skip_bad=skip_bad,
        trust_pickle=trust_pickle,
        progress=lambda done, total, path: info(f"[{done}/{total}] {_shown(path, src_path)}"),
        route_options=_routes_options(routes, routes_format, routes_config),
    )
    for w in result.warnings:
        warn(w)
    seam.show(ImportDocument.of(result, out_dir), format)
    if reader_left():  # ``| head -0``: the summary had nowhere to go, the run is whole (the command succeeds)
        warn(f"stdout was closed before the summary was written; the import is complete in {out_dir}")


import_.__doc__ = f"Convert what an RL run already logged ({logged_by()}) into token pairs."


def _source(fmt: str, src: str, trust_pickle: bool, routes_format: str | None) -> Path:
    """The dump to read, refused before anything is written: an unknown format, a pickle flag for a format
    that holds none, an empty or missing path."""
    from ..importers import describe

    if fmt not in FORMATS:
        raise UsageError(f"unknown import format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    if trust_pickle and fmt not in PICKLED_FORMATS and routes_format not in PICKLED_FORMATS:
        raise UsageError(
            f"--trust-pickle applies to the pickled dumps of {', '.join(PICKLED_FORMATS)}; {fmt} files hold no pickle",
            hint="drop --trust-pickle",
        )
    if not src.strip():
        raise UsageError("an empty path was given as the dump to import", hint=describe(fmt))
    src_path = Path(src)
    if not src_path.exists():
        raise UsageError(f"{src_path}: no such file or directory", hint=describe(fmt))
    return src_path


def _out_dir(out: str, src_path: Path) -> Path:
    """``--out``: a new (or empty) run directory that is neither the dump nor holds any of its files."""
    from ..outputs import check_run_out, input_files

    out_dir = check_run_out(out, "--out", input_files(src_path))
    if out_dir.resolve() == src_path.resolve():
        raise UsageError(f"--out {out_dir} is the dump being imported", hint="write the token pairs to a new directory")
    return out_dir


def _shown(path, src: Path) -> str:
    """A file of the import as its progress line names it: relative to the folder given (which the command line
    already names), so the line stays short; a file given itself, as given."""
    try:
        return str(Path(path).relative_to(src)) if src.is_dir() else str(path)
    except ValueError:
        return str(path)
