"""What the pictures say: titles that match what is drawn, labels that do not overlap, axes that do not turn a 1%
difference into a trade-off, lines that stay visible on top of each other, and a report page that names its run."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from tests.helpers import SAMPLE_PAIRS, cli

pytest.importorskip("matplotlib", reason="pictures need the plot extra")


def test_rule_tails_draws_what_its_title_reads():
    """The title read "icepop rejects mostly q<0.1 tokens (53%)" (a share of the rule's rejections) above bars that
    were shares of each bucket's tokens. Both panels and the title now use one normalisation: each rule's bars sum
    to 100%, and the reading's share is the sum of its bars below 0.1."""
    from mismatchscope.analysis.engine import AnalysisRequest, analyse
    from mismatchscope.render.masks_pictures import TITLE, tail_breakdown
    from mismatchscope.rules import default_rules

    masks = analyse(str(SAMPLE_PAIRS), AnalysisRequest(masks=True, rules=default_rules())).masks
    fig = tail_breakdown(masks)
    assert fig._suptitle.get_text().startswith(TITLE)
    token = next(ax for ax in fig.axes if ax.get_title().startswith("Token rules"))
    assert "rule's rejected tokens" in token.get_ylabel()
    buckets = list(masks.tokens_by_sampler_prob)
    below = [i for i, b in enumerate(buckets) if float(re.findall(r"[\d.]+", b)[-1]) <= 0.1]
    for bars in token.containers:
        heights = np.array([p.get_height() for p in bars])
        assert heights.sum() == pytest.approx(100.0), bars.get_label()
        if bars.get_label() == "icepop":
            shown = re.search(r"icepop rejects mostly q<0.1 tokens \((\d+)%\)", masks.tail_reading)
            assert shown and round(heights[below].sum()) == int(shown[1])


def _ns(data):
    """Plain data as attributes: the fields of a typed document a picture reads, and no other."""
    if isinstance(data, dict):
        return SimpleNamespace(**{k: _ns(v) for k, v in data.items()})
    return [_ns(v) for v in data] if isinstance(data, list) else data


def _payload(certified_zero: bool = True):
    """A diagnose document of five configurations within 1% of each other's throughput (labels once overlapped);
    only the fields the picture reads are filled."""
    from dataclasses import fields

    from mismatchscope.diagnose.document import VariantOk

    def variant(name, gap, tps, low=0.99, high=1.01):
        unread = dict.fromkeys(f.name for f in fields(VariantOk))
        return VariantOk(
            **{
                **unread,
                "name": name,
                "status": "ok",
                "metrics": _ns({"abs_logprob_diff_mean": gap}),
                "throughput": _ns({"pipeline_tokens_per_s": tps, "timing": {"low": low, "high": high}}),
                "certified": name == "zero" and certified_zero,
            }
        )

    return _ns(
        {
            "baseline": {
                "metrics": {"abs_logprob_diff_mean": 5e-4},
                "throughput": {"pipeline_tokens_per_s": 1000.0},
                "certified": False,
            },
            "variants": [
                variant("sampler.dtype=float32", 5e-7, 995.0),
                variant("sampler.prefix_caching", 5.01e-4, 1004.0),
                variant("trainer.attn=eager", 4.99e-4, 1001.0),
                variant("zero", 0.0, 160.0, 0.15, 0.17),
            ],
            "pareto_front": ["sampler.prefix_caching", "sampler.dtype=float32", "zero"],
            "zero_price": [{"configuration": "zero", "cost_x": 6.2}],
        }
    )


def test_the_pareto_picture_names_each_point_once_and_starts_throughput_at_zero():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from mismatchscope.render.diagnose_pictures import pareto_figure

    fig = pareto_figure(_payload())
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    assert ax.get_xlim()[0] == 0  # a 1% difference in throughput is drawn as 1%
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])  # no label on another
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    for name in ("baseline", "sampler.dtype=float32", "sampler.prefix_caching", "trainer.attn=eager"):
        assert any(text.startswith(name) for text in legend), (name, legend)
    assert "zero (Pareto front; certified, costs 6.20x)" in legend
    assert fig._suptitle.get_text() == "Mismatch against throughput"


def _entry(same: bool):
    ops = ["embed", "input_norm", "attn", "mlp", "final_norm", "logits", "logprob"]
    points = []
    for i, op in enumerate(ops):
        ref = 1e-6 * (i + 1)
        points.append(
            {
                "point": op,
                "layer": 0 if op in ("input_norm", "attn", "mlp") else None,
                "op": op,
                "sides": {"median": 2 * ref, "max": 3 * ref},
                "sampler_vs_reference": {"median": ref, "max": ref},
                "trainer_vs_reference": {"median": ref if same else ref / 10, "max": ref},
            }
        )
    result = {
        "sampler": "vllm float16",
        "trainer": "transformers float32",
        "points": points,
        "verdict": {"first_parting": "embed", "reading": "they part at embed"},
    }
    return _ns({"configuration": "baseline", "result": result})


def test_the_locate_picture_has_a_title_and_shows_lines_that_coincide():
    """Two sides at the same distance from the reference once drew one line over the other, and the picture had
    no title: the band under the line keeps both visible."""
    from mismatchscope.render.locate_pictures import locate_figure

    fig = locate_figure(_entry(same=True))
    assert fig._suptitle.get_text() == "Where the gap enters: baseline (vllm float16 vs transformers float32)"
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    band, over = lines["sampler vs reference"], lines["trainer vs reference"]
    assert np.array_equal(band.get_ydata(), over.get_ydata())  # the case: the two lines coincide
    assert band.get_linewidth() > 2 * over.get_linewidth() and band.get_zorder() < over.get_zorder()
    styles = {(ln.get_linewidth(), ln.get_linestyle(), ln.get_marker()) for ln in lines.values()}
    assert len(styles) == 3


@pytest.mark.slow  # 15 s: the report's pictures, then Chromium
def test_the_report_page_names_the_run_and_carries_doctor_and_the_rules(tmp_path):
    """The page's header named a shard, not the run, and had neither doctor's verdict nor the per-rule table."""
    page = tmp_path / "report.html"
    r = cli("report", str(SAMPLE_PAIRS), "--html", str(page))
    assert r.returncode == 0, r.stderr
    text = _rendered_text(page)
    assert f"mismatchscope report: {SAMPLE_PAIRS}" in text
    assert "doctor: numerics:" in text
    assert "What each rule would reject or reweight" in text and "icepop" in text


def _rendered_text(page) -> str:
    """The page's text as a browser lays it out (headless Chromium's DOM after load), else its HTML's text."""
    import subprocess
    import tempfile

    from tests.render.test_figures import CHROMIUM

    if CHROMIUM is None:  # pragma: no cover - CI installs it (.ci/run)
        pytest.skip("headless Chromium is not installed")
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert r.returncode == 0, r.stderr[-2000:]
    return " ".join(re.sub(r"<[^>]+>", " ", r.stdout).split()).replace("&amp;", "&")
