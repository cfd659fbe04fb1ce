"""Results are typed: a function returns ``dict[str, Any]`` (or a bare ``dict``) only at the JSON edge.

The edge is declared where it is, with :func:`mismatchscope.documents.json_edge`; the functions listed in
``PENDING`` still return untyped dicts and are to be typed. The list may only shrink: an entry that no longer
offends fails too, so it is removed when its function is typed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mismatchscope

PACKAGE = Path(mismatchscope.__file__).parent

PENDING: frozenset[str] = frozenset()


def _untyped(returns: ast.expr | None) -> bool:
    """A return annotation that says "some dict": ``dict`` (either ``| None``), or ``dict[str, Any]`` anywhere in
    it (``tuple[str, dict[str, Any]]``, ``Iterator[dict[str, Any]]``)."""
    if returns is None:
        return False
    text = ast.unparse(returns).replace(" ", "").strip("'\"")
    parts = set(text.split("|")) - {"None"}
    return parts == {"dict"} or "dict[str,Any]" in text or "Dict[str,Any]" in text


def _is_edge(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d).split(".")[-1] == "json_edge" for d in fn.decorator_list)


def _offenders() -> set[str]:
    found: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(PACKAGE).as_posix()
        for scope, fn in _functions(tree):
            if _untyped(fn.returns) and not _is_edge(fn):
                found.add(f"{rel}:{scope}{fn.name}")
    return found


def _functions(tree: ast.AST, scope: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield scope, node
            yield from _functions(node, f"{scope}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{scope}{node.name}.")


def test_annotation_reading():
    # what counts as untyped, on annotations written both ways
    assert _untyped(ast.parse("dict[str, Any]", mode="eval").body)
    assert _untyped(ast.parse("dict[str, Any] | None", mode="eval").body)
    assert _untyped(ast.parse("dict", mode="eval").body)
    assert _untyped(ast.parse("tuple[str, dict[str, Any] | None]", mode="eval").body)
    assert _untyped(ast.parse("Iterator[dict[str, Any]]", mode="eval").body)
    assert not _untyped(ast.parse("dict[str, float]", mode="eval").body)
    assert not _untyped(ast.parse("tuple[dict[str, int], int]", mode="eval").body)
    assert not _untyped(ast.parse("None", mode="eval").body)


def test_no_untyped_result_outside_the_json_edge():
    new = sorted(_offenders() - PENDING)
    assert not new, "return a typed result, or mark the JSON edge with @json_edge:\n" + "\n".join(new)


def test_pending_only_shrinks():
    stale = sorted(PENDING - _offenders())
    assert not stale, "typed now: remove from PENDING:\n" + "\n".join(stale)
