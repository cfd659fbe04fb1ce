"""Typed results as JSON documents, and the JSON Schema of each.

The commands' ``--format json`` output is the serialisation of a typed
result (a dataclass): :func:`to_json` turns it into plain data in field
order, :func:`json_schema` derives the JSON Schema from the same type hints,
so the schema in ``docs/schemas/`` cannot drift from what the command writes
(``docs/generate_schemas.py`` writes them, a test compares). Every document
starts with ``schema_version``; a change that renames or retypes a field
raises it.

Conventions the schemas encode: a float may be ``null`` only where its type
says ``| None``; infinities are written as the strings ``"inf"`` and
``"-inf"`` (``outputs.jsonable``), NaN as ``null``. Field docstrings are not
available at run time, so a field's description comes from its metadata and,
for a field named after a metric, from the metric catalog (its meaning first).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from .metrics import CATALOG

SCHEMA_VERSION = 1
"""the version of every command's JSON document; raised when a field is renamed, removed or retyped."""

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def to_json(obj: Any) -> Any:
    """Plain data (dicts, lists, numbers, strings) from a typed result: dataclasses in field order.

    A field with ``metadata={"json": False}`` is left out (a handle the library keeps, not data); one
    with :func:`optional` metadata only when it holds a value (an entry a run or an option adds), or,
    given ``with_field``, when that field does.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.metadata.get("json", True) and not _absent(obj, f):
                out[f.name] = to_json(value)
        return out
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    return obj


def _absent(obj: Any, f: dataclasses.Field) -> bool:
    """An optional field left out: it, or the field it appears with, is None."""
    return bool(f.metadata.get("optional")) and getattr(obj, f.metadata.get("with") or f.name) is None


def document(obj: Any) -> dict[str, Any]:
    """A command's JSON document: ``schema_version`` first, then the result's fields."""
    return {"schema_version": SCHEMA_VERSION, **to_json(obj)}


def optional(doc: str, with_field: str | None = None) -> dict[str, Any]:
    """Field metadata: the field is left out of the JSON while it is None (and not required by its schema).

    ``with_field``: left out while that field is None instead, so a value that may be null itself (a rate
    over nothing) appears exactly when the section it belongs to does.
    """
    return {"optional": True, "doc": doc, "with": with_field}


_FLOAT = {"anyOf": [{"type": "number"}, {"enum": ["inf", "-inf"]}]}


def json_schema(cls: type, title: str, description: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``document(x)`` for an instance ``x`` of the dataclass ``cls``."""
    defs: dict[str, Any] = {}
    root = _object(cls, defs)
    root["properties"] = {
        "schema_version": {"const": SCHEMA_VERSION, "description": "the version of this document's layout"},
        **root["properties"],
    }
    root["required"] = ["schema_version", *root["required"]]
    out = {"$schema": SCHEMA_DIALECT, "title": title, "description": description, **root}
    if defs:
        out["$defs"] = dict(sorted(defs.items()))
    return out


def _object(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        if not f.metadata.get("json", True):
            continue
        s = dict(_schema(hints[f.name], defs))
        meaning = CATALOG[f.name].meaning if f.name in CATALOG else None
        doc = "; ".join(d for d in (meaning, f.metadata.get("doc")) if d)
        if doc:
            s["description"] = doc
        props[f.name] = s
        if not f.metadata.get("optional"):
            required.append(f.name)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return _FLOAT
    if tp is str:
        return {"type": "string"}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # a placeholder first: a type that refers to itself stops here
            defs[name] = _object(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [_schema(a, defs) for a in args]
        return {"anyOf": options}
    if origin in (list, tuple) or tp in (list, tuple):
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(set(args)) == 1:
                n = len(args)
                return {"type": "array", "items": _schema(args[0], defs), "minItems": n, "maxItems": n}
            return {"type": "array", "prefixItems": [_schema(a, defs) for a in args], "items": False}
        return {"type": "array", **({"items": _schema(args[0], defs)} if args else {})}
    if origin is dict or tp is dict:
        return {"type": "object", **({"additionalProperties": _schema(args[1], defs)} if args else {})}
    raise TypeError(f"no JSON Schema for the type {tp!r}")  # pragma: no cover - a new field type needs a rule above
