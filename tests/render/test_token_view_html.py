"""The token view in a real browser: ``view`` on the bundled probe run (tests/data/golden-probe, a real vLLM
sampler against a real transformers trainer on the bundled model), opened offline in headless Chromium.

The DOM is checked against the run and against ``compare-masks --write``'s audit of the same rules: the token
count, each rule's marks, the details box's numbers for a known token; the keys and the rule filter are used
as a reader uses them; the page must log no console error and fetch nothing."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.audit import SEQUENCES_FILE, TOKENS_FILE
from tests.browser import CHROMIUM, NO_CHROMIUM, Browser
from tests.helpers import REPO, SAMPLE_PAIRS, cli
from tests.project.test_golden import GOLDEN, TIGHT_RULES

pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM), pytest.mark.xdist_group("tokens_page")]

RULE_ARGS = [a for r in TIGHT_RULES for a in ("--rule", r)]
"""every default rule, its thresholds set inside the golden run's gap: each one marks some tokens"""


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The view of the golden probe run and the audit of the same rules, written by the commands."""
    out = tmp_path_factory.mktemp("tokens")
    html, audit = out / "view.html", out / "audit"
    r = cli("view", str(GOLDEN), "--html", str(html), *RULE_ARGS, cwd=REPO)
    assert r.returncode == 0, r.stderr
    r = cli("compare-masks", str(GOLDEN), "--write", str(audit), *RULE_ARGS, "--format", "json", cwd=REPO)
    assert r.returncode == 0, r.stderr
    return html, pq.read_table(audit / TOKENS_FILE).to_pandas(), pq.read_table(audit / SEQUENCES_FILE).to_pandas()


@pytest.fixture(scope="module")
def browser(page):
    b = Browser(width=1200, height=900)
    b.open(page[0])
    yield b
    b.close()


def test_opens_offline_without_console_errors(browser, page, tmp_path):
    assert browser.errors == [], browser.errors
    foreign = [u for u in browser.requests if not u.startswith(("file://", "data:"))]
    assert foreign == [], foreign  # nothing fetched: the page opens with no network
    shot = browser.screenshot(tmp_path / "view.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_every_token_of_the_run_is_on_the_page(browser, page):
    _, tokens, _ = page
    assert browser.js("document.querySelectorAll('.tv-seq').length") == tokens["sequence_id"].nunique() == 8
    assert browser.js("document.querySelectorAll('.t').length") == len(tokens) == 434
    # in position order, sequence by sequence, as the run holds them
    shown = browser.js(
        "Array.from(document.querySelectorAll('.tv-seq')).map(a => [a.id, a.querySelectorAll('.t').length])"
    )
    counts = tokens.groupby("sequence_id").size()
    assert {int(i.removeprefix("seq-")): n for i, n in shown} == {int(k): int(v) for k, v in counts.items()}


def test_each_rules_marks_are_its_decisions_in_the_audit(browser, page):
    _, tokens, seqs = page
    rules = browser.js("JSON.parse(document.getElementById('tv-data').textContent).rules")
    assert len(rules) == len(TIGHT_RULES)
    for r in rules:
        if r["level"] == "token":
            marks = browser.js(f"document.querySelectorAll('.t .k.{r['key']}').length")
            assert marks == int((tokens[r["name"]] != "keep").sum()) == r["acted"] > 0, r["name"]
        else:  # a sequence rule marks the sequence: every shown token of it
            marked = browser.js(f"document.querySelectorAll('.tv-seq.sr-{r['key']} .t').length")
            expected = int(seqs.loc[seqs[r["name"]] != "keep", "tokens"].sum())
            assert marked == expected == r["acted"] > 0, r["name"]


def _details(browser) -> dict:
    return browser.js(
        "(() => { const t = document.getElementById('tv-tip'); if (t.hidden) return null;"
        " const f = n => { const e = t.querySelector(`[data-field=${n}]`); return e ? e.textContent : null; };"
        " return {s: Number(t.dataset.s), i: Number(t.dataset.i), lq: f('sampler-logprob'), lp: f('trainer-logprob'),"
        " l: f('log-ratio'), r: f('ratio'), id: f('token-id'), text: t.textContent,"
        " decisions: Object.fromEntries(Array.from(t.querySelectorAll('[data-decision]'))"
        "   .map(e => [e.dataset.rule, e.dataset.decision])),"
        " topk: t.querySelectorAll('[data-field=sampler-topk] tr').length - 1,"
        " box: (r => [r.left, r.right, r.top, r.bottom])(t.getBoundingClientRect()),"
        " width: document.documentElement.clientWidth}; })()"
    )


def test_the_details_of_a_known_token_are_the_runs_numbers(browser, page):
    _, tokens, seqs = page
    run = pq.read_table(GOLDEN / "tokens").to_pandas()
    # the token with the run's largest |log p - log q|, found in the run itself, not on the page
    l_T = run["trainer_logprob"] - run["sampler_logprob"]
    known = run.loc[l_T.abs().idxmax()]
    sid, pos = int(known["sequence_id"]), int(known["position"])
    index = browser.js(
        f"Array.from(document.querySelectorAll('#seq-{sid} .t')).findIndex(e => "
        f"JSON.parse(document.getElementById('tv-data').textContent).sequences[Number(e.dataset.s)]"
        f".position[Number(e.dataset.i)] === {pos})"
    )
    assert index >= 0
    browser.hover(f"#seq-{sid} .t:nth-of-type({index + 1})")
    d = _details(browser)
    assert d is not None, "hovering a token shows its details"
    assert f"sequence {sid}, position {pos}" in d["text"] and d["id"] == f"id {int(known['token_id'])}"
    assert float(d["lq"]) == pytest.approx(known["sampler_logprob"], rel=1e-9)
    assert float(d["lp"]) == pytest.approx(known["trainer_logprob"], rel=1e-9)
    l = known["trainer_logprob"] - known["sampler_logprob"]
    assert float(d["l"]) == pytest.approx(l, rel=1e-6) and float(d["r"]) == pytest.approx(math.exp(l), rel=1e-6)
    # each rule's decision on it is the audit's (a sequence rule: the sequence's)
    rules = {r["key"]: r for r in browser.js("JSON.parse(document.getElementById('tv-data').textContent).rules")}
    row = tokens[(tokens["sequence_id"] == sid) & (tokens["position"] == pos)].iloc[0]
    seq = seqs[seqs["sequence_id"] == sid].iloc[0]
    for key, decision in d["decisions"].items():
        r = rules[key]
        assert decision == (row[r["name"]] if r["level"] == "token" else seq[r["name"]]), r["name"]
    assert d["topk"] == 5  # the run recorded the sampler's top-5 (and the trainer's at them)


def test_the_keys_move_between_marked_tokens_and_the_filter_hides_a_rule(browser, page):
    browser.js("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
    browser.key("n")
    first = browser.js(
        "[document.activeElement.dataset.s, document.activeElement.dataset.i, document.activeElement.dataset.m]"
    )
    expected = browser.js("(e => [e.dataset.s, e.dataset.i, e.dataset.m])(document.querySelector('.t.x'))")
    assert first == expected
    assert _details(browser) is not None  # focus shows the details too
    browser.key("n")
    second = browser.js("[document.activeElement.dataset.s, document.activeElement.dataset.i]")
    assert second != first[:2]
    browser.key("p")
    assert browser.js("[document.activeElement.dataset.s, document.activeElement.dataset.i]") == first[:2]
    browser.key("Escape")
    assert _details(browser) is None
    # untick every rule but one: its marks stay, the others' disappear, and n visits only its tokens
    keep = browser.js("document.querySelector('.t.x').dataset.m.split(' ')[0]")
    browser.js("document.querySelector('button[data-all=\"0\"]').click()")
    browser.js(f"document.querySelector('input[data-rule={keep}]').click()")
    visible = browser.js(
        "Array.from(document.querySelectorAll('.t .k')).filter(e => getComputedStyle(e).display !== 'none')"
        ".map(e => e.classList[1])"
    )
    assert visible and set(visible) == {keep}
    browser.js("document.activeElement && document.activeElement.blur()")
    for _ in range(3):
        browser.key("n")
        assert keep in browser.js("document.activeElement.dataset.m").split(" ")
    browser.js("document.querySelector('button[data-all=\"1\"]').click()")
    browser.key("Escape")


def test_readable_at_80_characters_wide(browser, page, tmp_path):
    """A window 80 characters of the page's text wide: nothing runs off to the side, the details box fits."""
    width = browser.js(
        "(() => { const s = document.createElement('span'); s.style.fontFamily = 'monospace';"
        " s.textContent = 'x'.repeat(80); document.body.appendChild(s); const w = s.getBoundingClientRect().width;"
        " s.remove(); return Math.ceil(w) + 32; })()"
    )
    browser.viewport(width, 800)
    try:
        assert browser.js("document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1")
        browser.hover(".tv-seq:last-of-type .t:last-of-type")
        d = _details(browser)
        assert d is not None and d["box"][0] >= 0 and d["box"][1] <= d["width"] + 1
        browser.screenshot(tmp_path / "narrow.png")
    finally:
        browser.viewport(1200, 900)
        browser.key("Escape")
    assert browser.errors == [], browser.errors


def test_a_run_without_a_tokenizer_shows_ids_and_says_why(tmp_path):
    html = tmp_path / "ids.html"
    r = cli("view", str(SAMPLE_PAIRS), "--html", str(html), "--worst", "3")
    assert r.returncode == 0, r.stderr
    b = Browser(width=900, height=700)
    try:
        b.open(html)
        note = b.js("document.querySelector('.tv-text-note').textContent")
        assert "token ids are shown" in note and "--tokenizer" in note
        texts = b.js(
            "Array.from(document.querySelectorAll('#seq-' + "
            "JSON.parse(document.getElementById('tv-data').textContent).sequences[0].sequence_id + ' .t'))"
            ".slice(0, 5).map(e => e.firstChild.textContent)"
        )
        ids = json.loads(b.js("document.getElementById('tv-data').textContent"))["sequences"][0]["token_id"][:5]
        assert texts == [str(i) for i in ids]
        assert b.errors == [], b.errors
    finally:
        b.close()


def test_the_page_is_one_file_with_nothing_to_fetch(page):
    text = page[0].read_text()
    assert "http://" not in text and "https://" not in text and "<link" not in text
    assert " src=" not in text  # no script, image or frame from elsewhere: everything is inline
    np.testing.assert_equal(text.count('id="tv-data"'), 1)


def test_the_tabs_of_compare_masks_page_and_their_links(tmp_path):
    """compare-masks --html: the rules' table first, the tokens tab behind its link; both open without errors."""
    html = tmp_path / "masks.html"
    r = cli("compare-masks", str(GOLDEN), "--html", str(html), *RULE_ARGS, cwd=REPO)
    assert r.returncode == 0, r.stderr
    b = Browser(width=1000, height=800)
    try:
        b.open(html)
        shown = "[getComputedStyle(document.getElementById('main')).display, getComputedStyle(document.getElementById('tokens')).display]"
        assert b.js(shown) == ["block", "none"]
        assert b.js("document.querySelectorAll('#main table tr').length") > len(TIGHT_RULES)
        b.js("document.querySelector('p.tv-link a').click()")
        assert b.js(shown) == ["none", "block"] and b.js("location.hash") == "#tokens"
        assert b.js("document.querySelectorAll('#tokens .t').length") == 434
        b.js("document.querySelector('nav.tabs a[href=\"#main\"]').click()")
        assert b.js(shown) == ["block", "none"]
        assert b.errors == [], b.errors
    finally:
        b.close()
