"""What ``import --format json`` prints: the :class:`~._base.ImportResult` as a typed document.

The counts of the import, and, with ``--routes``, the manifest's ``routes``
entry (what was read and what was dropped). Its schema is
``docs/schemas/import.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._base import ImportResult


@dataclass(frozen=True)
class RoutesImported:
    """The sampler's MoE routes imported beside the tokens (``--routes``)."""

    format: str = field(metadata={"doc": "the encoding read (--routes-format)"})
    root: str
    files: list[str]
    config: str = field(metadata={"doc": "the checkpoint or config.json that gave the layer layout"})
    layer_axis: list[str]
    sequences: int
    sequences_without_routes: int
    routes_of_skipped_sequences: int
    rows: int
    moe_entries: int
    missing_captures: int = field(metadata={"doc": "all-zero rows: failed captures, stored as null"})
    mtp_layers_dropped: int
    placeholder_rows_dropped: int
    shards: list[str]
    sequences_file: str


@dataclass(frozen=True)
class ImportDocument:
    out: str = field(metadata={"doc": "the run directory written"})
    format: str
    sequences: int
    tokens_written: int
    tokens_dropped_by_mask: int = field(metadata={"doc": "prompt, tool and other tokens the source's mask excluded"})
    bad_records_skipped: int = field(metadata={"doc": "malformed records skipped under --skip-bad"})
    rows_skipped: dict[str, int] = field(
        metadata={
            "doc": "rows a stack's own dump holds that train no token, skipped by what they are (never bad "
            "records): padding (SkyRL's batch padding), loss_mask_all_zero (SkyRL rows overlong filtering zeroed), "
            "empty_response (verl agent-loop samples that generated nothing)"
        }
    )
    files_read: int
    steps: int = field(metadata={"doc": "distinct training steps in the output"})
    shards: int
    warnings: list[str]
    routes: RoutesImported | None = field(metadata={"doc": "null without --routes"})
    sampler_only: bool = field(default=False, metadata={"json": False})
    """the dump held the sampler's side only: ``rescore`` scores its trainer's side next."""

    @classmethod
    def of(cls, r: ImportResult, out: Any) -> ImportDocument:
        return cls(
            str(out),
            r.format,
            r.sequences,
            r.tokens_written,
            r.tokens_dropped_by_mask,
            r.bad_records_skipped,
            dict(r.rows_skipped),
            r.files_read,
            r.steps,
            r.shards,
            list(r.warnings),
            RoutesImported(**r.routes) if r.routes is not None else None,
            r.sampler_only,
        )
