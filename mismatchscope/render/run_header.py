"""What the tables of the commands that read a run share: the input's header line and the rules' parameters."""

from __future__ import annotations

from typing import Any

from ..formatting import num


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
