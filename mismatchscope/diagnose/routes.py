"""MoE routes in a diagnose: what the replay variant needs, and each side's route flips against the reference.

A run directory's ``routes/`` files (:mod:`mismatchscope.routing.layout`)
hold, per ``(sequence_id, input_position)``, the top-k expert ids each side's
router chose in every decoder layer. The float64 reference records its own
choices for the same positions (:meth:`~.reference.Reference.score`). A side's
**flip rate** in a layer is the share of completion tokens whose predicting
position (``input_position = prompt_length - 1 + j``) routed to a different
top-k *set* there than the reference did; ``flipped_any_layer`` is the share
of those tokens that flipped in at least one layer. Where a side recorded no
routes, its entry is absent and the reason is given.

``trainer.replay_routes=true`` rescores the baseline's tokens with the
trainer forced onto the sampler's expert ids; its effect on the gap, with its
interval, is routing's share. It needs the baseline run's sampler routes
(:func:`replay_unavailable`), and its rescored run must say it replayed and
hold trainer routes equal to the sampler's (:func:`replay_failed`): a
trainer that silently ignored the request would otherwise be reported as
"routing owns nothing".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import rundir
from ..routing.layout import MANIFEST_KEY, ROUTES, SAMPLER_EXPERTS, TRAINER_EXPERTS, RoutingMeta
from .document import Absent, AbsentRoutes, RoutesAgainstReference, SideFlips

REPLAY_KEY = "trainer.replay_routes"
"""the variant key that rescores under the sampler's routes."""


def routing_meta(run_dir: Path) -> RoutingMeta | None:
    """The run's ``manifest["routing"]``, or None where it recorded no routes."""
    raw = (rundir.read_manifest(run_dir) or {}).get(MANIFEST_KEY)
    return RoutingMeta.from_dict(raw) if isinstance(raw, dict) else None


def replay_unavailable(run_dir: Path, sampler_kind: str) -> str | None:
    """Why the baseline's tokens cannot be rescored under its sampler's routes; None when they can."""
    meta = routing_meta(run_dir)
    from ..probe.samplers import capabilities_of

    recorded_anywhere = capabilities_of(sampler_kind).transformers  # transformers' routes are recorded on any machine
    hint = "" if recorded_anywhere else " (use --sampler hf, whose routes are recorded on any machine)"
    if meta is None or not list((run_dir / ROUTES).glob("part-*.parquet")):
        return f"{REPLAY_KEY} needs the sampler's routes, and the baseline run recorded no routes{hint}"
    if not meta.sampler.recorded:
        why = f": {meta.sampler.why}" if meta.sampler.why else ""
        return f"{REPLAY_KEY} needs the sampler's routes, and the baseline's sampler recorded none{why}{hint}"
    return None


def replay_failed(run_dir: Path) -> str | None:
    """Why the rescored run is not a replay of the sampler's routes; None when it is one."""
    meta = routing_meta(run_dir)
    if meta is None or meta.replay is None:
        return f"{REPLAY_KEY}: the trainer did not replay the sampler's routes (its run records no replay)"
    table = read_routes(run_dir, [SAMPLER_EXPERTS, TRAINER_EXPERTS])
    if table is None:
        return f"{REPLAY_KEY}: the replayed run recorded no routes to check the replay against"
    pairs = zip(table[SAMPLER_EXPERTS].to_pylist(), table[TRAINER_EXPERTS].to_pylist(), strict=True)
    differ = sum(_set_differs(s, t) for s, t in pairs)
    if differ:
        return (
            f"{REPLAY_KEY}: the replayed trainer's routes differ from the sampler's at {differ} of "
            f"{table.num_rows} positions"
        )
    return None


def _set_differs(a, b) -> bool:
    if a is None or b is None:
        return False
    return any(x is not None and y is not None and set(x) != set(y) for x, y in zip(a, b, strict=True))


def read_routes(run_dir: Path, columns: list[str]):
    """The run's route rows (``sequence_id``, ``input_position``, ``token_position`` and ``columns``)."""
    from ..reader import read_routes as read_checked
    from ..routing.io import route_shards

    if not route_shards(run_dir):
        return None
    return read_checked(run_dir, ["sequence_id", "input_position", "token_position", *columns])


def flips_against_reference(
    run_dir: Path, reference: dict[int, np.ndarray], moe_layers: list[int]
) -> RoutesAgainstReference | Absent | AbsentRoutes:
    """Each side's per-layer flip rate against the reference's routes, over completion tokens.

    ``reference``: sequence id -> ``[input_position, len(moe_layers), k]`` expert ids."""
    if not moe_layers:
        return Absent("absent", "the checkpoint is dense")
    meta = routing_meta(run_dir)
    table = read_routes(run_dir, [SAMPLER_EXPERTS, TRAINER_EXPERTS]) if meta is not None else None
    if meta is None or table is None:
        return AbsentRoutes("absent", moe_layers, "the run recorded no routes, so only the reference's are known")
    table = table.filter(table["token_position"].is_valid())
    sids = table["sequence_id"].to_numpy()
    inputs = table["input_position"].to_numpy()
    sides: dict[str, SideFlips | Absent] = {}
    for side, column in (("sampler", SAMPLER_EXPERTS), ("trainer", TRAINER_EXPERTS)):
        side_meta = getattr(meta, side)
        if not side_meta.recorded:
            sides[side] = Absent("absent", side_meta.why or f"the {side} recorded no routes")
            continue
        sides[side] = _flip_rates(table[column].to_pylist(), sids, inputs, reference, moe_layers)
    return RoutesAgainstReference("ok", moe_layers, int(table.num_rows), sides["sampler"], sides["trainer"])


def _flip_rates(
    rows: list, sids: np.ndarray, inputs: np.ndarray, reference: dict[int, np.ndarray], moe_layers: list[int]
) -> SideFlips | Absent:
    flips = np.zeros((len(rows), len(moe_layers)), dtype=bool)
    known = np.zeros(len(rows), dtype=bool)
    for r, (row, sid, pos) in enumerate(zip(rows, sids, inputs, strict=True)):
        ref = reference.get(int(sid))
        if row is None or ref is None or pos >= ref.shape[0]:
            continue
        known[r] = True
        for j, layer in enumerate(moe_layers):
            flips[r, j] = set(row[layer] or ()) != set(ref[pos, j].tolist())
    n = int(known.sum())
    if n == 0:
        return Absent("absent", "no completion position has both routes")
    f = flips[known]
    return SideFlips("ok", n, [float(x) for x in f.mean(axis=0)], float(f.any(axis=1).mean()))
