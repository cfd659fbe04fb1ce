"""Checks of what a file holds that several layers share, written once.

A JSON file that must hold an object is read by run directories (the
manifest, rank records), by ``--routes-config`` and by a checkpoint's
configs; each says in its own words what it does with a file that is not
one, but the test of what is one lives here.
"""

from __future__ import annotations

import json
from typing import Any

from .documents import json_edge
from .errors import NotAJsonObjectError


@json_edge
def json_object(text: str | bytes) -> dict[str, Any]:
    """The JSON object ``text`` holds.

    Raises what ``json.loads`` raises for text that is not JSON
    (``json.JSONDecodeError``, ``UnicodeDecodeError``, ``RecursionError``) and
    :class:`~mismatchscope.errors.NotAJsonObjectError` for JSON that is not an
    object (a list, a string, a number, null).
    """
    value = json.loads(text)
    if not isinstance(value, dict):
        raise NotAJsonObjectError(value)
    return value
