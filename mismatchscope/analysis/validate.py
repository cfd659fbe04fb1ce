"""Input checks of the streaming pass: what makes a batch unusable, and what only warns.

The reader already drops rows without finite logprobs and refuses missing
columns; these checks need the values of a batch (negative positions,
non-finite advantages) or the whole input (no token left, gaps in the
positions). ``timeline`` runs the same checks, so an input refused by one
command is refused by every command, with the same message.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError, NoTokensError
from ..reader import Hygiene, Source
from .positions import PositionRuns
from .sums import LOG_R2_OVERFLOW


def check_positions(position_T: np.ndarray, source: Source) -> None:
    if position_T.size and position_T.min() < 0:
        where = source.files[0] if len(source.files) == 1 else "the input"
        raise InputError(f"negative position {int(position_T.min())} in {where}")


def check_advantage(advantage_T: np.ndarray | None) -> None:
    if advantage_T is not None and not np.isfinite(advantage_T).all():
        raise InputError(
            f"the advantage column has {int((~np.isfinite(advantage_T)).sum())} missing or non-finite value(s)",
            hint="fill them, or drop the column with a --column mapping to another name",
        )


SAMPLER_SIDE_ONLY = ("verl", "roll")
"""import formats whose dumps are taken before the trainer's forward: their trainer_logprob waits for rescore."""


def rescore_hint(path: object, source: Source | None) -> str | None:
    """Why a sampler-side import has no finite pair, and the command that gives it one."""
    fmt = (((source.run_config if source else None) or {}).get("source") or {}).get("format")
    if fmt not in SAMPLER_SIDE_ONLY:
        return None
    return f"a {fmt} import holds the sampler's side only: mismatchscope rescore {path} scores the trainer's"


def check_not_empty(path: str, n_tokens: int, hygiene: Hygiene, source: Source | None = None) -> None:
    if n_tokens == 0:
        what = "has no token rows" if hygiene.rows_read == 0 else "has no token with finite logprobs"
        raise NoTokensError(f"{path}: the input {what}", hint=rescore_hint(path, source) if hygiene.rows_read else None)


def overflow_warnings(max_log_ratio_S: np.ndarray) -> list[str]:
    """Ratios float64 cannot square: chi2 and ESS would otherwise read inf and "-" with no reason given."""
    over = max_log_ratio_S > LOG_R2_OVERFLOW
    if not over.any():
        return []
    top = float(max_log_ratio_S[over].max())
    return [
        f"{int(over.sum())} sequence(s) hold a token with log p - log q above {LOG_R2_OVERFLOW:.1f} (largest {top:.4g}: "
        "the sampler gave it almost no probability); r^2 overflows float64 there, so chi2 reads inf and ESS "
        "is not reported"
    ]


def position_warnings(runs: PositionRuns, turns_S: np.ndarray | None = None) -> list[str]:
    """Duplicates were refused while reading (exactly, ``positions.py``); gaps and late starts only warn.

    ``turns_S`` (a multi-turn run): each sequence's turns, in the order of ``runs``; a gap between two turns
    (a tool span of a Recorder's run, whose positions index the whole response) is not a missing token.
    """
    warnings = []
    gaps = runs.runs_S > (1 if turns_S is None else np.maximum(turns_S, 1))
    if gaps.any():
        warnings.append(f"{int(gaps.sum())} sequence(s) have gaps in their positions (tokens missing or masked out)")
    late = runs.first_position_S > 0
    if late.any():
        warnings.append(f"{int(late.sum())} sequence(s) do not start at position 0")
    return warnings
