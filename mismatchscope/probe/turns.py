"""Multi-turn conversations for ``probe --turns N``: the chat template's view of them, one tokenizer at a time.

Each turn the sampler generates from the conversation so far; a tool message
is appended through the checkpoint's chat template; the next turn is sampled
from the whole conversation. How the next prompt is made is the point of
``--turn-ids``:

* ``tokens`` (token in, token out): the previous prompt's ids, the sampled
  ids, then the ids of what the template writes after an assistant message
  (its end, the tool message, the next assistant header). The trainer scores
  exactly the ids the sampler saw and sampled.
* ``messages``: the turns decoded to text, the conversation rendered by the
  template and encoded again, as many loops did before TRL #5224. BPE is not
  a bijection on sampled ids (a merge the sampler did not make, bytes that do
  not decode), so the trainer, which scores the final conversation rendered
  the same way, may score other ids than the sampler sampled from that token
  of a turn on: ``trainer_token_id`` records them.

A turn's rows pair the sampler's k-th token of the turn with the trainer's
k-th token of the same turn (all of them under ``tokens``; under ``messages``
as far as the shorter side reaches, the rest of a re-tokenized turn has no
partner and is not written). Tool spans hold no rows: ``position`` counts the
sampled tokens of the whole conversation, ``turn`` and ``turn_position`` say
where each sits.

Heavy libraries are not imported here: the tokenizer object comes in.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import ChatTemplateError, UsageError

TurnIds = Literal["tokens", "messages"]
TURN_IDS: tuple[str, ...] = ("tokens", "messages")
DEFAULT_TOOL_RESPONSE = "3+5+2+8+1="
"""what the tool answers each turn when ``--tool-response`` is not given: a short plain-text result. For the
bundled model it is a new sum to work out; for any other model, a tool output like any other."""
_MARK = "\x00mismatchscope-assistant\x00"
"""stands in for an assistant message's content while the template's markup around it is measured."""


@dataclass(frozen=True)
class TurnsRecord:
    """What the manifest and every shard record of ``--turns`` (and a ``--resume`` must find unchanged)."""

    turns: int
    turn_ids: TurnIds
    tool_response: str
    tool_response_sha256: str


@dataclass(frozen=True)
class TurnsConfig:
    """``--turns``, ``--tool-response`` and ``--turn-ids``: what makes a probe multi-turn."""

    turns: int
    tool_response: str = DEFAULT_TOOL_RESPONSE
    turn_ids: TurnIds = "tokens"

    def record(self) -> TurnsRecord:
        """What the manifest and every shard record (and a ``--resume`` must find unchanged)."""
        digest = hashlib.sha256(self.tool_response.encode()).hexdigest()
        return TurnsRecord(self.turns, self.turn_ids, self.tool_response, digest)


def turns_config(turns: int, tool_response: str | None, turn_ids: str | None) -> TurnsConfig | None:
    """The options, checked; None for a single-turn probe (``--turns 1``)."""
    if turns < 1:
        raise UsageError(
            f"--turns {turns}: a conversation has at least one turn",
            hint="--turns 1 is the single-turn probe; 2 or more sample multi-turn conversations",
        )
    if turns == 1:
        given = [name for name, v in (("--tool-response", tool_response), ("--turn-ids", turn_ids)) if v is not None]
        if given:
            verb = "describe" if len(given) > 1 else "describes"
            raise UsageError(f"{' and '.join(given)} {verb} multi-turn conversations", hint="add --turns N (N >= 2)")
        return None
    if turn_ids is not None and turn_ids not in TURN_IDS:
        raise UsageError(f"--turn-ids {turn_ids!r}", hint="use tokens (token in, token out) or messages (re-encoded)")
    return TurnsConfig(turns, tool_text(tool_response), turn_ids or "tokens")  # type: ignore[arg-type]  # checked


def tool_text(value: str | None) -> str:
    """``--tool-response``: the text of a file when the value names one, else the value itself."""
    if value is None:
        return DEFAULT_TOOL_RESPONSE
    path = Path(value)
    try:
        is_file = path.is_file()
    except OSError:  # a long text is no file name
        is_file = False
    if is_file:
        try:
            text = path.read_text(encoding="utf-8").rstrip("\n")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--tool-response {value}: cannot read it as UTF-8 text ({e})") from None
    else:
        text = value
    if not text.strip():
        raise UsageError("--tool-response is empty", hint="give the text a tool returns, or a file holding it")
    return text


def template_name(checkpoint: Path) -> str:
    """Where a checkpoint's chat template lives, for the errors that name it."""
    for name in ("chat_template.jinja", "chat_template.json"):
        if (Path(checkpoint) / name).is_file():
            return f"{checkpoint}/{name}"
    return f"the chat template of {checkpoint}/tokenizer_config.json"


class Conversations:
    """The chat template's view of the probe's conversations: first prompts, next prompts, the trainer's ids."""

    def __init__(self, tokenizer: Any, cfg: TurnsConfig, checkpoint: Path):
        self.tok = tokenizer
        self.cfg = cfg
        self.name = template_name(checkpoint)
        self.eos = getattr(tokenizer, "eos_token_id", None)
        self._spans: dict[int, list[int]] = {}
        self._check_template(checkpoint)

    # ---- the template -----------------------------------------------------------------------

    def render(self, messages: list[dict[str, str]], generation: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def _check_template(self, checkpoint: Path) -> None:
        """The template renders a user message, an assistant's content verbatim and a tool message, or the
        probe stops here with what it lacks."""
        if not getattr(self.tok, "chat_template", None):
            raise ChatTemplateError(
                f"{checkpoint} has no chat template: a multi-turn probe renders each tool message through it",
                hint="use a checkpoint with a chat template (the bundled sample_data/tiny-qwen3-chat has one)",
            )
        tool = "\x00mismatchscope-tool\x00"
        messages = [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": _MARK},
            {"role": "tool", "content": tool},
        ]
        try:
            text = self.render(messages, generation=True)
        except Exception as e:  # jinja's TemplateError, raise_exception(...) in the template, a KeyError
            reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            raise ChatTemplateError(
                f"{self.name} cannot render a tool message: it raised {reason!r}",
                hint="use a checkpoint whose template has a tool role (a role other than user/assistant)",
            ) from None
        if _MARK not in text:
            raise ChatTemplateError(f"{self.name} does not write an assistant message's content as given")
        if tool not in text:
            raise ChatTemplateError(
                f"{self.name} cannot render a tool message: it drops messages of the 'tool' role",
                hint="use a checkpoint whose template renders tool messages",
            )

    def span(self, turn: int) -> list[int]:
        """The ids the template writes after assistant turn ``turn``'s content: its end, the tool message, the
        next assistant header (tokens mode appends them to the sampled ids)."""
        if turn not in self._spans:
            messages = [{"role": "user", "content": "x"}]
            for _ in range(turn + 1):
                messages += [{"role": "assistant", "content": _MARK}, {"role": "tool", "content": "y"}]
            messages[-1]["content"] = self.cfg.tool_response
            text = self.render(messages, generation=True)
            self._spans[turn] = self.encode(text[text.rindex(_MARK) + len(_MARK) :])
        return self._spans[turn]

    # ---- the sampler's prompts ------------------------------------------------------------------

    def first_prompt(self, text: str) -> list[int]:
        """A prompt as the first user message, with the template's generation prompt."""
        return self.encode(self.render([{"role": "user", "content": text}], generation=True))

    def messages(self, prompt: str, turns: list[list[int]]) -> list[dict[str, str]]:
        """The conversation as messages: the prompt, then each turn decoded and a tool message after it."""
        out = [{"role": "user", "content": prompt}]
        for ids in turns:
            out.append({"role": "assistant", "content": self.decode(ids)})
            out.append({"role": "tool", "content": self.cfg.tool_response})
        return out

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def next_prompt(self, prompt: str, context: list[int], turns: list[list[int]]) -> list[int]:
        """The prompt of the next turn after ``turns`` (each turn's sampled ids), ``context`` the last turn's
        own prompt."""
        if self.cfg.turn_ids == "messages":
            return self.encode(self.render(self.messages(prompt, turns), generation=True))
        last = turns[-1]
        span = self.span(len(turns) - 1)
        if last and span and last[-1] == self.eos and span[0] == self.eos:  # the sampled end is the template's
            span = span[1:]
        return context + last + span

    # ---- the trainer's conversation -------------------------------------------------------------

    def trainer_ids(
        self, prompt: str, prompt_ids: list[int], turns: list[list[int]]
    ) -> tuple[list[int], list[list[int]]]:
        """The final conversation's ids as the trainer scores it, and where each turn's tokens sit in them
        (their indices, at most as many as the turn sampled)."""
        if self.cfg.turn_ids == "tokens":
            ids, where = list(prompt_ids), []
            for t, turn in enumerate(turns):
                where.append(list(range(len(ids), len(ids) + len(turn))))
                ids += turn
                if t + 1 < len(turns):
                    ids = self.next_prompt(prompt, ids[: len(ids) - len(turn)], turns[: t + 1])
            return ids, where
        return self._encoded_again(prompt, turns)

    def _encoded_again(self, prompt: str, turns: list[list[int]]) -> tuple[list[int], list[list[int]]]:
        """``messages``: the whole conversation rendered and encoded once; each assistant message's content is
        found by its characters (the tokens overlapping them), then the end token where the turn sampled one."""
        messages = self.messages(prompt, turns)[:-1]  # no tool message after the last turn
        text = self.render(messages, generation=False)
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
        where = []
        start = 0
        for t, turn in enumerate(turns):
            before = self.render(messages[: 2 * t + 1], generation=True)  # up to this assistant message's header
            content = messages[2 * t + 1]["content"]
            at = len(before) if text.startswith(before) else start
            found = text.find(content, at) if content else at  # markup a template writes first (think tags)
            start = found if found >= 0 else at
            end = start + len(content)
            inside = [i for i, (a, b) in enumerate(offsets) if b > start and a < end] if content else []
            after = (inside[-1] + 1) if inside else next((i for i, (a, _) in enumerate(offsets) if a >= end), len(ids))
            if turn and turn[-1] == self.eos and after < len(ids) and ids[after] == self.eos:
                inside.append(after)  # the turn's end token, sampled and written by the template alike
            where.append(inside[: len(turn)])
        return ids, where
