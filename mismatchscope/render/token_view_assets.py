"""The token view's style and script, inlined into every page that shows it (``render/token_view_html.py``).

The script reads the page's data (``#tv-data``), fills the details box when
a token is hovered or focused, moves the focus on the keys the legend names,
and hides a rule's marks when its box is unticked. It fetches nothing.
"""

from __future__ import annotations

from collections.abc import Sequence


def rule_styles(keys: Sequence[str], palette: Sequence[str], lines: Sequence[str]) -> str:
    """One colour and line style per rule key, and the rule that hides its marks."""
    out = []
    for i, key in enumerate(keys):
        colour, line = palette[i % len(palette)], lines[(i // len(palette)) % len(lines)]
        out.append(f".tokview .k.{key}{{border-bottom-color:{colour};border-bottom-style:{line}}}")
        out.append(f".tokview.hide-{key} .t .k.{key},.tokview.hide-{key} .tv-badge.{key}{{display:none}}")
    return "".join(out)


STYLE = """
.tokview { --tv-mono: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace; }
.tokview .tv-legend { border: 1px solid #ddd; border-radius: 6px; padding: 0.4rem 0.7rem; margin: 0.6rem 0 1rem; }
.tokview .tv-scale { margin: 0.2rem 0; line-height: 2; }
.tokview .tv-sw { display: inline-block; padding: 0 0.35rem; margin: 0 0.15rem; border-radius: 3px;
                  font-family: var(--tv-mono); font-size: 0.8rem; white-space: nowrap; }
.tokview fieldset.tv-rules { border: none; padding: 0; margin: 0.3rem 0; display: flex; flex-wrap: wrap; gap: 0.2rem 0.9rem; }
.tokview fieldset.tv-rules legend { padding: 0; font-size: 0.9rem; color: #333; }
.tokview .tv-rule { white-space: nowrap; font-size: 0.9rem; }
.tokview .tv-count { color: #555; font-size: 0.8rem; }
.tokview .tv-swatch { display: inline-block; width: 1.6rem; height: 0; margin: 0 0.3rem 0.25rem 0.2rem;
                      border-bottom-width: 3px; vertical-align: middle; }
.tokview .tv-keys { font-size: 0.85rem; color: #444; margin: 0.3rem 0 0; }
.tokview kbd { border: 1px solid #bbb; border-radius: 3px; padding: 0 0.25rem; font-size: 0.8rem; background: #fafafa; }
.tokview .tv-seq { border-top: 1px solid #e3e3e3; padding: 0.3rem 0 0.6rem; }
.tokview .tv-seq h3 { font-size: 1rem; margin: 0.4rem 0; display: flex; flex-wrap: wrap; gap: 0.2rem 0.8rem; align-items: baseline; }
.tokview .tv-seq h3 a { color: inherit; text-decoration: none; }
.tokview .tv-meta { color: #555; font-weight: normal; font-size: 0.85rem; }
.tokview .tv-badge { font-weight: 600; font-size: 0.85rem; border: 1px solid #ccc; border-radius: 4px; padding: 0 0.35rem; }
.tokview .tv-cut { color: #7a5d00; font-size: 0.85rem; margin: 0.2rem 0; }
.tokview .tv-text { font-family: var(--tv-mono); font-size: 0.92rem; line-height: 1.75; overflow-wrap: anywhere; }
.tokview .t { display: inline-block; white-space: pre; vertical-align: top; border-radius: 2px; cursor: default;
              min-width: 0.35em; }
.tokview .tv-ids .t { padding: 0 0.2rem; }
.tokview .t:focus { outline: 2px solid #111; outline-offset: 1px; }
.tokview .t .k { display: block; height: 0; margin-top: 1px; border-bottom-width: 2px; }
.tokview .tv-empty { color: #aaa; }
.tokview .tv-turn, .tokview .tv-tool { display: inline-block; font-family: -apple-system, "Segoe UI", Roboto, Arial,
              sans-serif; font-size: 0.75rem; border-radius: 3px; padding: 0 0.3rem; margin: 0 0.3rem; vertical-align: top; }
.tokview .tv-turn { background: #eef; color: #224; }
.tokview .tv-tool { background: #eee; color: #444; font-style: italic; display: block; margin: 0.3rem 0; width: fit-content; }
.tokview .g0 { background: #fff; }
.tokview .gp1 { background: #e3eef9; } .tokview .gp2 { background: #b9d3ec; } .tokview .gp3 { background: #74a9d8; }
.tokview .gp4 { background: #2f73b8; color: #fff; } .tokview .gp5 { background: #08306b; color: #fff; }
.tokview .gn1 { background: #fde7dd; } .tokview .gn2 { background: #f8b9a0; } .tokview .gn3 { background: #ee7559; }
.tokview .gn4 { background: #c32a22; color: #fff; } .tokview .gn5 { background: #67000d; color: #fff; }
.tokview .tv-tip { position: fixed; z-index: 10; background: #fff; border: 1px solid #888; border-radius: 6px;
                   box-shadow: 0 3px 12px rgba(0,0,0,0.2); padding: 0.4rem 0.6rem; font-size: 0.82rem;
                   width: min(34rem, calc(100vw - 1rem)); overflow: auto; box-sizing: border-box; }
.tokview .tv-tip table { border-collapse: collapse; margin: 0.2rem 0; font-size: 0.8rem; }
.tokview .tv-tip td, .tokview .tv-tip th { border: none; border-bottom: 1px solid #eee; padding: 0.05rem 0.4rem;
                   text-align: left; white-space: nowrap; }
.tokview .tv-tip td.n { text-align: right; font-variant-numeric: tabular-nums; font-family: var(--tv-mono); }
.tokview .tv-tip .tv-decisions { display: flex; flex-wrap: wrap; gap: 0.1rem 0.7rem; margin: 0.2rem 0; }
.tokview .tv-tip .acted { font-weight: 700; }
.tokview .tv-tip h4 { margin: 0.3rem 0 0.1rem; font-size: 0.82rem; }
.tokview .tv-tip .tv-topk { display: flex; flex-wrap: wrap; gap: 0 1.2rem; }
.tokview .tv-tip th { background: none; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var root = document.getElementById("tv-root");
  var data = JSON.parse(document.getElementById("tv-data").textContent);
  var tip = document.getElementById("tv-tip");
  var hidden = {};
  var current = null;

  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  }
  function num(x, digits) {
    if (typeof x === "string" || x === null || x === undefined) { return x === null || x === undefined ? "-" : x; }
    if (digits === undefined) { return String(x); }
    if (x !== 0 && (Math.abs(x) < 1e-3 || Math.abs(x) >= 1e5)) { return x.toExponential(digits - 1); }
    return String(Number(x.toPrecision(digits)));
  }
  function value(x) { return typeof x === "string" ? Number(x.replace("inf", "Infinity")) : x; }
  function word(id) {
    var t = data.vocabulary[String(id)];
    return t === undefined ? "id " + id : JSON.stringify(t);
  }
  function row(label, field, x, digits, extra) {
    return "<tr><th>" + label + '</th><td class="n" data-field="' + field + '">' + esc(num(x, digits)) +
      "</td><td>" + (extra || "") + "</td></tr>";
  }
  function decisions(s, i) {
    var out = [];
    data.rules.forEach(function (r) {
      var act = "keep", extra = "";
      if (r.level === "sequence") {
        var d = s.sequence_rules[r.key];
        act = d.action;
        if (d.weight !== null && d.weight !== undefined) { extra = " w " + num(d.weight, 6); }
        extra += " (sequence)";
      } else {
        var k = s.acted[r.key].indexOf(i);
        if (k >= 0) {
          act = r.action;
          if (s.weights[r.key]) { extra = " w " + num(s.weights[r.key][k], 6); }
        }
      }
      var stat = r.statistics.length && r.level === "token" ? s.statistics[r.statistics[0]] : null;
      if (stat) { extra = " " + r.statistics[0] + " " + num(stat[i], 6) + extra; }
      out.push('<span class="' + (act === "keep" ? "" : "acted") + '" data-rule="' + r.key + '" data-decision="' +
        act + '"><span class="tv-swatch k ' + r.key + '"></span>' + esc(r.name) + ": " + act + esc(extra) + "</span>");
    });
    return '<div class="tv-decisions">' + out.join("") + "</div>";
  }
  function topk(s, i) {
    if (!s.topk || !s.topk.sampler_ids[i] || !s.topk.sampler_ids[i].length) { return ""; }
    var k = s.topk, out = '<div class="tv-topk"><div><h4>Sampler\'s top-' + k.sampler_ids[i].length +
      '</h4><table data-field="sampler-topk">' +
      "<tr><th>token</th><th>q</th><th>p (trainer)</th></tr>";
    k.sampler_ids[i].forEach(function (id, j) {
      var at = k.trainer_logprobs_at_sampler ? Math.exp(value(k.trainer_logprobs_at_sampler[i][j])) : null;
      out += "<tr><td>" + esc(word(id)) + '</td><td class="n">' + num(Math.exp(value(k.sampler_logprobs[i][j])), 4) +
        '</td><td class="n">' + (at === null ? "-" : num(at, 4)) + "</td></tr>";
    });
    out += "</table></div>";
    if (k.trainer_ids && k.trainer_ids[i] && k.trainer_ids[i].length) {
      out += "<div><h4>Trainer's top-" + k.trainer_ids[i].length + '</h4><table data-field="trainer-topk">' +
        "<tr><th>token</th><th>p</th></tr>";
      k.trainer_ids[i].forEach(function (id, j) {
        out += "<tr><td>" + esc(word(id)) + '</td><td class="n">' + num(Math.exp(value(k.trainer_logprobs[i][j])), 4) +
          "</td></tr>";
      });
      out += "</table></div>";
    }
    return out + "</div>";
  }
  function details(el) {
    var s = data.sequences[Number(el.dataset.s)], i = Number(el.dataset.i);
    var lq = s.sampler_logprob[i], lp = s.trainer_logprob[i], l = s.log_ratio[i];
    var text = s.text ? JSON.stringify(s.text[i]) : "";
    var head = "<b>sequence " + s.sequence_id + ", position " + s.position[i] + "</b>" +
      (s.turn ? ", turn " + s.turn[i] : "") + ": " + esc(text) + ' <span data-field="token-id">id ' +
      s.token_id[i] + "</span>";
    return head + "<table>" +
      row("log q (sampler)", "sampler-logprob", lq, undefined, "q = " + num(Math.exp(lq), 6)) +
      row("log p (trainer)", "trainer-logprob", lp, undefined, "p = " + num(Math.exp(lp), 6)) +
      row("l = log p &minus; log q", "log-ratio", l, undefined, "") +
      row("ratio r = p/q", "ratio", Math.exp(value(l)), 7, "") +
      "</table>" + decisions(s, i) + topk(s, i);
  }
  function place(el) {
    // below the token, or above it where there is more room; never over it (the pointer stays on the token)
    var r = el.getBoundingClientRect(), vw = document.documentElement.clientWidth;
    var vh = document.documentElement.clientHeight;
    var below = vh - r.bottom - 10, above = r.top - 10;
    tip.style.maxHeight = "";
    var h = tip.offsetHeight, down = h <= below || below >= above;
    if (h > (down ? below : above)) { tip.style.maxHeight = Math.max(80, down ? below : above) + "px"; h = tip.offsetHeight; }
    var w = tip.offsetWidth;
    tip.style.left = Math.max(4, Math.min(r.left, vw - w - 4)) + "px";
    tip.style.top = (down ? r.bottom + 6 : Math.max(4, r.top - h - 6)) + "px";
  }
  function show(el) {
    current = el;
    tip.innerHTML = details(el);
    tip.dataset.s = el.dataset.s;
    tip.dataset.i = el.dataset.i;
    tip.hidden = false;
    place(el);
  }
  function hide() { tip.hidden = true; current = null; }
  function token(e) { return e.target && e.target.closest ? e.target.closest(".t") : null; }

  root.addEventListener("mouseover", function (e) { var t = token(e); if (t) { show(t); } });
  root.addEventListener("mouseout", function (e) {
    var t = token(e), to = e.relatedTarget;
    if (t && t !== document.activeElement && !t.contains(to) && !tip.contains(to)) { hide(); }
  });
  tip.addEventListener("mouseleave", function (e) {
    if (current && current !== document.activeElement && !current.contains(e.relatedTarget)) { hide(); }
  });
  root.addEventListener("focusin", function (e) { var t = token(e); if (t) { show(t); } });
  root.addEventListener("focusout", function (e) { if (token(e)) { hide(); } });

  function visible(el) {
    return el.dataset.m.split(" ").some(function (k) { return !hidden[k]; });
  }
  function step(list, dir) {
    if (!list.length) { return; }
    var all = Array.prototype.slice.call(root.querySelectorAll(".t"));
    var at = document.activeElement && document.activeElement.classList.contains("t") ?
      all.indexOf(document.activeElement) : (dir > 0 ? -1 : all.length);
    var pick = null;
    for (var n = 0; n < list.length; n++) {
      var p = all.indexOf(list[dir > 0 ? n : list.length - 1 - n]);
      if ((dir > 0 && p > at) || (dir < 0 && p < at)) { pick = all[p]; break; }
    }
    if (pick) { pick.focus(); pick.scrollIntoView({ block: "nearest" }); }
  }
  function marked() {
    return Array.prototype.filter.call(root.querySelectorAll(".t.x"), visible);
  }
  function neighbour(dir) {
    var all = Array.prototype.slice.call(root.querySelectorAll(".t"));
    var at = all.indexOf(document.activeElement);
    var next = all[at < 0 ? 0 : Math.max(0, Math.min(all.length - 1, at + dir))];
    if (next) { next.focus(); next.scrollIntoView({ block: "nearest" }); }
  }
  function sequence(dir) {
    var seqs = Array.prototype.slice.call(root.querySelectorAll(".tv-seq"));
    var here = document.activeElement ? document.activeElement.closest(".tv-seq") : null;
    var at = seqs.indexOf(here);
    var next = seqs[at < 0 ? (dir > 0 ? 0 : seqs.length - 1) : at + dir];
    var first = next ? next.querySelector(".t") : null;
    if (first) { first.focus(); first.scrollIntoView({ block: "nearest" }); }
  }
  document.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey) { return; }
    var tag = e.target && e.target.tagName;
    if (tag === "INPUT" && e.key !== "Escape" || tag === "TEXTAREA" || tag === "SELECT") { return; }
    var key = e.key;
    if (key === "n" || key === "j") { step(marked(), 1); }
    else if (key === "p" || key === "k") { step(marked(), -1); }
    else if (key === "ArrowRight" && current) { neighbour(1); }
    else if (key === "ArrowLeft" && current) { neighbour(-1); }
    else if (key === "]") { sequence(1); }
    else if (key === "[") { sequence(-1); }
    else if (key === "Escape") { hide(); if (document.activeElement) { document.activeElement.blur(); } }
    else { return; }
    e.preventDefault();
  });

  function setRule(key, on) {
    hidden[key] = !on;
    root.classList.toggle("hide-" + key, !on);
  }
  root.querySelectorAll("input[data-rule]").forEach(function (box) {
    box.addEventListener("change", function () { setRule(box.dataset.rule, box.checked); });
  });
  root.querySelectorAll("button[data-all]").forEach(function (b) {
    b.addEventListener("click", function () {
      var on = b.dataset.all === "1";
      root.querySelectorAll("input[data-rule]").forEach(function (box) { box.checked = on; setRule(box.dataset.rule, on); });
    });
  });
  window.addEventListener("resize", function () { if (current) { place(current); } });
  window.addEventListener("scroll", function () { if (current) { place(current); } }, { passive: true });
})();
"""
