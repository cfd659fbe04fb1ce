"""The columns a pass reads: ``--column`` mappings (``canonical=name in the file``) parsed and checked
against a file's names, and each column's Arrow type held against its schema column.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

from ..errors import InputError, MissingColumnsError, UsageError
from ..schema import COLUMNS


def parse_column_mapping(items: list[str] | None) -> dict[str, str]:
    """``["sampler_logprob=rollout_log_probs", ...]`` -> ``{canonical: source}``."""
    mapping: dict[str, str] = {}
    for item in items or []:
        canon, eq, src = item.partition("=")
        canon, src = canon.strip(), src.strip()
        if not eq or not canon or not src:
            raise UsageError(
                f"cannot parse --column {item!r}",
                hint="write --column CANONICAL=NAME_IN_FILE, e.g. sampler_logprob=rollout_log_probs",
            )
        if canon not in COLUMNS:
            raise UsageError(
                f"--column {item!r}: {canon!r} is not a mismatchscope column",
                hint=f"known columns: {', '.join(COLUMNS)}",
            )
        check_mapped_once(item, canon, src, mapping)
        twin = next((c for c, s in mapping.items() if s == src and c != canon), None)
        if twin is not None:
            raise UsageError(
                f"--column {item!r}: {src!r} is already read as {twin}",
                hint="map each column of the file to one mismatchscope column",
            )
        mapping[canon] = src
    return mapping


def check_mapped_once(item: str, canon: str, src: str, mapping: Mapping[str, str]) -> None:
    """A target mapped twice to two sources is refused, not settled by the last one (``import`` shares this rule)."""
    if canon in mapping and mapping[canon] != src:
        raise UsageError(
            f"--column {item!r}: {canon} is already mapped to {mapping[canon]!r}", hint="map each column once"
        )


def check_mapping(path: Path, mapping: Mapping[str, str], names: set[str]) -> None:
    """Every mapped source exists, and no two mismatchscope columns read one column of the file.

    ``--column sampler_logprob=trainer_logprob`` on a file that has its own
    ``trainer_logprob`` would read one column as both sides (a mismatch of
    exactly zero); that is refused rather than guessed at.
    """
    for canon, src in mapping.items():
        if src not in names:
            shown = ", ".join(sorted(names)[:20])
            raise MissingColumnsError(
                f"{path}: --column {canon}={src}: the file has no column {src!r}; it has: {shown}",
                hint="check the spelling of the name in the file",
            )
    readers: dict[str, str] = {}
    for canon in COLUMNS:
        src = mapping.get(canon, canon)
        if src not in names:
            continue
        if src in readers:
            first = readers[src]
            mapped = canon if mapping.get(canon) == src else first
            raise UsageError(
                f"{path}: --column {mapped}={src} makes {first} and {canon} both read the file's column {src!r}",
                hint=f"also map the file's own {src} to another name, or map {mapped} to another column",
            )
        readers[src] = canon


def is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def check_type(path: Path, canon: str, raw: str, t: pa.DataType) -> None:
    """A column's Arrow type must fit its schema column: lists of numbers where lists belong, numbers elsewhere."""
    want = COLUMNS[canon].type
    name = canon if raw == canon else f"{raw} (read as {canon})"
    if is_list_type(want):
        inner_ok = is_list_type(t) and (
            pa.types.is_integer(t.value_type) if pa.types.is_integer(want.value_type) else _numeric(t.value_type)
        )
        if not inner_ok:
            kind = "integers" if pa.types.is_integer(want.value_type) else "numbers"
            raise InputError(
                f"{path}: column {name!r} must hold lists of {kind}, found {t}",
                hint="top-k columns hold one list per token",
            )
    elif is_list_type(t) or not (_numeric(t) or pa.types.is_null(t)):
        kind = "integers" if pa.types.is_integer(want) else "numbers"
        raise InputError(f"{path}: column {name!r} must hold {kind}, found {t}")
