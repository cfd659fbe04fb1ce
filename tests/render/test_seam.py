"""The output seam (``render/seam.py``): every command's stdout goes through it, so a format registered there is
one every command prints in, and a format no one registered, or one a document has no renderer for, is a one-line
usage error, never a table.

What it pins: the commands and the document type each hands the seam; a new command that prints without the seam,
or decides a format itself, fails here.
"""

from __future__ import annotations

import ast
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.render import seam
from tests.helpers import REPO, SAMPLE_PAIRS, cli
from tests.inputs import error_line, jsonl_dump

GOLDEN = REPO / "tests" / "data" / "golden-probe"
CLI = REPO / "mismatchscope" / "cli"


@pytest.fixture
def dummy(monkeypatch):
    """A format registered for this test only: each document as its type's name."""
    fmt = seam.Format("dummy", stream=True, any_document=lambda doc: f"dummy {type(doc).__name__}\n")
    monkeypatch.setitem(seam._formats(), "dummy", fmt)
    return fmt


def _steps(tmp_path):
    """The simulated pairs as 12 training steps (16 sequences a step)."""
    t = pq.read_table(SAMPLE_PAIRS)
    path = tmp_path / "steps.parquet"
    pq.write_table(t.append_column("step", pa.array((t.column("sequence_id").to_numpy() // 16).astype("int64"))), path)
    return path


def _commands(tmp_path) -> list[tuple[list[str], str]]:
    """Each command that prints results (probe, rescore and diagnose start engines: below), and the document it
    hands the seam."""
    baseline = shutil.copytree(GOLDEN, tmp_path / "baseline")
    steps = _steps(tmp_path)
    other = shutil.copy(steps, tmp_path / "other.parquet")
    dump = jsonl_dump(tmp_path, '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1], "trainer_logprobs": [-0.4, -1]}')
    return [
        (["report", str(GOLDEN)], "ReportDocument"),
        (["compare-masks", str(GOLDEN)], "MasksDocument"),
        (["compare-masks", str(GOLDEN), "--readings", "dppo-kl"], "Readings"),
        (["gate", str(GOLDEN), "--baseline", str(baseline), "--bootstrap", "0"], "GateDocument"),
        (["certify", str(GOLDEN)], "CertifyDocument"),
        (["doctor", str(GOLDEN)], "DoctorDocument"),
        (["provenance", str(GOLDEN)], "ProvenanceDocument"),
        (["view", str(GOLDEN), "--worst", "2", "--html", str(tmp_path / "view.html")], "TokenView"),
        (["timeline", str(steps)], "TimelineDocument"),
        (["timeline", str(steps), str(other)], "TimelineComparison"),
        (["import", "jsonl", str(dump), "--out", str(tmp_path / "imported")], "ImportDocument"),
    ]


def test_a_registered_format_is_used_by_every_command(tmp_path, dummy):
    for args, doc_type in _commands(tmp_path):
        r = cli(*args, "--format", "dummy")
        assert r.returncode in (0, 1), (args, r.stderr)  # 1: certify's and doctor's verdicts on the golden run
        assert r.stdout == f"dummy {doc_type}\n", (args, r.stdout[:300])


def test_probe_and_rescore_print_through_the_seam(dummy):
    """probe's and rescore's output after their engines: the run's report and compare-masks, as one document."""
    import contextlib
    import io

    from mismatchscope.cli.probe import _parsed_rules, _show

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _show(GOLDEN, _parsed_rules(None), "dummy")
    assert out.getvalue() == "dummy ProbeDocument\n"


def test_no_command_decides_a_format():
    """Every command module that takes ``--format`` hands it to the seam (or to a helper of its own that does),
    and none compares it with a format's name: a new format needs no command changed."""
    takers = []
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text())
        params = {a.arg for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for a in _format_params(f)}
        if not params:
            continue
        takers.append(path.stem)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Compare, ast.Match)):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                assert not names & params, f"{path.name}:{node.lineno} compares the output format"
            if isinstance(node, ast.Attribute) and node.attr in ("json", "table"):
                assert not (isinstance(node.value, ast.Name) and node.value.id == "OutputFormat"), path.name
        assert "seam.show(" in path.read_text(), f"{path.name} takes --format but prints without the seam"
    assert {"analyse", "certify", "diagnose", "doctor", "gate", "importer", "probe", "provenance", "timeline"} <= set(
        takers
    ), takers


def _format_params(f: ast.FunctionDef) -> list[ast.arg]:
    """The parameters of a command function that ``--format`` fills (their type is the alias ``FormatOpt``)."""
    return [a for a in f.args.args if isinstance(a.annotation, ast.Name) and a.annotation.id == "FormatOpt"]


@pytest.mark.parametrize("command", ["report", "gate", "certify", "doctor", "timeline", "view", "provenance"])
def test_an_unknown_format_is_one_line(command):
    line = error_line(cli(command, str(GOLDEN), "--format", "yaml"))
    assert "'yaml' is not one of 'table', 'json'" in line, line


def test_a_file_format_is_not_a_stream_format():
    """Markdown, JUnit and HTML are written to the files their options name, never on stdout."""
    line = error_line(cli("report", str(GOLDEN), "--format", "markdown"))
    assert "'markdown' is not one of 'table', 'json'" in line, line


def test_a_format_a_document_has_no_renderer_for_is_one_line(monkeypatch):
    monkeypatch.setitem(seam._formats(), "bare", seam.Format("bare", stream=True))
    line = error_line(cli("report", str(GOLDEN), "--format", "bare"), after_work=True)  # after the run's warning
    assert line == "error: there is no bare output of report (use one of json, table)", line
