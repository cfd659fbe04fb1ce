"""The per-layer routing picture of an MoE run: how often the two sides chose different experts, layer by layer.

matplotlib is imported by the caller's path through :mod:`.figures` only when
pictures are asked for; this module is imported from there too.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .figures import COLORS, Run, _fig


def has_flip_rates(run: Run) -> bool:
    ro = run.report.routing if run.report else None
    return ro is not None and ro.route_flip_rate_by_layer is not None


def route_flips(runs: list[Run]) -> Figure:
    """Flip rate per MoE layer (x: decoder-layer index), completion rows solid, prompt rows dashed."""
    fig = _fig(10, 4.2)
    ax = fig.subplots()
    for i, run in enumerate(r for r in runs if has_flip_rates(r)):
        ro = run.report.routing if run.report else None
        assert ro is not None  # drawn only for runs with a routing entry
        color = COLORS[i % len(COLORS)]
        for rows, style, what in (
            (ro.route_flip_rate_by_layer or [], "-", "completion"),
            (ro.prompt_route_flip_rate_by_layer or [], "--", "prompt"),
        ):
            x = np.array([r.layer for r in rows])
            y = np.array([np.nan if r.flip_rate is None else 100 * r.flip_rate for r in rows])
            label = f"{run.label}: {what} rows"
            if what == "completion" and ro.route_flip_rate is not None:
                label += f" (any layer {100 * ro.route_flip_rate:.3g}%)"
            ax.plot(x, y, style, marker="o", markersize=3.5, color=color, label=label)
    ax.set_xlabel("decoder layer (MoE layers only)")
    ax.set_ylabel("flip rate (% of compared rows)")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8.5)
    ax.set_title("Tokens whose top-k expert set differs between sampler and trainer, per MoE layer", fontsize=11)
    return fig
