"""``docs/rules.md``, written from the registry (a test checks the file against it, so it cannot drift).

    python -m mismatchscope.rules.reference > docs/rules.md
"""

from __future__ import annotations

from dataclasses import MISSING

from .base import RULES, _fmt


def _cell(text: str) -> str:
    return text.replace("|", "\\|")

HEADER = """# Masking and correction rules

Generated from the rule registry (`mismatchscope/rules/`) by
`python -m mismatchscope.rules.reference`; a test fails when this file and the
registry disagree. The formulas and the choice between frameworks are
explained in the reference on rules and metrics beside the project.

Select a rule with `--rule NAME` or `--rule NAME:PARAM=VALUE,...` (`compare-masks`,
`report --plots`, `timeline`, `gate`), sweep one parameter with
`--sweep NAME.PARAM=V1,V2,...`. A parameter outside its range is refused where the
rule is parsed, with one line naming the rule, the parameter and the range; `off`
is accepted only where a bound can be absent.

Actions: *reject* drops the token's policy-gradient term (it stays in the loss
normaliser in every framework read); *reweight* keeps it with a truncated or
clipped importance weight. Rules that need the advantage (`uses A`) run on a
file's `advantage` column, or without one under the two labelled hypotheses
A > 0 and A < 0.
"""


def rules_markdown() -> str:
    out = [HEADER, "| rule | level | action | uses A | quantity |", "|---|---|---|---|---|"]
    for name, spec in RULES.items():
        out.append(f"| `{name}` | {spec.level_text} | {spec.acts} | {'yes' if spec.uses_advantage else 'no'} | {_cell(spec.quantity)} |")
    for name, spec in RULES.items():
        out += ["", f"## `{name}`", "", spec.summary + ".", "",
                f"Level: {spec.level_text}; action: {spec.acts}; uses the advantage: {'yes' if spec.uses_advantage else 'no'}.",
                f"Source: {spec.source}.", "", "| parameter | default | allowed | meaning |", "|---|---|---|---|"]
        for f in spec.params():
            meta = f.metadata
            default = "required" if f.default is MISSING else f"`{_fmt(f.default)}`"
            if meta["choices"]:
                allowed = ", ".join(f"`{c}`" for c in meta["choices"])
            elif meta["range"] is not None:
                allowed = f"`{meta['range'].text}`" + (" or `off`" if meta["optional"] else "")
            else:
                allowed = "see below"
            out.append(f"| `{f.name}` | {default} | {allowed} | {_cell(meta['doc'])} |")
        if spec.notes:
            out += ["", spec.notes.strip()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(rules_markdown(), end="")
