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
``"-inf"`` (:func:`jsonable`), NaN as ``null``. Field docstrings are not
available at run time, so a field's description comes from its metadata and,
for a field named after a metric, from the metric catalog (its meaning first).
"""

from __future__ import annotations

import dataclasses
import numbers
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from .metrics import CATALOG

SCHEMA_VERSION = 1
"""the version of every command's JSON document; raised when a field is renamed, removed or retyped."""

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_F = TypeVar("_F", bound=Callable[..., Any])


def json_edge(fn: _F) -> _F:
    """Marks a function whose result is JSON data by design: it writes or reads a JSON file, a process's
    message or a schema, or it is a mapping a foreign API takes or gives as one (pyarrow's or vLLM's keyword
    arguments, a stack's dumped batch by field name). Everything else returns a typed result; ``tests/project/test_typed_returns.py``
    fails on a ``dict`` return without this mark, so an untyped result is a choice made where it is seen."""
    return fn


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
            if f.metadata.get("flatten"):
                out.update(to_json(value))
            elif f.metadata.get("json", True) and not _absent(obj, f):
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


@json_edge
def document(obj: Any) -> dict[str, Any]:
    """A command's JSON document: ``schema_version`` first, then the result's fields."""
    return {"schema_version": SCHEMA_VERSION, **to_json(obj)}


def jsonable(x: Any) -> Any:
    """``x`` with NaN as null, infinities as ``"inf"``/``"-inf"`` and numpy scalars as Python numbers:
    what every JSON a command writes (stdout, ``diagnose.json``) holds, so ``allow_nan=False`` never trips."""
    import math

    if isinstance(x, float):
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return jsonable(x.item())
    return x


def json_text(obj: Any) -> str:
    """A typed result as the JSON text every command writes: its :func:`document`, strict (no NaN), indented."""
    import json

    return json.dumps(jsonable(document(obj)), indent=2, allow_nan=False) + "\n"


@json_edge
def optional(doc: str, with_field: str | None = None) -> dict[str, Any]:
    """Field metadata: the field is left out of the JSON while it is None (and not required by its schema).

    ``with_field``: left out while that field is None instead, so a value that may be null itself (a rate
    over nothing) appears exactly when the section it belongs to does.
    """
    return {"optional": True, "doc": doc, "with": with_field}


@json_edge
def flatten(doc: str | None = None) -> dict[str, Any]:
    """Field metadata: the field's entries are written into the object holding it, not under its name.

    For a record whose keys are partly fixed and partly data (a timeline row: its step, then one entry per
    series) or that extends another type's fields after its own; the schema lists the fixed keys and, for a
    mapping, types every other key by the mapping's values.
    """
    return {"flatten": True, "doc": doc}


_FLOAT = {"anyOf": [{"type": "number"}, {"enum": ["inf", "-inf"]}]}


@json_edge
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


@json_edge
def _object(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    extra: dict[str, Any] | bool = False
    for f in dataclasses.fields(cls):
        if not f.metadata.get("json", True):
            continue
        if f.metadata.get("flatten"):
            extra = _flattened(hints[f.name], props, required, defs)
            continue
        s = dict(_schema(hints[f.name], defs))
        enum = f.metadata.get("enum")  # "module:function": a registry holds the values, read when the schema is made
        if isinstance(enum, str):
            import importlib

            module, _, name = enum.partition(":")
            s["enum"] = list(getattr(importlib.import_module(module), name)())
        meaning = CATALOG[f.name].meaning if f.name in CATALOG else None
        doc = "; ".join(d for d in (meaning, f.metadata.get("doc")) if d)
        if doc:
            s["description"] = doc
        props[f.name] = s
        if not f.metadata.get("optional"):
            required.append(f.name)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": extra}


@json_edge
def _flattened(tp: Any, props: dict[str, Any], required: list[str], defs: dict[str, Any]) -> dict[str, Any] | bool:
    """A flattened field's share of its holder's schema: a dataclass adds its keys, a mapping types the others."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        inner = _object(tp, defs)
        props.update(inner["properties"])
        required += inner["required"]
        return False
    return _schema(typing.get_args(tp)[1], defs)


@json_edge
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


def from_json(tp: Any, data: Any) -> Any:
    """The typed value of plain data that ``to_json`` of it gives back exactly, keys in the same order.

    For a result assembled as plain data (diagnose's sections, a timeline's flags): the typed document
    is built from it, and a key its type does not declare, a missing one, a value of another type or a
    different order is a ``TypeError`` rather than a document that silently differs from the data.
    A union takes its first member that gives the data back.
    """
    out = _from_json(tp, data)
    where = _first_difference(to_json(out), data)
    if where is not None:
        raise TypeError(f"{_name(tp)}: the data differs from what its type writes at {where or 'the top'}")
    return out


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The path of the first place two plain values differ (a key, its order, a value), None where they do not."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{path or '/'} (keys {list(a)} against {list(b)})"
        return next((d for k in a if (d := _first_difference(a[k], b[k], f"{path}/{k}")) is not None), None)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return next(
            (d for i, (x, y) in enumerate(zip(a, b, strict=True)) if (d := _first_difference(x, y, f"{path}/{i}"))),
            None,
        )
    return None if _dumps(a) == _dumps(b) else path


def _from_json(tp: Any, data: Any) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return data
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _from_object(tp, data)
    if origin is typing.Literal:
        _expect(data in args, tp, data)
        return data
    if origin in (typing.Union, types.UnionType):
        return _from_union(args, data)
    if origin in (list, tuple) or tp in (list, tuple):
        _expect(isinstance(data, (list, tuple)), tp, data)
        item = args[0] if args else Any
        return [_from_json(item, x) for x in data]
    if origin is dict or tp is dict:
        _expect(isinstance(data, dict), tp, data)
        value = args[1] if args else Any
        return {k: _from_json(value, v) for k, v in data.items()}
    _expect(_is_scalar(tp, data), tp, data)
    return data


def _is_scalar(tp: Any, data: Any) -> bool:
    """Whether ``data`` is a value of ``tp``; numpy's scalars count (:func:`jsonable` writes them as numbers)."""
    if tp is type(None):
        return data is None
    if tp is float:
        return (isinstance(data, numbers.Real) and not _is_bool(data)) or data in ("inf", "-inf")
    if tp is int:
        return isinstance(data, numbers.Integral) and not _is_bool(data)
    if tp is bool:
        return _is_bool(data)
    if tp is str:
        return isinstance(data, str)
    raise TypeError(f"no rule to read a {tp!r} from JSON")  # pragma: no cover - a new field type needs a rule


def _is_bool(data: Any) -> bool:
    import numpy as np  # here, so the command-line options that mark their JSON edge import no numpy

    return isinstance(data, (bool, np.bool_))


def _from_union(options: tuple, data: Any) -> Any:
    for option in options:
        try:
            value = _from_json(option, data)
        except TypeError:
            continue
        if _dumps(to_json(value)) == _dumps(data):
            return value
    raise TypeError(f"none of {', '.join(_name(o) for o in options)} reads {_dumps(data)[:200]}")


def _from_object(cls: type, data: Any) -> Any:
    _expect(isinstance(data, dict), cls, data)
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.metadata.get("json", True) or f.metadata.get("flatten")]
    named = {f.name for f in fields if not f.metadata.get("flatten")}
    kwargs: dict[str, Any] = {}
    for f in fields:
        if f.metadata.get("flatten"):
            tp = hints[f.name]
            own = {f2.name for f2 in dataclasses.fields(tp)} if dataclasses.is_dataclass(tp) else None
            rest = {k: v for k, v in data.items() if k not in named and (own is None or k in own)}
            kwargs[f.name] = _from_json(tp, rest)
            named |= set(rest)
        elif f.name in data:
            kwargs[f.name] = _from_json(hints[f.name], data[f.name])
        elif not f.metadata.get("optional"):
            raise TypeError(f"{cls.__name__}: no {f.name!r} in {sorted(data)}")
    unknown = set(data) - named
    if unknown:
        raise TypeError(f"{cls.__name__} declares no {', '.join(sorted(unknown))}")
    return cls(**kwargs)


def _expect(ok: bool, tp: Any, data: Any) -> None:
    if not ok:
        raise TypeError(f"{_name(tp)} cannot hold {_dumps(data)[:200]}")


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", repr(tp))


def _dumps(x: Any) -> str:
    import json

    return json.dumps(x, default=repr)
