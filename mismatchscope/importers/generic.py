"""A user's own dump: one row per sequence with list columns, in JSONL or Parquet.

For frameworks without a dump of their own (verl, TRL, OpenRLHF: see
``docs/import.md`` for the few lines to add). Columns are found by name,
renamed with ``--column CANONICAL=NAME``:

* per token (lists, index i = token i): ``token_id`` (default name
  ``token_ids``), ``sampler_logprob`` (``sampler_logprobs``),
  ``trainer_logprob`` (``trainer_logprobs``), ``mask`` (``mask``: 1 keeps a
  generated token, 0 drops it), ``trainer_entropy`` (``trainer_entropy``),
  ``turn`` (``turn``: the assistant turn of each token, counting from 0; without
  it a mask with several runs of 1s gives the turns, ``mismatchscope.turns``),
  ``trainer_token_id`` (``trainer_token_ids``: the ids the trainer scored, where
  the dump holds both sides' and they may differ: a re-tokenized conversation);
* per token or per sequence: ``advantage`` (``advantages``), ``reward`` (``reward``);
* per sequence: ``sequence_id``, ``step``, ``rank``, ``prompt_id``, ``sample_index``
  (same names).

The first three are required. A renamed column must exist; a column left at
its default name is used when the first record (JSONL) or the file schema
(Parquet) has it. In JSONL, a later record that holds a column the first
lacks is refused, naming both records (a ``mask`` read on some records only
would keep the masked tokens of the first; a ``sequence_id`` would be
renumbered); one that lacks a column the first holds is refused too, except
``reward`` and ``trainer_entropy``, which are then empty for that record. A ``sequence_id`` column keeps the user's ids (they must be
unique across the import); without one, ids are numbered from 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..documents import json_edge
from ..errors import FieldComesAndGoesError, ImportFormatError, InputError, UsageError
from ._base import SourceFile
from ._mask import add_turns, explicit, mask_span
from ._records import parse_record
from ._values import check_lengths, missing_fields, take_floats, take_ints

if TYPE_CHECKING:
    pass

# pyarrow is imported by the Parquet reader only (.generic_parquet): the JSONL engine's worker
# processes import this package and need nothing beyond numpy and orjson.

DEFAULT_COLUMNS = {
    "token_id": "token_ids",
    "sampler_logprob": "sampler_logprobs",
    "trainer_logprob": "trainer_logprobs",
    "mask": "mask",
    "trainer_entropy": "trainer_entropy",
    "advantage": "advantages",
    "reward": "reward",
    "sequence_id": "sequence_id",
    "step": "step",
    "rank": "rank",
    "prompt_id": "prompt_id",
    "sample_index": "sample_index",
    "turn": "turn",
    "trainer_token_id": "trainer_token_ids",
}
REQUIRED = ("token_id", "sampler_logprob", "trainer_logprob")
PER_TOKEN = ("sampler_logprob", "trainer_logprob", "mask", "trainer_entropy", "turn", "trainer_token_id")
EITHER = ("advantage", "reward")
PER_SEQUENCE = ("sequence_id", "step", "rank", "prompt_id", "sample_index")
FLOAT_COLUMNS = ("sampler_logprob", "trainer_logprob", "trainer_entropy", "advantage", "reward")
MAY_BE_EMPTY = ("reward", "trainer_entropy")
"""optional columns a record may lack (or hold as null) where the first has them: empty (NaN) for that record."""

SEMANTICS = {
    "layout": "one row per sequence, list columns; index i of every list refers to token i",
    "mask": "the mapped mask column when given (1 = generated token, kept), else every token is kept",
    "turn": "the turn column when given, else the runs of 1s in the mask (one turn without a mask)",
    "note": "semantics (temperature, policy lag) are those of the trainer that wrote the dump",
}


_INT_BITS = {"sequence_id": 64, "step": 64, "prompt_id": 64, "rank": 32, "sample_index": 32}
"""width of each per-sequence integer in the token-pair format (``schema.COLUMNS``, which imports pyarrow)."""


def check_int_range(name: str, canonical: str, lo: int, hi: int) -> None:
    """Refuse per-sequence integers the format cannot store: the writer's int32/int64 buffers would wrap them."""
    bits = _INT_BITS[canonical]
    if lo < -(1 << (bits - 1)) or hi >= 1 << (bits - 1):
        bad = lo if lo < -(1 << (bits - 1)) else hi
        raise ValueError(f"{name} {bad} does not fit in a signed {bits}-bit integer")


class GenericImporter:
    suffixes: tuple[str, ...] = ()
    if TYPE_CHECKING:  # each format's subclass defines these
        name: str

        def _first_names(self, f: SourceFile) -> set[str] | None: ...

    def __init__(self, columns: dict[str, str] | None = None):
        unknown = sorted(set(columns or {}) - set(DEFAULT_COLUMNS))
        if unknown:
            raise UsageError(
                f"--column {unknown[0]}=...: not a column the {self.name} importer maps",
                hint=f"map any of: {', '.join(DEFAULT_COLUMNS)}",
            )
        self.explicit = dict(columns or {})
        self.mapping = {**DEFAULT_COLUMNS, **self.explicit}
        self.present: dict[str, str] = {}
        self.columns: tuple[str, ...] = ()
        self.warnings: list[str] = []
        self.first_record = ""
        """where the record that decided the columns is (``FILE:LINE``), for a refusal naming it."""

    def discover(self, src: Path) -> list[SourceFile]:
        if src.is_file():
            paths, root = [src], src.parent
        else:
            paths = sorted(
                p
                for p in src.rglob("*")
                if p.is_file() and p.name.endswith(self.suffixes) and not p.name.startswith(".")
            )
            root = src
        files = [SourceFile(path=p, rel=p.relative_to(root).as_posix()) for p in paths]
        first_bad: ImportFormatError | None = None
        for f in files:  # the first file with a record decides the columns (an empty shard says nothing)
            try:
                names = self._first_names(f)
            except ImportFormatError as e:  # the read reports (or, with --skip-bad, skips) it in its turn
                first_bad = first_bad or e
                continue
            if names is not None:
                self._resolve(names, f)
                return files
        if first_bad is not None:  # not one record anywhere: say why the first bad line is not one
            raise first_bad
        return files

    def _resolve(self, names: set[str], f: SourceFile) -> None:
        """Decide, from the first file, which canonical columns this import carries."""
        self.first_record = self.first_record or f.rel
        self.present = {c: src for c, src in self.mapping.items() if src in names}
        readers: dict[str, str] = {}
        for c, src in self.present.items():
            if src in readers:  # two sides read from one column: a mismatch of exactly zero, or worse
                mapped = c if c in self.explicit else readers[src]
                raise UsageError(
                    f"--column {mapped}={src} makes {readers[src]} and {c} both read the column {src!r}",
                    hint=f"map {'the other one' if mapped == c else c} to another column too",
                )
            readers[src] = c
        missing = [c for c in self.explicit if c not in self.present]
        missing += [c for c in REQUIRED if c not in self.present and c not in missing]
        if missing:
            c = missing[0]
            shown = ", ".join(sorted(names)[:20])
            raise InputError(
                f"{f.rel}: no column {self.mapping[c]!r} for {c} (it has: {shown})",
                hint=f"map yours with --column {c}=NAME",
            )
        self.columns = tuple(
            c for c in self.present if c not in ("token_id", "mask", "sequence_id", "turn") and c not in REQUIRED
        )

    @json_edge
    def semantics(self) -> dict[str, Any]:
        return {**SEMANTICS, "columns": dict(self.present)}


FIRST_RECORD_WITHIN = 1000
"""lines searched for a first record: a file with none in its first thousand lines (binary, pretty-printed
JSON) is not JSON Lines, and is not read to its end to prove it."""


class GenericJsonlImporter(GenericImporter):
    name = "jsonl"
    suffixes = (".jsonl", ".json", ".ndjson")

    def _refuse_new_fields(self, f: SourceFile, line: int, rec: dict[str, Any]) -> None:
        for c, name in self.mapping.items():
            if c not in self.present and rec.get(name) is not None:
                refuse_field_that_comes(self.first_record, f, line, name, c)

    def _first_names(self, f: SourceFile) -> set[str] | None:
        """The keys of the file's first record that hold a value; None for a file without lines.

        A file whose lines are all unreadable raises the reason of the first one
        (not UTF-8, pretty-printed JSON, a list per line...), so a file of the
        wrong kind is not reported as one that lacks a column.
        """
        first_bad: ImportFormatError | None = None
        with open(f.path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if raw.isspace():
                    continue
                try:
                    required = {self.mapping[c] for c in REQUIRED}  # a null one is refused by its record's check
                    names = {k for k, v in parse_record(raw).items() if v is not None or k in required}
                    self.first_record = f"{f.rel}:{lineno}"
                    return names
                except ImportFormatError as e:
                    if first_bad is None:
                        first_bad = ImportFormatError(e.reason, file=f.rel, line=lineno, hint=e.hint)
                    if lineno >= FIRST_RECORD_WITHIN:
                        break
        if first_bad is not None:
            raise first_bad
        return None

    def convert(self, f: SourceFile, line: int, rec: dict[str, Any], notes: dict[str, int]) -> tuple[dict, int]:
        src = self.present
        self._refuse_new_fields(f, line, rec)
        missing = missing_fields(rec, [src[c] for c in REQUIRED])
        if missing:
            raise ImportFormatError(missing, file=f.rel, line=line)
        for c, name in src.items():
            if c not in REQUIRED and c not in MAY_BE_EMPTY and rec.get(name) is None:
                raise FieldComesAndGoesError(
                    f"{'holds a null' if name in rec else 'lacks'} {name!r} ({c}), which the import's first record "
                    f"({self.first_record}) holds: a field on some records only is refused rather than read on "
                    "some of them",
                    file=f.rel,
                    line=line,
                    hint=f"write {name} on every record, or on none",
                )
        ids = rec[src["token_id"]]
        n = len(ids) if isinstance(ids, list) else -1
        lists = {c: rec[src[c]] for c in PER_TOKEN if c in src and rec.get(src[c]) is not None}
        lists.update({c: rec[src[c]] for c in EITHER if c in src and isinstance(rec.get(src[c]), list)})
        check_lengths(f, line, None, {src["token_id"]: ids, **{src[c]: v for c, v in lists.items()}}, n)
        if "mask" in lists:
            lo, hi, keep = mask_span(lists["mask"], n, mask_name(src["mask"]))
        else:
            lo, hi, keep = 0, n, None
        if lo == hi:
            raise ImportFormatError("the mask selects no token" if n else "empty sequence", file=f.rel, line=line)
        values: dict[str, Any] = {}
        try:
            values["token_id"] = take_ints(ids, lo, hi, keep)
            if "trainer_token_id" in lists:  # the ids the trainer scored, where the dump holds both sides'
                values["trainer_token_id"] = take_ints(lists["trainer_token_id"], lo, hi, keep)
            for c in FLOAT_COLUMNS:
                if c not in src:
                    continue
                if c in lists:
                    values[c] = take_floats(lists[c], lo, hi, keep, src[c])
                else:
                    v = rec.get(src[c])
                    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                        raise ValueError(f"{src[c]} is not a number: {v!r}")
                    values[c] = np.nan if v is None else float(v)
            for c in PER_SEQUENCE:
                if c in src:
                    v = rec[src[c]]
                    if isinstance(v, float) and v.is_integer() and abs(v) <= 2**53:
                        v = int(v)  # "step": 2.0, as some loggers write counters; token ids accept it too
                    if isinstance(v, bool) or not isinstance(v, int):
                        raise ValueError(f"{src[c]} is not an integer: {v!r}")
                    check_int_range(src[c], c, v, v)
                    values[c] = v
        except (TypeError, ValueError) as e:
            raise ImportFormatError(f"bad value ({e})", file=f.rel, line=line) from None
        try:
            if "turn" in lists:
                explicit(values, take_ints(lists["turn"], lo, hi, keep), src["turn"])
            else:
                add_turns(values, keep)
        except (ImportFormatError, TypeError, ValueError) as e:
            reason = e.reason if isinstance(e, ImportFormatError) else f"bad value ({e})"
            raise ImportFormatError(reason, file=f.rel, line=line, hint=getattr(e, "hint", None)) from None
        return values, n - len(values["token_id"])


def refuse_field_that_comes(first_record: str, f: SourceFile, line: int, name: str, canonical: str) -> None:
    """A record holding a field the first record lacked: read here and not on the first, it would be dropped or
    (``sequence_id``) renumbered without a word; refused, naming both records."""
    raise FieldComesAndGoesError(
        f"holds {name!r} ({canonical}), which the import's first record ({first_record}) lacks: a field on "
        "some records only is refused rather than read on some of them",
        file=f.rel,
        line=line,
        hint=f"write {name} on every record, or on none",
    )


def mask_name(column: str) -> str:
    """How a refusal names the mask: ``the mask``, or ``the mask (response_mask)`` for a mapped column."""
    return "the mask" if column == "mask" else f"the mask ({column})"
