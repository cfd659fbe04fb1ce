"""Pictures (PNG) and self-contained HTML pages for ``report``, ``compare-masks``, ``gate``, ``timeline`` and
``diagnose``.

matplotlib (the ``plot`` extra) is imported inside the modules that draw
only, and only when a command asks for pictures: ``mismatchscope --help``
never pays for it. The histograms they draw are gathered during the analysis
pass (``mismatchscope.analysis.histograms``); which rules and sweeps they
draw is chosen by ``mismatchscope.rules.drawn``, before any of them is imported.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


@dataclass
class Picture:
    name: str
    """file stem: ``log_ratio_hist`` -> ``log_ratio_hist.png``."""
    title: str
    caption: str
    png: bytes


_DRAWN: list[tuple[Any, list[Picture]]] = []


def drawn_once(doc: Any, draw: Callable[[Any], list[Picture]]) -> list[Picture]:
    """The pictures ``draw`` makes of ``doc``, drawn once however many outputs show them (``--plots`` writes
    them, ``--html`` inlines them): the last document's are kept."""
    if not _DRAWN or _DRAWN[0][0] is not doc:
        _DRAWN[:] = [(doc, draw(doc))]
    return _DRAWN[0][1]


def _pictures(runs, rules) -> list[Picture]:
    """The pictures of one run or of several overlaid (report's; the gate's after its checks): where the
    mismatch sits, then the routing and sweep ones."""
    from .route_pictures import has_flip_rates
    from .sweep_pictures import sweep_curves

    out = _mismatch_pictures(runs, rules)
    if any(has_flip_rates(r) for r in runs):
        out.append(_route_picture(runs))
    sweeps = sweep_curves(runs, rules)
    if sweeps is not None:
        out.append(
            _picture(
                "sweeps",
                "Reject rate against threshold",
                "The share of tokens each rule rejects (or reweights) "
                "as its threshold moves; the dotted line is the selected value.",
                sweeps,
            )
        )
    return out


def _mismatch_pictures(runs, rules) -> list[Picture]:
    """Where the mismatch sits: the log-ratio histogram, the probability density, the breakdowns."""
    from ..rules import make_instance
    from . import run_pictures as M

    by_name = {r.name: r for r in rules}
    icepop = by_name.get("icepop") or make_instance("icepop", {})
    ipo = by_name.get("ipo") or make_instance("ipo", {})
    histogram = _picture(
        "log_ratio_hist",
        "Log ratio histogram",
        "Counts of l = log p - log q on a symmetric log axis (log-scaled "
        "counts); dashed lines: the thresholds of the selected rules on r = p/q, drawn at log r.",
        M.log_ratio_histogram(runs, rules),
    )
    density = _picture(
        "prob_density",
        "Sampler vs trainer probability",
        f"Tokens by sampler probability q and trainer probability "
        f"p, both log-scaled. Dashed: the IcePop band ({icepop.label}); solid: the IPO band ({ipo.label}).",
        M.probability_density(runs, icepop, ipo),
    )
    breakdowns = _picture(
        "breakdowns",
        "Where the mismatch sits",
        "Mean |p - q| and mean k3 by sampler-probability bucket and by "
        "position in the completion (deciles of the longest completion).",
        M.breakdowns(runs),
    )
    out = [histogram, density, breakdowns]
    if any(run.report is not None and run.report.breakdowns.turn for run in runs):
        out.append(
            _picture(
                "turns",
                "Where the mismatch sits, turn by turn",
                "Mean |log p - log q| and mean k3 over each assistant turn's tokens (a multi-turn run: tool "
                "spans between turns hold no pairs); under each turn, its tokens.",
                M.turn_breakdown(runs),
            )
        )
    return out


def _route_picture(runs) -> Picture:
    from .route_pictures import route_flips

    return _picture(
        "route_flips",
        "MoE routing flips per layer",
        "The share of rows whose top-k expert set "
        "differs between sampler and trainer, per MoE layer (named by decoder-layer index); solid: "
        "completion rows (the row predicting each completion token), dashed: prompt rows. Missing "
        "captures are left out.",
        route_flips(runs),
    )


def _picture(name: str, title: str, caption: str, fig) -> Picture:
    from .figures import save_png

    return Picture(name, title, caption, save_png(fig))


def write_pngs(pictures: list[Picture], directory: Path, inputs=None, option: str = "--plots") -> list[Path]:
    """Each picture as ``DIR/<name>.png``, written atomically; a name that is one of the command's
    ``inputs`` (``outputs.Inputs``: a file of the same name, or a link to one) is refused, not replaced."""
    from ..outputs import taken_back_on_failure, write_bytes

    paths = []
    with taken_back_on_failure(directory) as written:  # a failure leaves none of this set of pictures
        for p in pictures:
            path = Path(directory) / f"{p.name}.png"
            new = not os.path.lexists(path)
            paths.append(write_bytes(path, p.png, option, inputs=inputs))
            if new:
                written.append(path)
    return paths


def write_html(path: Path, page: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
