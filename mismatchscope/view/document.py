"""The token view as a typed document: what ``view`` shows, and what report's, compare-masks' and gate's pages
show in their "tokens" tab. ``render/token_view_html.py`` draws it; the page carries it as JSON for its tooltips.

Per sequence the values are columns over the shown tokens in position order
(a window of the sequence where the page's token cap cut it); a rule is
referred to by its ``key`` (``r0``, ``r1``, ...), the class its marks carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .text import TextSource

GAP_EDGES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
"""|log p - log q| (nats) where the colour of a token steps darker: below the first the token stays white,
from the last on it is darkest. Fixed, so two pages' colours mean the same gap."""


@dataclass(frozen=True)
class ViewRule:
    """A rule under one advantage hypothesis, as the page marks it."""

    key: str = field(metadata={"doc": "the class of its marks and its name in the page's data (r0, r1, ...)"})
    name: str = field(metadata={"doc": "as the tables and the audit name it (dppo-tv [A>0], icepop@slime)"})
    label: str = field(metadata={"doc": "the rule with its parameters"})
    level: Literal["token", "sequence"]
    action: Literal["reject", "reweight"]
    hypothesis: str
    statistics: list[str] = field(metadata={"doc": "what it thresholds (the audit's statistic columns)"})
    acted: int = field(
        metadata={"doc": "shown tokens it rejects or reweights (a sequence rule: its sequences' tokens)"}
    )


@dataclass(frozen=True)
class SequenceDecision:
    """A sequence rule on one shown sequence."""

    action: Literal["keep", "reject", "reweight"]
    statistics: dict[str, float | None]
    weight: float | None = None
    """a reweighting rule's weight where it reweights."""


@dataclass(frozen=True)
class TopK:
    """The shown tokens' candidates, a list per token: the sampler's top-k with the trainer's logprob of each,
    and the trainer's own top-k where the run has it (an empty list: none recorded at that position)."""

    sampler_ids: list[list[int]]
    sampler_logprobs: list[list[float]]
    trainer_logprobs_at_sampler: list[list[float]] | None
    trainer_ids: list[list[int]] | None = None
    trainer_logprobs: list[list[float]] | None = None


@dataclass(frozen=True)
class ViewSequence:
    """One shown sequence: its tokens (a window where the cap cut it), the rules' decisions, its turns."""

    sequence_id: int
    rank: int
    value: float | None = field(metadata={"doc": "the value it was ranked by (None: picked by --sequences)"})
    prompt_id: int | None
    tokens: int = field(metadata={"doc": "the sequence's tokens in the run (every number counts them)"})
    start: int = field(metadata={"doc": "index of the first shown token among the sequence's tokens"})
    position: list[int]
    token_id: list[int]
    text: list[str] | None = field(metadata={"doc": "each token's piece of the decoded text; None: ids shown"})
    sampler_logprob: list[float]
    trainer_logprob: list[float]
    log_ratio: list[float] = field(metadata={"doc": "l = log p - log q, from the shared primitive"})
    acted: dict[str, list[int]] = field(metadata={"doc": "token rule key -> indices of the shown tokens it acts on"})
    weights: dict[str, list[float]] = field(metadata={"doc": "reweighting rule key -> its weight at those indices"})
    statistics: dict[str, list[float]] = field(metadata={"doc": "statistic -> its value on each shown token"})
    sequence_rules: dict[str, SequenceDecision]
    turn: list[int] | None = None
    topk: TopK | None = None
    cut: str | None = field(default=None, metadata={"doc": "what of the sequence is not shown, and why"})


@dataclass(frozen=True)
class TokenView:
    """The worst (or the chosen) sequences of a run, token by token."""

    run: str
    tokens: int = field(metadata={"doc": "tokens in the run"})
    sequences_in_run: int
    ranking: str = field(metadata={"doc": "what the sequences are ranked by, or that --sequences chose them"})
    rules: list[ViewRule]
    statistics: dict[str, str] = field(metadata={"doc": "statistic -> what it is"})
    text: TextSource
    vocabulary: dict[str, str] = field(metadata={"doc": "token id -> its text alone, for the top-k candidates"})
    gap_edges: list[float]
    max_tokens: int = field(metadata={"doc": "the cap on the tokens a page shows"})
    shown_tokens: int
    notes: list[str]
    """what the cap cut."""
    warnings: list[str] = field(
        metadata={"doc": "what the pass said about the run (dropped tokens, an unfinished run)"}
    )
    sequences: list[ViewSequence]
    page: str | None = field(default=None, metadata={"json": False})
    """the page the view was written to (``view --html``), which the table names."""
