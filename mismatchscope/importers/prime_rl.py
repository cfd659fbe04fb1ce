"""prime-rl: the trainer's token export (``trainer.enable_token_export = true``).

Layout, as written by ``TokenExporter`` in
``src/prime_rl/trainer/rl/token_export.py`` (``SCHEMA_VERSION = 1``):
``OUTPUT_DIR/token_exports/step_{N}/rank_{R}.jsonl`` for a single run, or
``OUTPUT_DIR/{run_id}/token_exports/step_{N}/rank_{R}.jsonl`` with several
runs. One compact JSON line per packed sequence that has at least one
loss-masked token, with ``schema_version``, ``step``, ``export_step``,
``rank``, ``micro_step``, ``micro_sequence_idx``, ``export_sequence_idx``,
``run_id``, ``env_name`` and aligned per-token lists: ``token_ids``,
``position_ids``, ``loss_mask`` (bools), ``advantages``, ``rewards``,
``inference_logprobs``, ``trainer_logprobs``, ``entropy``, ``mismatch_kl``,
``importance_ratio``, ... Every non-finite float is written as ``null``.
A step folder is final only once the trainer touches ``STABLE`` in it (after
every rank flushed); folders without it are skipped.

Alignment: the trainer shifts its logits right by one ("probability of
current token" convention, ``shift_tensor_right``), and the inference
logprobs are stored per token, so index i refers to token i.

Semantics: the trainer is asynchronous. ``trainer_logprobs`` are taken at
update time with weights that can be several steps newer than the ones that
sampled (``max_async_level``), so their gap to ``inference_logprobs`` mixes
policy lag with numerical mismatch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import json_edge
from ..errors import FieldComesAndGoesError, ImportFormatError, InputError, UsageError
from ._base import SourceFile, note
from ._mask import add_turns, mask_span
from ._records import parse_record
from ._values import check_lengths, require, take_floats, take_ints

SCHEMA_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")
_RANK_FILE = re.compile(r"^rank_(\d+)\.jsonl$")

POLICY_LAG_WARNING = (
    "prime-rl's trainer is asynchronous: its trainer_logprobs are taken at update time, with weights up to "
    "max_async_level steps newer than the sampler's, so the gap mixes policy lag with numerical mismatch"
)

SEMANTICS = {
    "sampler_logprob": "inference_logprobs: vLLM's logprob of token i (prime-rl serves with "
    "logprobs_mode=processed_logprobs: after temperature and top-k/top-p)",
    "trainer_logprob": "trainer_logprobs: the trainer's logprob of token i at update time",
    "alignment": "index i of every per-token list refers to token i (the trainer shifts its logits right); "
    "no shift applied",
    "mask": "loss_mask (the union of the loss channels' masks)",
    "policy_lag": True,
    "policy_lag_note": POLICY_LAG_WARNING,
    "non_finite": "the export writes every non-finite float as null, so -inf, +inf and NaN cannot be told "
    "apart; imported as NaN",
    "stable_only": "only step folders holding a STABLE marker are read",
}


class PrimeRLImporter:
    name = "prime-rl"
    columns: tuple[str, ...] = ("advantage", "reward", "trainer_entropy", "step", "rank")

    def __init__(self, columns: dict[str, str] | None = None):
        if columns:
            raise UsageError(
                "--column applies to the jsonl and parquet formats only",
                hint="prime-rl token exports have a fixed layout; drop --column",
            )
        self.warnings: list[str] = [POLICY_LAG_WARNING]
        self.first_record = ""
        """``FILE:LINE`` of the record that decided whether the import has an advantage column."""

    def discover(self, src: Path) -> list[SourceFile]:
        paths = [src] if src.is_file() else sorted(src.rglob("rank_*.jsonl"))
        root = src.parent if src.is_file() else src
        files, unstable = [], set()
        for p in paths:
            step_m, rank_m = _STEP_DIR.match(p.parent.name), _RANK_FILE.match(p.name)
            if step_m is None or rank_m is None:
                continue
            if not (p.parent / "STABLE").exists():
                unstable.add(p.parent)
                continue
            files.append(
                SourceFile(
                    path=p,
                    rel=p.relative_to(root).as_posix(),
                    step=int(step_m.group(1)),
                    rank=int(rank_m.group(1)),
                    extra={"run_dir": p.parent.parent.parent.as_posix()},
                )
            )
        if unstable and not files:
            shown = ", ".join(sorted(d.name for d in unstable)[:5])
            raise InputError(
                f"{root}: every step folder with token exports lacks its STABLE marker ({shown}): each is still being "
                "written, or the run stopped mid-step",
                hint="import once the trainer has finished a step (it writes STABLE last), or create STABLE in a "
                "step folder you know is complete",
            )
        if unstable:
            shown = ", ".join(sorted(d.name for d in unstable)[:5])
            self.warnings.append(
                f"skipped {len(unstable)} step folder(s) without a STABLE marker "
                f"(still being written, or the run stopped mid-step): {shown}"
            )
        files = sorted(files, key=lambda f: (f.extra["run_dir"], f.step, f.rank, f.rel))
        first = _first_record(files[0].path) if files else None
        if first is not None:
            self.first_record = f"{files[0].rel}:{first[0]}"
        if first is not None and not _holds_advantages(first[1]):
            self.columns = tuple(c for c in self.columns if c != "advantage")
            self.warnings.append(
                "the export's first record holds no advantages (all null: no rl loss channel); "
                "imported without an advantage column, so advantage-dependent rules run under "
                "both signs"
            )
        return files

    @json_edge
    def semantics(self) -> dict[str, Any]:
        return dict(SEMANTICS)

    def convert(self, f: SourceFile, line: int, rec: dict[str, Any], notes: dict[str, int]) -> tuple[dict, int]:
        version = rec.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ImportFormatError(
                f"unknown schema_version {version!r}; this importer reads "
                f"prime-rl token exports of schema_version {SCHEMA_VERSION}",
                file=f.rel,
                line=line,
                hint="upgrade mismatchscope",
            )
        require(f, line, None, rec, "token_ids", "loss_mask", "inference_logprobs", "trainer_logprobs")
        if "advantage" not in self.columns and _holds_advantages(rec):  # decided by the first record: say so
            raise FieldComesAndGoesError(
                f"holds advantages, which the export's first record ({self.first_record}) holds none of "
                "(all null): imported without an advantage column, these would be dropped without a word",
                file=f.rel,
                line=line,
                hint="import the steps whose records hold advantages apart from those whose records do not",
            )
        ids = rec["token_ids"]
        n = len(ids) if isinstance(ids, list) else -1
        per_token = {k: rec[k] for k in ("loss_mask", "inference_logprobs", "trainer_logprobs")}
        per_token.update({k: rec[k] for k in ("advantages", "rewards", "entropy") if rec.get(k) is not None})
        check_lengths(f, line, None, {"token_ids": ids, **per_token}, n)
        lo, hi, keep = mask_span(rec["loss_mask"], n, "loss_mask")
        if lo == hi:
            raise ImportFormatError("loss_mask selects no token", file=f.rel, line=line)
        try:
            values: dict[str, Any] = {
                "token_id": take_ints(ids, lo, hi, keep),
                "sampler_logprob": take_floats(rec["inference_logprobs"], lo, hi, keep, "inference_logprobs"),
                "trainer_logprob": take_floats(rec["trainer_logprobs"], lo, hi, keep, "trainer_logprobs"),
            }
            for col, key in (("advantage", "advantages"), ("reward", "rewards"), ("trainer_entropy", "entropy")):
                if col in self.columns:
                    values[col] = take_floats(per_token[key], lo, hi, keep, key) if key in per_token else np.nan
        except (TypeError, ValueError) as e:
            raise ImportFormatError(f"non-numeric value in a per-token list ({e})", file=f.rel, line=line) from None
        kept = len(values["token_id"])
        finite = np.isfinite(values["sampler_logprob"]) & np.isfinite(values["trainer_logprob"])
        note(notes, "nonfinite_logprobs", int(kept - np.count_nonzero(finite)))
        values["step"] = f.step
        values["rank"] = f.rank
        add_turns(values, keep)
        return values, n - kept


@json_edge
def _first_record(path: Path) -> tuple[int, dict[str, Any]] | None:
    """``(line, record)`` of an export's first record; None when it has none or it does not parse (the engine
    reports the bad line in its place)."""
    with open(path, "rb") as fh:
        for line, raw in enumerate(fh, 1):
            if raw.isspace():
                continue
            try:
                return line, parse_record(raw)
            except ImportFormatError:
                return None
    return None


def _holds_advantages(rec: dict[str, Any]) -> bool:
    """Whether a record holds an advantage (an export without an rl loss channel writes every advantage as null,
    and a column of nulls would make every reader refuse the run)."""
    adv = rec.get("advantages")
    return (isinstance(adv, list) and any(a is not None for a in adv)) or (
        isinstance(adv, (int, float)) and not isinstance(adv, bool)
    )
