"""The metric catalog (``mismatchscope/metrics.py``) is the one place a metric is named.

* No module of the package spells a catalog name as a string literal: code refers to ``K3_MEAN.name``, so
  renaming or retiring a metric is one edit and a search finds every use. (Docstrings and comments are prose,
  not keys, and the help texts' examples are prose too: only a literal whose whole value is a name counts.)
* There is one ``Metric`` class.
* The typed report's fields named after metrics are catalog metrics, and every catalog metric is read
  somewhere: a field of the report, a column of compare-masks, a series of the timeline.
"""

from __future__ import annotations

import ast
import dataclasses

from mismatchscope.analysis.results import KeptMass, ScoreCentering, SequenceMetrics, TokenMetrics, TopK
from mismatchscope.metrics import CATALOG, RATIO_BAND, RULE_STATS, Metric
from tests.helpers import REPO

PACKAGE = REPO / "mismatchscope"


def _literals(path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_module_spells_a_metric_name():
    found = [
        f"{path.relative_to(REPO)}:{line}: {value!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "metrics.py"
        for line, value in _literals(path)
        if value in CATALOG
    ]
    assert not found, "use the catalog's constant (e.g. K3_MEAN.name):\n" + "\n".join(found)


def test_the_scan_sees_a_literal(tmp_path):
    """The scan above can fail: a module that spells a name is caught, its docstring is not."""
    path = tmp_path / "module.py"
    path.write_text('"""k3_mean in prose."""\nx = {"k3_mean": 1, "y": f"{d[\'ess\']}"}\n')
    assert sorted(v for _, v in _literals(path) if v in CATALOG) == ["ess", "k3_mean"]


def test_one_metric_class():
    classes = [
        f"{path.relative_to(REPO)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "Metric"
    ]
    assert classes == ["mismatchscope/metrics.py"]


def test_report_fields_named_after_metrics_are_catalog_metrics():
    fields = {f.name for cls in (TokenMetrics, TopK, KeptMass) for f in dataclasses.fields(cls)} - {"tokens"}
    fields |= {f.name for cls in (SequenceMetrics, ScoreCentering) for f in dataclasses.fields(cls)} - {
        "tokens",
        "chi2_seq_clip",
        "length",
    }
    assert fields - set(CATALOG) == set()


def test_every_declaration_is_complete():
    for m in CATALOG.values():
        assert isinstance(m, Metric)
        assert m.name.isidentifier() and m.meaning and m.formula and m.unit and m.computed_in, m
        assert (PACKAGE / m.computed_in.split()[0]).exists(), m.computed_in
        assert m.worse in ("higher", "lower", None)
        assert m.lower < m.upper
    # a share's scale is asin-sqrt, the rest log: what the timeline's change tests run on
    assert CATALOG["ratio_outside_band"].scale == "asin-sqrt" and CATALOG["k3_mean"].scale == "log"
    assert CATALOG["ratio_outside_band"].meaning.endswith(f"[{RATIO_BAND[0]:g}, {RATIO_BAND[1]:g}]")
    assert [m.name for m in RULE_STATS] == [
        "token_reject_rate",
        "token_reweight_rate",
        "sequence_reject_rate",
        "sequences_with_rejection_rate",
    ]
