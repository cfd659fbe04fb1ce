"""Every command's tables read whole in an 80-column terminal, and say what the JSON says.

Each command runs twice on real data (the golden probe run, the bundled simulated pairs): once with
``COLUMNS=80`` on a pipe, as a person reads it, once with ``--format json``. The text must keep every line
within 80 columns, never cut a word (no ellipsis), and every number in a table cell must be one of the
JSON's numbers (or of the numbers its strings hold: bucket labels, check names) to the precision printed:
``0.0001884`` stands for any value within half a unit of its last digit, ``13.1%`` for 0.131 within
0.0005, ``1,731`` for 1731. A number cut to ``8.442e-`` or ``dpp`` fails the first checks; a cell that
prints another metric's value, or a rounding that moves a digit, fails the last.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import REPO, cli, cli_no_engine

GOLDEN = REPO / "tests" / "data" / "golden-probe"
SIMULATED = REPO / "sample_data" / "simulated_pairs.parquet"
WIDTH = 80

# a number as the tables print it: 1,731  -0.008835  7.857e-6  13.1%  x1.25; not inside a name (k3, e_s^2, top-5)
NUMBER = re.compile(r"(?<![\w^.])(x)?(-?\d{1,3}(?:,\d{3})+|-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)(%)?(?![\w.])")


def json_numbers(doc) -> list[float]:
    """Every number in a JSON document: values, list lengths, and the numbers written inside its strings."""
    out: list[float] = []

    def walk(x) -> None:
        if isinstance(x, bool) or x is None:
            return
        if isinstance(x, (int, float)):
            out.append(float(x))
        elif isinstance(x, str):
            out.extend(float(m.group(2).replace(",", "")) for m in NUMBER.finditer(x))
            if x in ("inf", "-inf"):
                out.append(float(x))
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, list):
            out.append(float(len(x)))
            for v in x:
                walk(v)

    walk(doc)
    return out


def printed_value(token: re.Match) -> tuple[float, float]:
    """A printed number's value and the half-unit of its last printed digit (its precision)."""
    text = token.group(2).replace(",", "")
    mantissa, _, exponent = text.partition("e")
    decimals = len(mantissa.partition(".")[2])
    half = 0.5 * 10.0 ** (-decimals + (int(exponent) if exponent else 0))
    value = float(text)
    if token.group(3):  # a percentage
        value, half = value / 100, half / 100
    return value, half


def table_cells(text: str) -> list[str]:
    """The data cells of every table in ``text`` (header rows, drawn with another bar, are labels)."""
    return [cell.strip() for line in text.splitlines() if "│" in line for cell in line.split("│")[1:-1]]


def assert_readable(text: str, doc: dict) -> None:
    lines = text.splitlines()
    assert lines, "nothing printed"
    too_wide = [line for line in lines if len(line) > WIDTH]
    assert not too_wide, too_wide[:3]
    assert "…" not in text, [line for line in lines if "…" in line][:3]
    known = json_numbers(doc)
    checked = 0
    for cell in table_cells(text):
        for token in NUMBER.finditer(cell):
            value, half = printed_value(token)
            tol = half * (1 + 1e-9) + 1e-12
            assert any(math.isclose(v, value, abs_tol=tol) for v in known if math.isfinite(v)), (cell, token[0])
            checked += 1
    assert checked > 0, "no number in any table"


def both(*args: str, cwd: Path | None = None) -> tuple[str, dict]:
    table = cli(*args, env={"COLUMNS": str(WIDTH)}, cwd=cwd)
    assert table.returncode in (0, 1), table.stderr
    data = cli(*args, "--format", "json", cwd=cwd)
    assert data.returncode in (0, 1), data.stderr
    return table.stdout, json.loads(data.stdout)


@pytest.mark.parametrize(
    "args",
    [
        ("report", str(SIMULATED), "--worst", "3"),
        ("report", str(GOLDEN)),
        ("compare-masks", str(GOLDEN)),
        ("compare-masks", str(SIMULATED), "--rule", "icepop", "--rule", "ipo", "--sweep", "icepop.beta=1.5,2,5"),
        ("compare-masks", str(SIMULATED), "--readings", "dppo-kl"),
        ("compare-masks", str(GOLDEN), "--readings", "seq-mis"),
    ],
    ids=["report-worst", "report-probe", "masks-all-rules", "masks-sweep", "readings-token", "readings-sequence"],
)
def test_analysis_tables_fit_and_agree_with_the_json(args):
    assert_readable(*both(*args))


def test_names_that_share_a_prefix_print_whole():
    text, _ = both("compare-masks", str(GOLDEN))
    for name in ("dppo-tv", "dppo-kl", "seq-tis", "seq-mis"):
        assert re.search(rf"│ {name} +│", text), name


def test_view_table_fits_and_agrees_with_the_json(tmp_path):
    assert_readable(*both("view", str(GOLDEN), "--html", str(tmp_path / "v.html"), "--worst", "4", cwd=REPO))


def test_gate_table_fits_and_agrees_with_the_json(tmp_path):
    baseline = shutil.copytree(GOLDEN, tmp_path / "baseline")
    assert_readable(*both("gate", str(GOLDEN), "--baseline", str(baseline), "--bootstrap", "200"))


def test_certify_table_fits_and_agrees_with_the_json():
    table = cli_no_engine("certify", str(GOLDEN), env={"COLUMNS": str(WIDTH)})
    data = cli_no_engine("certify", str(GOLDEN), "--format", "json")
    assert table.returncode == 1 and data.returncode == 1, table.stderr  # the fp16 sampler: not byte-equal
    assert_readable(table.stdout, json.loads(data.stdout))


def test_timeline_table_fits_and_agrees_with_the_json(tmp_path):
    """The simulated pairs as 12 training steps (16 sequences a step, by sequence id)."""
    t = pq.read_table(SIMULATED)
    steps = pa.array((t.column("sequence_id").to_numpy() // 16).astype("int64"))
    path = tmp_path / "steps.parquet"
    pq.write_table(t.append_column("step", steps), path)
    assert_readable(*both("timeline", str(path)))


def test_a_pipe_without_columns_is_80_wide(tmp_path):
    r = cli_no_engine("compare-masks", str(GOLDEN), env={"COLUMNS": ""})
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) == WIDTH  # the widest table fills, and no more


def test_moe_routing_tables_fit_and_agree_with_the_json(tmp_path):
    """report on a run with routes/ (tests/routes_fixture.py: flip rates derived by hand there)."""
    from tests.routes_fixture import write_run

    run = tmp_path / "moe"
    run.mkdir()
    write_run(run)
    text, doc = both("report", str(run))
    assert "MoE routing" in text
    assert_readable(text, doc)


def test_provenance_tables_fit_and_agree_with_the_json():
    """One run's two sides, and two runs side by side (the bundled Recorder runs against the golden probe)."""
    assert_readable(*both("provenance", str(GOLDEN)))
    assert_readable(*both("provenance", str(REPO / "sample_data" / "runs" / "rl-default"), str(GOLDEN)))
