"""Where the bundled sample lives: the checkout's ``sample_data/``, or the copy
an installed wheel carries as package data.

``probe`` and ``diagnose`` with no checkpoint use it, so the no-argument
commands work from ``pip install mismatchscope`` as well as from a checkout.
"""

from __future__ import annotations

from pathlib import Path

from .errors import UsageError

PACKAGE_COPY = Path(__file__).resolve().parent / "_sample_data"
"""Filled by the wheel build (setup.py copies ``sample_data/`` here)."""
CHECKOUT_COPY = Path(__file__).resolve().parents[1] / "sample_data"


def sample_dir() -> Path:
    """The folder holding ``tiny-qwen3/`` and ``prompts.jsonl``: the checkout's first."""
    for root in (CHECKOUT_COPY, PACKAGE_COPY):
        if (root / "tiny-qwen3" / "config.json").is_file():
            return root
    raise UsageError("the bundled sample model is not installed", hint="pass a CHECKPOINT folder")
