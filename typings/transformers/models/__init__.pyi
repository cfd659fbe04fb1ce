"""Opaque stub: see typings/README.md."""

from typing import Any

def __getattr__(name: str) -> Any: ...
