"""Two sides (or two runs) field by field: what changed, what only one side recorded, what is the same.

Every field of the record becomes one row with a dotted name
(``used.attention_backend``, ``software.vllm``, ``identities.sampling.temperature``,
``environment.VLLM_USE_V1``); a mapping is compared key by key, so a change
names the key. Rows come changed first, then recorded on one side only, then
the same, then recorded on neither. A field one side did not record is never
a change: nothing is known to have moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..documents import json_edge
from .record import RunProvenance, SideProvenance

Status = Literal["changed", "one side", "same", "not recorded"]
STATUS_ORDER: tuple[Status, ...] = ("changed", "one side", "same", "not recorded")
NOT_RECORDED = "not recorded"
_BY_KEY = ("identities.generation_config", "identities.sampling", "software", "environment")
"""mappings compared key by key."""
REQUEST_SHAPE = frozenset(
    f"identities.sampling.{k}" for k in ("n", "seed", "max_tokens", "min_tokens", "logprobs", "prompt_logprobs")
)
"""sampling fields that shape the requests (how many, how long, which seed), not the stack or the distribution the
logprobs come from: the gate's comparability judges them, its list of stack changes leaves them out."""
NOT_STACK = frozenset({"source"}) | REQUEST_SHAPE
_LABELS = {
    "source": "recorded by",
    "engine": "engine",
    "identities.weights": "weights",
    "identities.tokenizer": "tokenizer",
    "identities.chat_template": "chat template",
    "identities.checkpoint_sha256": "checkpoint files",
    "fallbacks": "fallbacks logged",
    "software.vllm": "vLLM",
    "software.cuda": "CUDA",
    "software.rocm": "ROCm",
    "software.rl_stack": "RL stack",
}
_WORDS = {
    "weights_dtype": "weights dtype",
    "lm_head_dtype": "lm_head dtype",
    "kv_cache_dtype": "KV cache dtype",
    "logits_dtype": "log-softmax dtype",
    "attention_backend": "attention",
    "moe_kernel": "MoE kernel",
    "cuda_graphs": "CUDA graphs",
    "tf32_matmul": "TF32 matmul",
    "tf32_cudnn": "TF32 cuDNN",
    "fp16_reduced_precision_reduction": "fp16 reduced-precision reduction",
    "bf16_reduced_precision_reduction": "bf16 reduced-precision reduction",
    "float32_matmul_precision": "float32 matmul precision",
}


@dataclass(frozen=True)
class FieldRow:
    """One field of two records side by side."""

    field: str
    label: str
    left: Any
    right: Any
    status: Status

    def change(self, side: str | None = None) -> str:
        """``sampler vLLM: 0.32.0 -> 0.33.0``."""
        where = f"{side} " if side else ""
        return f"{where}{self.label}: {shown(self.left)} -> {shown(self.right)}"


def label(field: str) -> str:
    """A row's name in words: ``used.attention_backend`` -> ``attention (used)``."""
    if field in _LABELS:
        return _LABELS[field]
    head, _, rest = field.partition(".")
    if head in ("requested", "used"):
        return f"{_WORDS.get(rest, rest.replace('_', ' '))} ({head})"
    if head == "deployment":
        return rest.replace("_", " ")
    if head == "environment":
        return f"${rest}"
    if head == "identities":
        section, _, key = rest.partition(".")
        return f"{section.replace('_', ' ')} {key}".strip()
    return rest or field


@json_edge
def flatten(side: SideProvenance | None) -> dict[str, Any]:
    """``{dotted field: value}`` of the side's JSON record (values as the manifest holds them); None for a field
    not recorded. A mapping recorded as a whole adds one entry per
    key; a mapping not recorded, one entry for itself."""
    if side is None:
        return {}
    data = to_record_side(side)
    out: dict[str, Any] = {}
    _walk(data, "", out)
    return out


@json_edge
def to_record_side(side: SideProvenance) -> dict[str, Any]:
    """The side as its manifest entry holds it."""
    from ..documents import to_json

    return to_json(side)


def _walk(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if prefix in _BY_KEY:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                out[f"{prefix}.{k}"] = v
        else:
            out[prefix] = value if value else None
        return
    if prefix == "identities.weights":
        out[prefix] = value.get("combined") if isinstance(value, dict) else None
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _walk(v, f"{prefix}.{k}" if prefix else k, out)
        return
    out[prefix] = value


def compare(left: SideProvenance | None, right: SideProvenance | None, prefix: str = "") -> list[FieldRow]:
    """Every field of two sides, in record order (a key only one side has after the other's)."""
    a, b = flatten(left), flatten(right)
    rows = []
    for field in dict.fromkeys([*a, *b]):
        x, y = a.get(field), b.get(field)
        rows.append(FieldRow(prefix + field, label(field), x, y, _status(x, y)))
    return rows


def _status(x: Any, y: Any) -> Status:
    if x is None and y is None:
        return "not recorded"
    if x is None or y is None:
        return "one side"
    return "same" if _same(x, y) else "changed"


def _same(x: Any, y: Any) -> bool:
    """Equal values; 1 and 1.0 are one number (a temperature written either way), True is never 1."""
    if isinstance(x, bool) or isinstance(y, bool):
        return x is y
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return float(x) == float(y)
    return x == y


def ordered(rows: list[FieldRow]) -> list[FieldRow]:
    """Changed first, then one side only, the same, not recorded; record order within each."""
    return sorted(rows, key=lambda r: STATUS_ORDER.index(r.status))


def sides(prov: RunProvenance) -> list[FieldRow]:
    """One run's sampler (left) against its trainer (right)."""
    return ordered(compare(prov.sampler, prov.trainer))


def runs(baseline: RunProvenance, candidate: RunProvenance) -> list[FieldRow]:
    """Two runs side by side, each side against its own: ``sampler.…`` rows, then ``trainer.…`` rows."""
    rows = compare(baseline.sampler, candidate.sampler, "sampler.") + compare(
        baseline.trainer, candidate.trainer, "trainer."
    )
    return ordered(rows)


def stack_changes(baseline: RunProvenance, candidate: RunProvenance) -> list[FieldRow]:
    """What changed in the stack between two runs: fields both recorded and that differ, less who recorded them
    and the requests' shape (the gate's comparability judges seeds and lengths)."""
    return [
        r for r in runs(baseline, candidate) if r.status == "changed" and r.field.partition(".")[2] not in NOT_STACK
    ]


def side_of(row: FieldRow) -> tuple[str, FieldRow]:
    """(``sampler`` or ``trainer``, the row without its side prefix) for a row of :func:`runs`."""
    side, _, field = row.field.partition(".")
    return side, FieldRow(field, row.label, row.left, row.right, row.status)


def shown(value: Any) -> str:
    """A value in a sentence or a cell, whole: a sha256 as its first 12 hex digits (as git shortens a commit),
    a list joined, a mapping as JSON, null as not recorded."""
    if value is None:
        return NOT_RECORDED
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12]
    if isinstance(value, list):
        return "; ".join(shown(v) for v in value) if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        import json

        return json.dumps(value, sort_keys=True)
    return str(value)
