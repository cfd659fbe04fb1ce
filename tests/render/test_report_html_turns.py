"""A multi-turn run's pictures and page: the per-turn picture beside the others, the page's turn table and line,
opened in headless Chromium; a run of single turns gets neither."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchscope.schema import write_table
from tests.helpers import cli
from tests.render.test_figures import CHROMIUM, _png_size, chromium_open


def _run(path, turns: bool = True):
    """40 conversations of three turns (8 tokens each); the gap grows with the turn (|l| about 0.02, 0.04, 0.3)."""
    rng = np.random.default_rng(5)
    cols: dict[str, list] = {
        k: []
        for k in ("sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob", "turn", "turn_position")
    }
    for s in range(40):
        for k, scale in enumerate((0.02, 0.04, 0.3)):
            for j in range(8):
                q = float(rng.uniform(-3, -0.05))
                cols["sequence_id"].append(s)
                cols["position"].append(8 * k + j)
                cols["token_id"].append(int(rng.integers(3, 300)))
                cols["sampler_logprob"].append(q)
                cols["trainer_logprob"].append(min(0.0, q + float(rng.normal(0, scale))))
                cols["turn"].append(k)
                cols["turn_position"].append(j)
    if not turns:
        del cols["turn"], cols["turn_position"]
    return write_table(path, cols)


def test_report_pictures_and_page_show_the_turns(tmp_path):
    data = _run(tmp_path / "mt.parquet")
    plots, page = tmp_path / "plots", tmp_path / "report.html"
    r = cli("report", str(data), "--plots", str(plots), "--html", str(page))
    assert r.returncode == 0, r.stderr
    assert "turns.png" in {p.name for p in plots.iterdir()}
    w, h = _png_size(plots / "turns.png")
    assert 600 <= w <= 2000 and 300 <= h <= 1600
    html = page.read_text()
    assert "<h2>By turn</h2>" in html and "Turn 2 has the largest gap" in html
    assert html.split("<h2>By turn</h2>")[1].split("</table>")[0].count("<tr>") == 4  # header + three turns


def test_a_run_of_single_turns_draws_no_turn_picture(tmp_path):
    data = _run(tmp_path / "plain.parquet", turns=False)
    plots, page = tmp_path / "plots", tmp_path / "report.html"
    assert cli("report", str(data), "--plots", str(plots), "--html", str(page)).returncode == 0
    assert "turns.png" not in {p.name for p in plots.iterdir()}
    assert "By turn" not in page.read_text()


@pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium; .ci/run does it)"
)
def test_the_multi_turn_page_opens_in_chromium_without_console_errors(tmp_path):
    data = _run(tmp_path / "mt.parquet")
    page = tmp_path / "report.html"
    assert cli("report", str(data), "--html", str(page)).returncode == 0
    shot = tmp_path / "shot.png"
    assert chromium_open(page, shot) == []
    import matplotlib.image as mpimg

    assert float(np.std(mpimg.imread(str(shot))[..., :3])) > 0.05, "the screenshot is blank"
