"""MoE routes in a probe: what each side's router chose, recorded beside the tokens, and replay.

* The trainer (:class:`TrainerRoutes`) reads its routes from the one forward
  it runs anyway: every input position of every sequence but the last, with
  the gate weights and the router margin; with forced routes it replays them
  (ids, or ids and weights) and records what it then handed to the experts.
* The transformers sampler reads its routes during ``generate``
  (:func:`generate_routes`): the prefill call routes the prompt, decode step
  ``t`` routes completion token ``t - 1``.
* vLLM returns routes only where its build supports them
  (:func:`vllm_routes_unsupported` says why not).

A model whose router family is unknown still probes: :func:`unknown_family`
is the one line that says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mismatchscope.probe.checkpoint import CheckpointInfo, text_config
from mismatchscope.progress import Note
from mismatchscope.routing.io import SeqRoutes, Shape
from mismatchscope.routing.layout import RoutingMeta, SideRoutes


def model_type_of(info: CheckpointInfo) -> str | None:
    return text_config(info.config).get("model_type") or info.model_type


def unknown_family(info: CheckpointInfo) -> str:
    """Why an MoE checkpoint gets no routes: its family is not one mismatchscope knows."""
    from mismatchscope.routing.families import FAMILIES

    known = ", ".join(sorted({t for f in FAMILIES for t in f.model_types}))
    return (
        f"model type {model_type_of(info)!r} is an MoE whose router family mismatchscope does not know "
        f"(known: {known}); routes are not recorded"
    )


def attach_tap(model, info: CheckpointInfo, *, margins: bool):
    """(RouteTap or None, why not) for a loaded model: None for dense models and unknown families."""
    from mismatchscope.probe.route_capture import RouteTap
    from mismatchscope.routing.families import family_for, find_moe_layers

    if not info.is_moe:
        return None, None
    family = family_for(model_type_of(info))
    if family is None:
        return None, unknown_family(info)
    return RouteTap(find_moe_layers(model, family), margins=margins), None


def shape_of(tap) -> Shape:
    layers = tap.layers
    return Shape(layers.num_layers, layers.moe_layers, layers.num_experts, layers.top_k)


# ------------------------------------------------------------------ trainer


@dataclass
class TrainerRoutes:
    """The trainer's tap: records every batch's routes, forces the requests' routes where given."""

    tap: Any = None
    why: str | None = None
    _width: int = 0

    @classmethod
    def attach(cls, model, info: CheckpointInfo) -> TrainerRoutes:
        tap, why = attach_tap(model, info, margins=True)
        return cls(tap, why)

    def begin(self, seqs: list[list[int]], forced: list[SeqRoutes | None]) -> None:
        """Before a batch's forward: clear old captures, set the forced ids (right-padded rows, flattened)."""
        import torch

        self.tap.take()
        self._width = max(len(s) for s in seqs)
        if all(f is None for f in forced):
            self.tap.force(None)
            return
        moe = self.tap.layers.moe_layers
        k = self.tap.layers.top_k
        ids = np.full((len(moe), len(seqs), self._width, k), -1, dtype=np.int64)
        with_weights = all(f is None or f.weights is not None for f in forced) and any(
            f is not None and f.weights is not None for f in forced
        )
        weights = np.zeros((len(moe), len(seqs), self._width, k), dtype=np.float32) if with_weights else None
        for b, f in enumerate(forced):
            if f is None:
                continue
            rows = f.ids.shape[0]
            ids[:, b, :rows] = f.ids.transpose(1, 0, 2)
            if weights is not None:
                assert f.weights is not None  # with_weights: every forced row has them
                weights[:, b, :rows] = f.weights.transpose(1, 0, 2)
        n = len(seqs) * self._width
        self.tap.force(
            {
                layer: (
                    torch.from_numpy(ids[m].reshape(n, k)),
                    None if weights is None else torch.from_numpy(weights[m].reshape(n, k)),
                )
                for m, layer in enumerate(moe)
            }
        )

    def end(self, seqs: list[list[int]]) -> list[SeqRoutes]:
        """After the forward: each sequence's routes over its input positions but the last."""
        self.tap.force(None)
        captures = self.tap.take()
        moe = self.tap.layers.moe_layers
        calls = [captures[layer] for layer in moe]
        if any(len(c) != 1 for c in calls):
            raise RuntimeError(f"expected one router call per MoE layer, got {[len(c) for c in calls]}")
        B, W = len(seqs), self._width
        ids = np.stack([c[0].ids.numpy().reshape(B, W, -1) for c in calls], axis=2)
        weights = np.stack([c[0].weights.numpy().reshape(B, W, -1) for c in calls], axis=2)
        margin = np.stack([c[0].margin.numpy().reshape(B, W) for c in calls], axis=2)
        out = []
        for b, s in enumerate(seqs):
            rows = len(s) - 1
            out.append(SeqRoutes(ids[b, :rows], weights[b, :rows], margin[b, :rows]))
        return out


# ------------------------------------------------------------------ transformers sampler


def generate_routes(
    captures, moe_layers: tuple[int, ...], prompt_lengths: list[int], width: int, lengths: list[int]
) -> list[SeqRoutes] | str:
    """Each row's routes from one ``generate`` call's router captures, or why they cannot be read.

    Rows are left-padded to ``width``. Call 0 is the prefill ``[rows x width]``;
    call ``t >= 1`` feeds each row's completion token ``t - 1`` (input position
    ``prompt + t - 1``). A completion of ``n`` tokens is routed through
    ``prompt + n - 1`` positions: its last token is never fed.
    """
    calls = [captures[layer] for layer in moe_layers]
    B = len(prompt_lengths)
    steps = max(lengths, default=0)
    if any(len(c) < max(steps, 1) for c in calls):
        return (
            f"generate made {min(len(c) for c in calls)} router calls for {steps} generated tokens; "
            "its routes cannot be placed"
        )
    prefill = np.stack([c[0].ids.numpy().reshape(B, width, -1) for c in calls], axis=2)
    prefill_w = np.stack([c[0].weights.numpy().reshape(B, width, -1) for c in calls], axis=2)
    decode = [np.stack([c[t].ids.numpy().reshape(B, -1) for c in calls], axis=1) for t in range(1, steps)]
    decode_w = [np.stack([c[t].weights.numpy().reshape(B, -1) for c in calls], axis=1) for t in range(1, steps)]
    out = []
    for r, (p, n) in enumerate(zip(prompt_lengths, lengths, strict=True)):
        ids = [prefill[r, width - p :]] + [decode[t - 1][r][None] for t in range(1, n)]
        w = [prefill_w[r, width - p :]] + [decode_w[t - 1][r][None] for t in range(1, n)]
        out.append(SeqRoutes(np.concatenate(ids), np.concatenate(w).astype(np.float32)))
    return out


# ------------------------------------------------------------------ vLLM


def vllm_routes_unsupported() -> str | None:
    """Why the installed vLLM cannot return routed experts here, or None when it can.

    ``enable_return_routed_experts`` (vLLM >= 0.14) needs Model Runner V2 from
    0.32 on, which vLLM runs only on GPU platforms with Triton.
    """
    try:
        import vllm
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        return "vLLM is not installed"
    import dataclasses

    if "enable_return_routed_experts" not in {f.name for f in dataclasses.fields(EngineArgs)}:
        return f"vLLM {vllm.__version__} has no enable_return_routed_experts (it came in 0.14)"
    try:
        from vllm.platforms import current_platform

        gpu = current_platform.is_cuda() or current_platform.is_rocm()
    except Exception:
        gpu = False
    if not gpu:
        return (
            f"vLLM {vllm.__version__} on this CPU build cannot return routed experts "
            "(enable_return_routed_experts needs Model Runner V2, which runs on GPUs only)"
        )
    return None


def from_engine_layout(array, moe_layers: tuple[int, ...], start: int = 0) -> SeqRoutes:
    """vLLM >= 0.22 / SGLang / slime rows ``[tokens - 1 - start, all decoder layers, k]`` as MoE-layer routes."""
    a = np.asarray(array)
    return SeqRoutes(a[:, list(moe_layers), :].astype(np.int64))


# ------------------------------------------------------------------ manifest


def routing_meta(tap, sampler: SideRoutes, trainer: SideRoutes, replay: str | None) -> RoutingMeta:
    layers = tap.layers
    return RoutingMeta(
        family=layers.family.name,
        num_layers=layers.num_layers,
        moe_layers=layers.moe_layers,
        num_experts=layers.num_experts,
        top_k=layers.top_k,
        sampler=sampler,
        trainer=trainer,
        replay=replay,
    )


# ------------------------------------------------------------------ run directory


def sampler_round_path(run_path, round_index: int):
    from pathlib import Path

    from mismatchscope.routing.io import SAMPLER_ROUTES_PREFIX

    return Path(run_path) / "samples" / f"{SAMPLER_ROUTES_PREFIX}{round_index:05d}.parquet"


def save_sampler_round(run_path, round_index: int, completions, n: int) -> None:
    """Keep a round's sampler routes beside its samples (written first: a round's samples imply its routes)."""
    from mismatchscope.routing.io import write_sampler_round

    with_routes = [c for c in completions if c.routes is not None]
    if with_routes:
        write_sampler_round(
            sampler_round_path(run_path, round_index),
            [c.prompt_index * n + c.sample_index for c in with_routes],
            [c.routes for c in with_routes],
        )


def sampler_side(sampler, kind: str) -> SideRoutes:
    """What a sampler says about its routes; vLLM samplers say why they return none."""
    status = getattr(sampler, "routes_status", None)
    if status is not None:
        return status()
    if kind.startswith("vllm"):
        why = vllm_routes_unsupported() or f"the {kind} sampler returned no routes"
        return SideRoutes(False, why=why)
    return SideRoutes(False, why=f"the {kind} sampler does not return routes")


def write_route_shard(
    path, shape: Shape, completions, prompt_ids: list[list[int]], n: int, sampler_routes: dict[int, SeqRoutes], scored
) -> int:
    """One ``routes/part-*`` shard for a token shard's sequences: the sampler's recorded and the trainer's routes.

    Returns its row count (for the shard index)."""
    from mismatchscope.routing.io import routes_table, write_shard

    seq_ids = [c.prompt_index * n + c.sample_index for c in completions]
    prompt_lengths = [len(prompt_ids[c.prompt_index]) for c in completions]
    rows = [p + len(c.token_ids) - 1 for p, c in zip(prompt_lengths, completions, strict=True)]
    sampler = [sampler_routes.get(s) for s in seq_ids]
    for s, got, want in zip(seq_ids, sampler, rows, strict=True):
        if got is not None and got.ids.shape[0] != want:
            raise ValueError(f"sampler routes of sequence {s}: {got.ids.shape[0]} rows for {want} input positions")
    trainer = [s.routes for s in scored]
    table = routes_table(shape, seq_ids, prompt_lengths, rows, sampler, trainer)
    write_shard(path, table)
    return table.num_rows


# ------------------------------------------------------------------ replay checks


def check_replay_probe(replay: str | None, info: CheckpointInfo, sampler_kind: str) -> None:
    """``probe --replay-routes``: refused before the run exists where no sampler routes can come."""
    from mismatchscope.errors import UsageError
    from mismatchscope.probe.samplers import capabilities_of
    from mismatchscope.routing.families import family_for

    if replay is None:
        return
    if not info.is_moe:
        raise UsageError(f"--replay-routes needs an MoE checkpoint; {info.path} is dense")
    if family_for(model_type_of(info)) is None:
        raise UsageError(f"--replay-routes: {unknown_family(info)}")
    caps = capabilities_of(sampler_kind)
    if caps.remote:
        raise UsageError(
            "--replay-routes in a probe needs the sampler's routes before it samples; a vllm-server "
            "returns them only if it was started with --enable-return-routed-experts",
            hint="probe without it (the server's routes are recorded where it returns them), then "
            "rescore --replay-routes; or use --sampler hf",
        )
    if caps.package == "vllm" and not caps.remote:
        why = vllm_routes_unsupported()
        if why is not None:
            raise UsageError(f"--replay-routes needs the sampler's routes: {why}", hint="use --sampler hf")


def check_replay_source(run_path, manifest: dict, replay: str | None) -> RoutingMeta | None:
    """``rescore --replay-routes``: the recorded run must hold the sampler's routes (and weights, if asked)."""
    from mismatchscope.errors import UsageError
    from mismatchscope.routing.layout import MANIFEST_KEY

    raw = manifest.get(MANIFEST_KEY)
    meta = RoutingMeta.from_dict(raw) if raw else None
    if replay is None:
        return meta
    if meta is None:
        dense = not (manifest.get("config") or {}).get("checkpoint", {}).get("is_moe")
        what = (
            "is a dense run: it has no routes"
            if dense
            else f"holds no routes ({manifest.get('routing_unavailable') or 'none were recorded'})"
        )
        raise UsageError(f"--replay-routes: {run_path} {what}")
    if not meta.sampler.recorded:
        raise UsageError(
            f"--replay-routes: {run_path} has no sampler routes to replay ({meta.sampler.why})",
            hint="record them with --sampler hf",
        )
    if replay == "ids+weights" and not meta.sampler.weights:
        raise UsageError(
            f"--replay-weights: {run_path} recorded the sampler's expert ids but not its gate weights",
            hint="replay the ids alone with --replay-routes",
        )
    return meta


# ------------------------------------------------------------------ per run


def routing_manifest(manifest: dict, trainer, side: SideRoutes | None, replay: str | None, note: Note) -> Shape | None:
    """Put the run's :class:`RoutingMeta` in the manifest and say in one line what is missing.

    Returns the shape routes are written in, or None where none are (dense, unknown family).
    """
    from mismatchscope.routing.layout import MANIFEST_KEY

    tap = trainer.routes.tap
    if tap is None:
        if trainer.routes.why:
            manifest["routing_unavailable"] = trainer.routes.why
            note(f"routes: {trainer.routes.why}")
        return None
    if side is None:  # a resumed run whose rounds were all sampled before: keep what was recorded then
        old = manifest.get(MANIFEST_KEY) or {}
        side = SideRoutes(**old["sampler"]) if old.get("sampler") else SideRoutes(False, why="not known")
    manifest[MANIFEST_KEY] = routing_meta(tap, side, SideRoutes(True, weights=True), replay).to_dict()
    if not side.recorded:
        note(f"routes: the trainer's are recorded, the sampler's are not: {side.why}")
    return shape_of(tap)


@dataclass
class RoundRoutes:
    """What scoring a round needs for routes: the shape, the sampler's recorded routes, the replay level."""

    shape: Shape
    sampler: dict[int, SeqRoutes]
    replay: str | None = None

    @classmethod
    def of_probe_round(cls, shape: Shape | None, run_path, round_index: int, replay: str | None) -> RoundRoutes | None:
        from mismatchscope.routing.io import read_sampler_round

        if shape is None:
            return None
        return cls(shape, read_sampler_round(sampler_round_path(run_path, round_index)), replay)

    @classmethod
    def of_source(
        cls, src_path, old_manifest: dict, trainer, replay: str | None, manifest: dict, note: Note
    ) -> RoundRoutes | None:
        """A rescore's routes: the recorded run's sampler side, checked against the trainer's model."""
        from mismatchscope.errors import InputError
        from mismatchscope.reader import read_routes
        from mismatchscope.routing.io import sequences_of
        from mismatchscope.routing.layout import (
            MANIFEST_KEY,
            SAMPLER_EXPERTS,
            SAMPLER_WEIGHTS,
        )

        raw = old_manifest.get(MANIFEST_KEY)
        src = RoutingMeta.from_dict(raw) if raw else None
        side = src.sampler if src is not None else SideRoutes(False, why="the recorded run holds no routes")
        shape = routing_manifest(manifest, trainer, side, replay, note)
        if shape is None or src is None or not src.sampler.recorded:
            return None if shape is None else cls(shape, {}, replay)
        if Shape.of(src) != shape:
            raise InputError(
                f"{src_path}'s routes were recorded for {src.num_layers} layers (MoE layers "
                f"{list(src.moe_layers)}), {src.num_experts} experts, top-{src.top_k}; the checkpoint "
                f"has {shape.num_layers}, {list(shape.moe_layers)}, {shape.num_experts}, "
                f"top-{shape.top_k}",
                hint="rescore with the checkpoint the routes came from",
            )
        columns = ["sequence_id", "input_position", SAMPLER_EXPERTS] + (
            [SAMPLER_WEIGHTS] if src.sampler.weights else []
        )
        sampler = sequences_of(read_routes(src_path, columns=columns), "sampler", shape, weights=src.sampler.weights)
        return cls(shape, sampler, replay)

    def forced(self, sequence_id: int) -> SeqRoutes | None:
        """What the trainer is forced to for this sequence (None without replay)."""
        from mismatchscope.errors import InputError

        if self.replay is None:
            return None
        got = self.sampler.get(sequence_id)
        if got is None:
            raise InputError(f"sequence {sequence_id} has no sampler routes to replay")
        return got if self.replay == "ids+weights" else SeqRoutes(got.ids)

    def write(self, run_path, round_index: int, index: int, shard, prompt_ids, n: int, scored) -> None:
        from pathlib import Path

        from mismatchscope import rundir
        from mismatchscope.routing.layout import ROUTES

        path = Path(run_path) / ROUTES / f"part-{round_index:05d}-{index:05d}.parquet"
        rows = write_route_shard(path, self.shape, shard, prompt_ids, n, self.sampler, scored)
        rundir.ShardIndex(run_path, ROUTES).commit(path, rows)


def moe_layers_from_config(info: CheckpointInfo) -> tuple[tuple[int, ...] | None, str | None]:
    """(absolute MoE layer indices, None) from the checkpoint's config, without loading weights (meta device).

    (None, why) for an unknown family.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from mismatchscope.routing.families import family_for, find_moe_layers

    family = family_for(model_type_of(info))
    if family is None:
        return None, unknown_family(info)
    config = AutoConfig.from_pretrained(str(info.path))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return find_moe_layers(model, family).moe_layers, None
