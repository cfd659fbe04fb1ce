"""What an engine's own log says it ran: the fallbacks it announced, and the kernels it named.

An engine that cannot run what it was asked for usually says so in one
warning line ("Failed to create oneDNN linear, fallback to torch linear",
"Model Runner V2 requires Triton; using the V1 model runner instead",
"Cannot use FLASH_ATTN backend on CPU"). Those lines are the only record of
a fallback, so each is kept, once, with its process and time stamp stripped.
A vLLM line (its record header or its process prefix) belongs to the sampler;
any other (transformers, torch) to the side that runs them in this process.
"""

from __future__ import annotations

import re

from ..redact import redact

_PREFIX = re.compile(r"^\((?:[\w.-]+) pid=\d+\)\s*")
"""vLLM's process prefix: ``(EngineCore pid=12) ``."""
_RECORD = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\]\s*")
"""vLLM's record header: ``WARNING 12-04 14:59:44 [utils.py:597] ``."""
FALLBACK = re.compile(
    r"(?i)\bfall(?:s|ing)?[ -]?back\b|\bfallback\b|\busing\b[^.;]*\binstead\b|\bcannot use\b[^.;]*\bbackend\b"
    r"|\bnot supported\b[^.;]*\busing\b"
)
"""a line that says the engine runs something other than what it was asked or meant to run."""
_ADVICE = re.compile(r"(?i)\bdeprecat")
"""deprecation notices ("please use X instead") name no fallback."""
_ATTENTION = re.compile(r"\bUsing (\w+) (?:attention )?backend\b")
_MOE = re.compile(r"\bUsing (\w+) MoE backend\b")
MAX_LINE = 300


def _message(line: str) -> tuple[str, bool]:
    """(the line without prefix and header, whether vLLM wrote it)."""
    stripped = line.strip()
    prefixed = _PREFIX.match(stripped) is not None
    stripped = _PREFIX.sub("", stripped)
    headed = _RECORD.match(stripped) is not None
    return _RECORD.sub("", stripped), prefixed or headed


def fallbacks(text: str) -> tuple[list[str], list[str]]:
    """(vLLM's fallback lines, everyone else's), each once in the order first logged, redacted."""
    engine: dict[str, None] = {}
    other: dict[str, None] = {}
    for line in text.splitlines():
        message, from_vllm = _message(line)
        if not message or not FALLBACK.search(message) or _ADVICE.search(message):
            continue
        message = redact(message if len(message) <= MAX_LINE else message[: MAX_LINE - 3] + "...")
        (engine if from_vllm else other)[message] = None
    return list(engine), list(other)


def logged_backends(text: str) -> tuple[str | None, str | None]:
    """(the attention backend, the MoE backend) vLLM's log names at its INFO level; None for one it does not."""
    attention = moe = None
    for line in text.splitlines():
        message, from_vllm = _message(line)
        if not from_vllm:
            continue
        if m := _MOE.search(message):
            moe = m.group(1)
        elif m := _ATTENTION.search(message):
            attention = m.group(1)
    return attention, moe
