"""What every command's terminal tables share: number cells, the input's header line, rule parameters.

Each command's own tables live in ``render/<command>.py`` (``report``, ``masks`` for compare-masks, ...).
JSON output never goes through here.
"""

from __future__ import annotations

from typing import Any


def num(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return f"{v:,}"
    v = float(v)
    if v == 0:
        return "0"
    if 1e4 <= abs(v) < 1e9:  # 47,650 tokens/s reads at a glance; 4.765e4 makes the reader count
        return f"{v:,.0f}"
    if abs(v) >= 1e4 or abs(v) < 1e-3:  # 8.442e-5, not 8.442e-05: a column's character saved
        return f"{v:.{digits - 1}e}".replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")
    return f"{v:.{digits}g}"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.3g}%"


def header(console, result) -> None:
    run = result.run or {}
    bits = [f"{result.tokens:,} tokens", f"{result.sequences:,} sequences", f"{len(result.source.files)} file(s)"]
    if run.get("simulated"):
        bits.append("SIMULATED data")
    elif run.get("sampler"):
        s = run["sampler"]
        t = run.get("trainer", {})
        bits.append(f"sampler {s.get('kind', '?')}/{s.get('dtype', '?')} vs trainer {t.get('dtype', '?')}")
        if s.get("kind") == "trl-server":  # TRL's server returns processed logprobs only: say what both sides are
            temperature = (run.get("sampling") or {}).get("temperature", "?")
            bits.append(f"trl vllm-serve: processed logprobs, trainer scored the same way at T={temperature}")
        if (run.get("trainer_checkpoint") or {}).get("same_as_sampler") is False:
            bits.append("trainer on another checkpoint (policy lag)")
    console.print(" | ".join(bits), highlight=False, markup=False)  # the run's own words: no markup in them


def parameters(console, params: dict[str, dict[str, Any]]) -> None:
    """Each rule's parameters once, under its table: one line a rule, aligned after its name."""
    width = max(map(len, params), default=0)
    console.print("parameters:", highlight=False)
    for name, ps in params.items():
        text = ", ".join(f"{k}={num(v) if v is not None else 'off'}" for k, v in ps.items())
        console.print(f"  {name:<{width}}  {text}", highlight=False)


def largest_turn_line(rows: list | None) -> str | None:
    """The turn with the largest mean |log p - log q| and by how much it stands out against the other turns'
    tokens (``report``'s breakdown by turn, in the terminal and on the page); None without two measured turns."""
    measured = [r for r in rows or [] if r.tokens and r.abs_logprob_diff_mean is not None]
    if len(measured) < 2:
        return None
    top = max(measured, key=lambda r: r.abs_logprob_diff_mean)
    rest = [r for r in measured if r is not top]
    n = sum(r.tokens for r in rest)
    others = sum(r.tokens * r.abs_logprob_diff_mean for r in rest) / n
    by = f"{top.abs_logprob_diff_mean / others:.3g}x" if others > 0 else "the other turns have none"
    return (
        f"Turn {top.bucket} has the largest gap: mean |log p - log q| {num(top.abs_logprob_diff_mean)} over "
        f"{top.tokens:,} tokens, {by} the other turns' {num(others)}."
        if others > 0
        else f"Turn {top.bucket} has the largest gap: mean |log p - log q| {num(top.abs_logprob_diff_mean)} over "
        f"{top.tokens:,} tokens; {by}."
    )
