"""Pictures and the HTML page: histogram bins by hand, PNGs written by the real
console script, the HTML self-contained and opened by headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from mismatchscope.analysis.histograms import PlotAccumulator, log_ratio_edges, prob_edges
from mismatchscope.analysis.results import MasksResult, Sweep, SweepPoint
from mismatchscope.divergence import token_terms
from mismatchscope.rules import make_instance, parse_rule
from mismatchscope.rules.drawn import default_sweeps, plot_rules, ratio_thresholds, sweep_x
from tests.helpers import SAMPLE_PAIRS, cli
from tests.helpers import probe_meta as meta
from tests.inputs import one_sequence, raw_parquet

pytest.importorskip("matplotlib", reason="pictures need the plot extra")

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def test_log_ratio_bins_by_hand():
    # l = lp - lq for: 0, 1e-10 (both in the middle bin |l| < 1e-9), +0.5, -0.5, +200 (clipped to the last bin)
    lq = np.log(np.full(5, 0.25))
    lp = lq + np.array([0.0, 1e-10, 0.5, -0.5, 200.0])
    acc = PlotAccumulator()
    acc.add(token_terms(lp, lq))
    edges = log_ratio_edges()
    c = acc.log_ratio_counts
    assert c.sum() == 5 and acc.tokens == 5
    mid = c.size // 2
    assert edges[mid] == pytest.approx(-1e-9) and edges[mid + 1] == pytest.approx(1e-9) and c[mid] == 2
    for value in (0.5, -0.5):
        i = int(np.searchsorted(edges, value, side="right")) - 1
        assert c[i] == 1, value  # the bin whose edges hold the value
    assert c[-1] == 1  # 200 nats: beyond 1e2, counted in the outermost bin


def test_probability_grid_by_hand():
    # (q, p) = (0.5, 0.5), (0.5, 0.05), (1e-12, 0.5): the last q is below 1e-8 and lands in the first column
    lq = np.log([0.5, 0.5, 1e-12])
    lp = np.log([0.5, 0.05, 0.5])
    acc = PlotAccumulator()
    acc.add(token_terms(lp, lq))
    e = prob_edges()
    bin_of = lambda x: max(0, int(np.searchsorted(e, x, side="right")) - 1)
    C = acc.prob_counts_QP
    assert C.sum() == 3
    assert C[bin_of(0.5), bin_of(0.5)] == 1 and C[bin_of(0.5), bin_of(0.05)] == 1 and C[0, bin_of(0.5)] == 1


def test_thresholds_and_default_sweeps():
    assert ratio_thresholds(make_instance("icepop", {})) == [("icepop alpha=0.5", 0.5), ("icepop beta=5", 5.0)]
    assert ratio_thresholds(make_instance("ipo", {})) == []  # |p - q|: drawn on the probability picture instead
    # the rules drawn by default and their grids come from the registrations
    assert [name for name, *_ in default_sweeps(plot_rules(None))] == [
        "icepop",
        "icepop",
        "ipo",
        "kpop",
        "tis",
        "token-mask",
        "token-mask",
    ]
    ((name, key, instances),) = default_sweeps([make_instance("ipo", {"delta": 0.2})])
    assert key == "delta" and [i.params["delta"] for i in instances][:3] == [0.005, 0.01, 0.02]
    # verl-rs: the threshold grid follows the option's family; token_k1 draws its band on r at 1/U and 1/L
    ((name, key, instances),) = default_sweeps([parse_rule("verl-rs:option=seq_mean_k3,threshold=0.01")])
    assert (name, key) == ("verl-rs", "threshold") and [i.params["threshold"] for i in instances] == [
        "0.0001",
        "0.001",
        "0.01",
        "0.1",
        "1",
    ]
    assert all(i.params["option"] == "seq_mean_k3" and i.level == "sequence" for i in instances)
    assert ratio_thresholds(parse_rule("verl-rs:option=token_k1,threshold=0.5_4")) == [
        ("verl-rs 1/U=0.25", 0.25),
        ("verl-rs 1/L=2", 2.0),
    ]
    assert sweep_x("0.5_4") == 4.0 and sweep_x("0.01") == 0.01 and sweep_x(2.0) == 2.0


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG that has something drawn on it (not one flat colour)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    from matplotlib.image import imread

    image = imread(path)
    pixels = image.reshape(-1, image.shape[-1])
    colours = np.unique(np.round(pixels[::7] * 255).astype(int), axis=0)
    assert len(colours) > 8, f"{path.name} is nearly blank ({len(colours)} colours)"
    return struct.unpack(">II", data[16:24])


def test_report_plots_and_html(tmp_path):
    plots, page = tmp_path / "plots", tmp_path / "report.html"
    r = cli(
        "report",
        str(SAMPLE_PAIRS),
        "--plots",
        str(plots),
        "--html",
        str(page),
        "--rule",
        "icepop",
        "--rule",
        "ipo:delta=0.2",
        "--sweep",
        "icepop.beta=1.5,2,5",
    )
    assert r.returncode == 0, r.stderr
    assert "Token mismatch" in r.stdout  # the tables are printed as before
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["breakdowns.png", "log_ratio_hist.png", "prob_density.png", "sweeps.png"]
    for p in plots.iterdir():
        w, h = _png_size(p)
        assert 600 <= w <= 2000 and 400 <= h <= 1600, (p.name, w, h)
    html = page.read_text()
    _assert_self_contained(html, images=4)
    assert (
        "ipo:delta=0.2" in html and "tv_token_mean" in html and "simulated" in html
    )  # captions, metrics, run metadata
    # the file has top-k columns and entropies: the page carries what the terminal prints of them
    data = json.loads(cli("report", str(SAMPLE_PAIRS), "--format", "json").stdout)
    assert "<h2>By trainer entropy</h2>" in html and "<h2>Score centering from the top-k</h2>" in html
    sc = data["score_centering"]
    row = re.search(r"<tr><td>top-k overlap</td><td[^>]*>([^<]+)</td><td[^>]*>([^<]+)</td>", html)
    assert row, "no top-k overlap row"
    assert int(row.group(1).replace(",", "")) == sc["topk_overlap"]["tokens"]
    assert float(row.group(2)) == pytest.approx(sc["topk_overlap"]["mean"], rel=1e-3)
    # numbers never wrap mid-digit, headers never mid-word ("valu" / "e"); the readings' values are numbers too
    css = re.search(r"<style>(.*?)</style>", html, re.S).group(1)
    assert re.search(r"td\.num \{[^}]*white-space: nowrap", css) and re.search(r"th \{[^}]*overflow-wrap: normal", css)
    readings = html.split("<h2>Readings</h2>")[1].split("</table>")[0]
    assert readings.count('<td class="num">') == readings.count("<tr>") - 1  # one value a row, header aside


def test_report_rule_without_pictures_is_a_usage_error():
    r = cli("report", str(SAMPLE_PAIRS), "--rule", "icepop")
    assert r.returncode == 2 and "choose what the pictures draw" in r.stderr


@pytest.fixture
def gate_pair(write):
    def cols(sigma, seed):
        r = np.random.default_rng(seed)
        lq = -r.exponential(0.8, 600)
        return {
            "sequence_id": np.repeat(np.arange(30), 20),
            "position": np.tile(np.arange(20), 30),
            "token_id": np.zeros(600, int),
            "sampler_logprob": lq,
            "trainer_logprob": np.minimum(lq + r.normal(0, sigma, 600), 0.0),
        }

    return write(cols(0.002, 1), "base.parquet", meta()), write(
        cols(0.05, 2), "cand.parquet", meta(sampler={"dtype": "float16"})
    )


def test_gate_plots_and_html(gate_pair, tmp_path):
    base, cand = gate_pair
    plots, page = tmp_path / "gate_plots", tmp_path / "gate.html"
    r = cli("gate", str(cand), "--baseline", str(base), "--plots", str(plots), "--html", str(page))
    assert r.returncode == 1, r.stderr  # sigma 0.05 against 0.002: worse by far
    assert sorted(p.name for p in plots.iterdir()) == [
        "breakdowns.png",
        "gate_checks.png",
        "log_ratio_hist.png",
        "prob_density.png",
        "sweeps.png",
    ]
    html = page.read_text()
    _assert_self_contained(html, images=5)
    assert "FAIL:" in html and "sampler.dtype: &#x27;float32&#x27; -&gt; &#x27;float16&#x27;" in html
    assert "baseline" in html and "candidate" in html


def _assert_self_contained(html: str, images: int) -> None:
    """Pictures inline, links only within the page (its tabs, the token view's sequences), scripts only inline."""
    srcs = [s for s in re.findall(r'(?:src|href)="([^"]*)"', html) if not s.startswith("#")]
    assert len(srcs) == images and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r"<script[^>]*\bsrc=", html) and "http://" not in html and "https://" not in html
    assert html.count("<table>") >= 2
    assert 'href="#tokens"' in html and 'id="tv-data"' in html  # the token view's tab, linked from the page


# ---- headless Chromium ----------------------------------------------------------------------


def chromium_open(page: Path, screenshot: Path) -> list[str]:
    """Open ``page`` in headless Chromium, write a screenshot, return the console lines it logged."""
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1300,2400",
                f"--screenshot={screenshot}",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert screenshot.is_file(), r.stderr[-2000:]
    return [line for line in r.stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium; .ci/run does it)"
)
def test_console_scan_catches_errors(tmp_path):
    """The detector itself: a page that logs an error and throws is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><p>x</p><script>console.error("boom"); nope();</script></body></html>')
    lines = chromium_open(bad, tmp_path / "bad.png")
    assert any('"boom"' in line for line in lines) and any("ReferenceError" in line for line in lines)


@pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium; .ci/run does it)"
)
def test_html_opens_in_chromium_without_console_errors(gate_pair, tmp_path):
    base, cand = gate_pair
    page = tmp_path / "gate.html"
    r = cli("gate", str(cand), "--baseline", str(base), "--html", str(page))
    assert r.returncode == 1, r.stderr
    shot = tmp_path / "gate-screenshot.png"
    lines = chromium_open(page, shot)
    assert lines == [], lines  # the token view's script logs nothing: any console line is a problem
    import matplotlib.image as mpimg

    pixels = mpimg.imread(str(shot))
    w, h = _png_size(shot)
    assert (w, h) == (1300, 2400)
    assert float(np.std(pixels[..., :3])) > 0.05, "the screenshot is blank"
    # the verdict banner (light red) is painted near the top: the page rendered, not an error page
    top = pixels[: h // 8, : w // 3, :3].reshape(-1, 3)
    assert np.any((top[:, 0] > 0.95) & (top[:, 1] < 0.95) & (top[:, 1] > 0.85)), "no FAIL banner in the screenshot"


def test_compare_masks_plots_the_tails(tmp_path):
    plots = tmp_path / "plots"
    r = cli(
        "compare-masks",
        str(SAMPLE_PAIRS),
        "--plots",
        str(plots),
        "--format",
        "json",
        "--rule",
        "icepop",
        "--rule",
        "ipo",
        "--rule",
        "kpop",
        "--rule",
        "verl-rs:option=seq_mean_k3,threshold=0.01",
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in plots.iterdir()) == ["rule_tails.png"]
    w, h = _png_size(plots / "rule_tails.png")
    assert 1200 <= w <= 2000 and 600 <= h <= 1400, (w, h)
    data = json.loads(r.stdout)
    # the picture draws what the JSON holds: every rejecting rule's tail counts, summing to its rejections
    for row in data["rules"]:
        assert sum(row["rejected_by_sampler_prob"].values()) == row["tokens_rejected"], row["name"]
        assert sum(row["rejected_by_pq_sign"].values()) == row["tokens_rejected"], row["name"]
    assert {row["name"]: row["level"] for row in data["rules"]} == {
        "icepop": "token",
        "ipo": "token",
        "kpop": "token",
        "verl-rs": "sequence",
    }
    assert data["tail_reading"].startswith("Which tail each rule cuts: icepop rejects")


def test_report_pictures_draw_a_selected_verl_rs_sweep(tmp_path):
    plots = tmp_path / "plots"
    r = cli(
        "report",
        str(SAMPLE_PAIRS),
        "--plots",
        str(plots),
        "--rule",
        "verl-rs:option=token_k1,threshold=0.5_2.0",
        "--rule",
        "kpop",
    )
    assert r.returncode == 0, r.stderr
    assert "sweeps.png" in {p.name for p in plots.iterdir()}


def test_sweep_picture_draws_zero_as_zero():
    """A sweep whose largest threshold rejects nothing: its point is drawn at y = 0 on a tick labelled 0%.

    Points (threshold, reject rate): (1.5, 2%), (2, 0.04%), (5, 0%). The smallest positive rate 0.04% sets
    the linear region of the symmetric-log axis: [0, 0.01%]; decade ticks 0.01% .. 10% (2% x 2 = 4% -> 10%).
    """
    from mismatchscope.render.figures import Run
    from mismatchscope.render.sweep_pictures import sweep_curves

    points = [SweepPoint(v, "data", r, 0.0, 0, 0, 0, 0, None) for v, r in ((1.5, 0.02), (2.0, 0.0004), (5.0, 0.0))]
    masks = MasksResult(0, 0, [], {}, {}, None, [], [Sweep("icepop", "beta", "token", points)], [])
    fig = sweep_curves([Run("run", None, masks, None)], [make_instance("icepop", {})])
    ax = fig.axes[0]
    (line,) = ax.get_lines()[:1]
    assert list(line.get_ydata()) == [2.0, 0.04, 0.0]  # the zero point stays at zero, not moved to an edge
    assert ax.get_yscale() == "symlog" and ax.get_ylim()[0] < 0 < ax.get_ylim()[1]
    fig.canvas.draw()
    labels = {t.get_text(): t.get_position()[1] for t in ax.get_yticklabels()}
    assert labels == {"0%": 0.0, "0.01%": 0.01, "0.1%": 0.1, "1%": 1.0, "10%": 10.0}


def test_an_infinite_bucket_mean_is_drawn_and_marked(tmp_path):
    """The k3 panels got a NaN bar and matplotlib's RuntimeWarning; the bar now reaches the top, marked inf."""
    pytest.importorskip("matplotlib")
    path = raw_parquet(
        tmp_path / "o.parquet",
        one_sequence(
            4,
            sequence_id=[1, 1, 2, 2],
            position=[0, 1, 0, 1],
            sampler_logprob=[-800.0, -1.0, -0.5, -0.5],
            trainer_logprob=[-0.1, -1.0, -0.5, -0.5],
        ),
    )
    r = cli("report", str(path), "--plots", str(tmp_path / "p"), "--format", "json")
    assert r.returncode == 0 and "RuntimeWarning" not in r.stderr, r.stderr
    assert (tmp_path / "p" / "breakdowns.png").stat().st_size > 0
