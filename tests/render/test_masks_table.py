"""compare-masks' terminal tables: the columns that read together stay together, and every column is explained."""

from __future__ import annotations

import pytest

from tests.helpers import SAMPLE_PAIRS, cli


@pytest.mark.parametrize("width", [80, 85, 100])
def test_the_tail_table_keeps_p_above_q_beside_p_below_q(width):
    """At 85 columns the table of which tail each rule cuts once put p>q at the end of one part and p<q alone in
    the continued one: the two signs of one split are one pair."""
    out = cli("compare-masks", str(SAMPLE_PAIRS), env={"COLUMNS": str(width)}).stdout
    tails = out[out.index("Which tail each rule cuts: rejected") : out.index("Which tail each rule cuts: icepop")]
    parts = tails.split("(continued)")
    assert [i for i, p in enumerate(parts) if "p>q" in p] == [i for i, p in enumerate(parts) if "p<q" in p]
    assert max(len(line) for line in out.splitlines()) <= width


def test_the_hypothesis_column_is_explained():
    """The rules table's ``hyp.`` column was never explained."""
    out = " ".join(cli("compare-masks", str(SAMPLE_PAIRS)).stdout.split())
    assert (
        "hyp.: the advantages a rule's count assumes: data, the run's own (or none needed); A>0 or A<0, every advantage of that sign "
        "(the run records none); mean, the mean of the two" in out
    )


def test_probe_ends_with_a_summary_of_its_headline(capsys):
    """probe printed 213 lines with the headline four screens up and nothing at the end: its last lines are now
    the summary (numbers of the golden probe, as report gives them)."""
    from mismatchscope.cli.probe import _show
    from mismatchscope.rules import default_rules
    from tests.helpers import REPO

    run = REPO / "tests" / "data" / "golden-probe"
    _show(run, default_rules(), "table")
    out = " ".join(capsys.readouterr().out.split())
    text = out[out.rindex("Summary (") :]
    assert "Summary (sampler vllm/float16 vs trainer float32, 434 tokens in 8 sequences):" in text, text
    assert "mean |log p - log q| 5.074e-4 (max 0.009589), tv_token mean 1.884e-4, k3 mean 8.315e-7" in text, text
    assert text.endswith(f"run directory: {run} (mismatchscope report {run}; compare-masks {run})"), text


def test_an_imports_stderr_reads_at_80_columns(tmp_path):
    """A verl import once wrote a 175-character warning (the rescore command, again on stdout's next: line) and
    progress lines naming each file by its whole path: each line is now within 80 columns."""
    from tests.helpers import REPO

    src = REPO / "tests" / "data" / "stack_dumps" / "verl" / "exp_proj"
    r = cli("import", "verl", str(src), "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == "[1/1] GBS2_N2_in8_out7/4/gen_batch.dp"
    assert all(len(line) <= 80 for line in lines), lines
    assert f"next: mismatchscope rescore {tmp_path / 'o'} --trainer-checkpoint CHECKPOINT" in " ".join(r.stdout.split())
