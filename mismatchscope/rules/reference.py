"""``docs/rules.md``, written from the registry (a test checks the file against it, so it cannot drift).

python -m mismatchscope.rules.reference > docs/rules.md
"""

from __future__ import annotations

from dataclasses import MISSING

from .base import RULES, RuleSpec, _fmt
from .readings import READINGS, Reading, RuleReading


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
        out.append(
            f"| `{name}` | {spec.level_text} | {spec.acts} | {'yes' if spec.uses_advantage else 'no'} | {_cell(spec.quantity)} |"
        )
    for name, spec in RULES.items():
        out += [
            "",
            f"## `{name}`",
            "",
            spec.summary + ".",
            "",
            f"Level: {spec.level_text}; action: {spec.acts}; uses the advantage: {'yes' if spec.uses_advantage else 'no'}.",
            f"Source: {spec.source}.",
            "",
            "| parameter | default | allowed | meaning |",
            "|---|---|---|---|",
        ]
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
    out += readings_markdown()
    return "\n".join(out) + "\n"


READINGS_HEADER = """## Framework readings

A reading is a rule as one framework's own code computes it: that framework's
defaults and conventions (where A = 0 goes, which way k3 is taken, the
epsilon in a binary KL, the thresholds), written as the rule's parameters.
Select one with `--rule NAME@READING` wherever a rule is named (`compare-masks`,
`report --plots`, `timeline`, `gate`'s `--rule`, `[rules]` and metric names such
as `dppo-kl@skyrl.token_reject_rate`, the Monitor's `rules`); parameters given
after it win (`--rule dppo-kl@skyrl:delta=0.05` is SkyRL's code at 0.05).
A rule a framework does not have is refused with the list of those it has.

`compare-masks FILE --readings RULE` shows one rule under mismatchscope's
defaults and every reading that has it (or `--readings RULE@R1,R2`): the
counts, and the tokens on which each reading differs from the first, by
category: A = 0, p or q exactly 1 (a logprob of exactly 0), exactly at a
threshold, other. `--readings RULE@R1,R2:delta=0.05` sets a parameter in
every reading (their other choices stay). With `--format json` it prints a
document with `schema_version` first
([schemas/compare-masks-readings.json](schemas/compare-masks-readings.json)).

Every comparison in the frameworks read rejects strictly beyond a threshold
(`>`, `<`) and keeps a value exactly on it, as mismatchscope does, so no
reading below differs in its operators. Clamps that change no verdict at
these thresholds are not modelled: SkyRL takes its ratios with log r clamped
to +-20 (e^-20 and e^20 lie beyond every ratio threshold here); verl's
rollout_rs clamps l to +-20 before k1, k2, k3 (the `verl-rs` rule reproduces
it). mismatchscope computes in float64 from the logprobs; a framework that
computes in float32 (SkyRL's and AReaL's ratios are float32) can land
differently on a token within float32 rounding of a threshold (`p` of a
logprob of -1e-9 is 1 in float32).

Each reading below says where its numbers come from: the framework's config
default, an example script's value, or a suggestion in a docstring, with the
file; the commit is the reading's snapshot unless another is named."""


def readings_markdown() -> list[str]:
    """The readings: the differences table (parameters that differ from mismatchscope's defaults), then
    each reading's source file and snapshot per rule."""
    names = list(READINGS)
    legend = (
        "Each cell: the parameters the reading sets that differ from the rule's defaults (`same`: none; "
        "blank: the framework has no such rule)."
    )
    out = [
        "",
        READINGS_HEADER,
        "",
        "### Differences from mismatchscope's defaults",
        "",
        legend,
        "",
        "| rule | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for rule, spec in RULES.items():
        cells = [_differences(spec, READINGS[n].rules.get(rule)) for n in names]
        if any(cells):
            out.append(f"| `{rule}` | " + " | ".join(_cell(c) for c in cells) + " |")
    for r in READINGS.values():
        out += _reading_section(r)
    return out


def _differences(spec: RuleSpec, rr: RuleReading | None) -> str:
    """A reading's parameters of one rule that differ from the rule's defaults (blank: the framework lacks it)."""
    if rr is None:
        return ""
    defaults = {f.name: f.default for f in spec.params()}
    diff = {k: v for k, v in rr.params.items() if defaults.get(k) != v}
    return ", ".join(f"`{k}={_fmt(v)}`" for k, v in diff.items()) or "same"


def _reading_section(r: Reading) -> list[str]:
    """One reading: its source snapshot, then per rule what it follows, how it differs and where its numbers are."""
    out = [
        "",
        f"### `{r.name}`: {r.framework}",
        "",
        f"Read: `{r.repository}`, {r.version}; files and commits below are of that snapshot unless named."
        + (f" Otherwise: {r.lacks_hint}." if r.lacks_hint else ""),
        "",
        "| rule | follows | differs | numbers from |",
        "|---|---|---|---|",
    ]
    for rule, rr in r.rules.items():
        numbers = _cell(rr.numbers) or "the rule's own defaults"
        out.append(f"| `{rule}@{r.name}` | {_cell(rr.file)} | {_cell(rr.differs) or 'nothing'} | {numbers} |")
    return out


if __name__ == "__main__":
    print(rules_markdown(), end="")
