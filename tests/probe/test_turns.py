"""``probe --turns N``: the conversations' template view, the refusals (one line, exit 2, before any engine), and
whole multi-turn probes with the transformers sampler (the vLLM engine and server: ``test_turns_vllm.py``).

The bundled ``tiny-qwen3-chat`` is ``tiny-qwen3`` with a chat template: user and tool messages open with
``<bos>``, an assistant message ends with ``<eos>``, no generation prompt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import ChatTemplateError, UsageError
from mismatchscope.probe.conversations import split_turns
from mismatchscope.probe.turns import DEFAULT_TOOL_RESPONSE, Conversations, TurnsConfig, tool_text, turns_config
from mismatchscope.probe.types import Completion
from tests.helpers import cli_no_engine
from tests.inputs import error_line

from .conftest import sample_data_dir

CHAT = sample_data_dir() / "tiny-qwen3-chat"


@pytest.fixture(scope="module")
def chat_tokenizer():
    from mismatchscope.probe.tokenizer import load_tokenizer

    return load_tokenizer(CHAT)


def _conv(tok, mode: str = "tokens", tool: str = "9+9=") -> Conversations:
    return Conversations(tok, TurnsConfig(3, tool, mode), CHAT)  # type: ignore[arg-type]  # a mode


# ---- the template's view ---------------------------------------------------------------------


def test_tokens_mode_appends_the_tool_span_to_the_sampled_ids(chat_tokenizer):
    conv = _conv(chat_tokenizer)
    bos, eos = chat_tokenizer.bos_token_id, chat_tokenizer.eos_token_id
    first = conv.first_prompt("4+7=")
    assert first == chat_tokenizer("4+7=")["input_ids"]  # the template's first user message is the plain prompt
    tool = chat_tokenizer.encode("9+9=", add_special_tokens=False)
    assert conv.span(0) == [eos, bos, *tool]  # the end of the assistant message, then the tool message
    turn = [*chat_tokenizer.encode(" #### 11", add_special_tokens=False), eos]
    # the sampled <eos> is the template's end of the message: not written twice
    assert conv.next_prompt("4+7=", first, [turn]) == [*first, *turn, bos, *tool]
    cut = turn[:-1]  # a turn cut by --max-tokens: the template's end is added
    assert conv.next_prompt("4+7=", first, [cut]) == [*first, *cut, eos, bos, *tool]


def test_the_trainer_scores_the_sampled_ids_under_tokens(chat_tokenizer):
    conv = _conv(chat_tokenizer)
    first = conv.first_prompt("4+7=")
    turns = [[*chat_tokenizer.encode(" #### 11", add_special_tokens=False), 2], [5, 6, 2], [7]]
    ids, where = conv.trainer_ids("4+7=", first, turns)
    for turn, at in zip(turns, where, strict=True):
        assert [ids[i] for i in at] == turn


def test_messages_mode_encodes_the_conversation_again(chat_tokenizer):
    conv = _conv(chat_tokenizer, "messages")
    tok = chat_tokenizer
    twelve = tok.encode(" 12", add_special_tokens=False)
    split = [*tok.encode(" 1", add_special_tokens=False), *tok.encode("2", add_special_tokens=False)]
    assert len(twelve) == 1 and len(split) == 2  # " 12" is one merged token; the sampler wrote it as two
    first = conv.first_prompt("4+7=")
    turns = [[*split, 2], [*twelve, 2]]
    ids, where = conv.trainer_ids("4+7=", first, turns)
    assert [ids[i] for i in where[0]] == [*twelve, 2]  # re-encoded: one token, then the turn's end
    assert [ids[i] for i in where[1]] == [*twelve, 2]
    assert conv.next_prompt("4+7=", first, turns[:1])[len(first) :][:2] == [*twelve, 2]


def test_a_conversation_s_turns_come_back_apart():
    c = Completion(0, 0, [5, 6, 7, 8, 9], [0.0] * 5, [[]] * 5, [[]] * 5, turns=[0, 0, 1, 2, 2])
    assert split_turns(c) == [[5, 6], [7], [8, 9]]


# ---- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--turns", "0"], "error: --turns 0: a conversation has at least one turn"),
        (["--tool-response", "x"], "error: --tool-response describes multi-turn conversations"),
        (["--turns", "2", "--turn-ids", "text"], "error: --turn-ids 'text'"),
        (["--turns", "2", "--tool-response", "  "], "error: --tool-response is empty"),
        (["--turns", "2", "--full-vocab", "--sampler", "hf"], "error: --turns 2 does not combine with --full-vocab"),
    ],
)
def test_bad_turn_options_are_one_line_before_any_engine(tmp_path, args, message):
    line = error_line(cli_no_engine("probe", *args, "--out", str(tmp_path / "run")))
    assert line.startswith(message), line
    assert not (tmp_path / "run").exists()


def _with_template(tmp_path: Path, template: str | None) -> Path:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(CHAT, ckpt)
    (ckpt / "chat_template.jinja").unlink()
    if template is not None:
        (ckpt / "chat_template.jinja").write_text(template)
    return ckpt


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (None, "has no chat template: a multi-turn probe renders each tool message through it"),
        (
            "{{ bos_token }}{% for m in messages %}{% if m['role'] != 'tool' %}{{ m['content'] }}{% endif %}{% endfor %}",
            "chat_template.jinja cannot render a tool message: it drops messages of the 'tool' role",
        ),
        (
            "{% for m in messages %}{% if m['role'] not in ('user', 'assistant') %}"
            "{{ raise_exception('roles must be user or assistant') }}{% endif %}{{ m['content'] }}{% endfor %}",
            "chat_template.jinja cannot render a tool message: it raised 'roles must be user or assistant'",
        ),
    ],
)
def test_a_template_that_cannot_render_a_tool_message_is_named(tmp_path, template, message):
    ckpt = _with_template(tmp_path, template)
    line = error_line(
        cli_no_engine("probe", str(ckpt), "--turns", "2", "--sampler", "hf", "--out", str(tmp_path / "r"))
    )
    assert message in line and (str(ckpt) in line), line
    assert not (tmp_path / "r").exists()


def test_tool_response_reads_a_file_or_takes_the_text(tmp_path):
    f = tmp_path / "tool.txt"
    f.write_text('{"result": 42}\n')
    assert tool_text(str(f)) == '{"result": 42}'
    assert tool_text("7+7=") == "7+7=" and tool_text(None) == DEFAULT_TOOL_RESPONSE
    assert turns_config(1, None, None) is None
    with pytest.raises(UsageError):
        turns_config(2, None, "ids")


def test_the_bundled_template_renders_a_tool_message(chat_tokenizer):
    _conv(chat_tokenizer)  # no ChatTemplateError
    from mismatchscope.probe.tokenizer import load_tokenizer

    with pytest.raises(ChatTemplateError, match="has no chat template"):
        Conversations(load_tokenizer(sample_data_dir() / "tiny-qwen3"), TurnsConfig(2), CHAT.parent / "tiny-qwen3")


# ---- whole probes (transformers sampler) -----------------------------------------------------------


def _probe(tmp_path: Path, name: str, *args: str):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join((sample_data_dir() / "prompts.jsonl").read_text().splitlines()[:3]) + "\n")
    out = tmp_path / name
    r = cli_no_engine(
        "probe", "--sampler", "hf", "--sampler-dtype", "float32", "--prompts", str(prompts), "-n", "2",
        "--max-tokens", "40", "--turns", "3", "--out", str(out), "--format", "json", *args,
    )  # fmt: skip
    return r, out


def _tokens(out: Path) -> dict:
    t = pq.read_table(out / "tokens").sort_by([("sequence_id", "ascending"), ("position", "ascending")])
    return t.to_pydict()


@pytest.fixture(scope="module")
def tokens_run(tmp_path_factory):
    """One ``--turns 3`` probe with token ids between turns, shared by the tests that read it."""
    r, out = _probe(tmp_path_factory.mktemp("turns"), "run-tokens")
    assert r.returncode == 0, r.stderr
    return r, out


def test_a_multi_turn_probe_records_each_turn_and_its_positions(tokens_run):
    r, out = tokens_run
    t = _tokens(out)
    assert set(t["turn"]) == {0, 1, 2} and "trainer_token_id" not in t
    for s in set(t["sequence_id"]):
        rows = [i for i, x in enumerate(t["sequence_id"]) if x == s]
        assert [t["position"][i] for i in rows] == list(range(len(rows)))  # tool spans hold no rows
        turns = [t["turn"][i] for i in rows]
        assert turns == sorted(turns)
        for k in set(turns):
            assert [t["turn_position"][i] for i in rows if t["turn"][i] == k] == list(range(turns.count(k)))
    # float32 on both sides, the same ids: the gap is rounding only, in every turn
    assert np.max(np.abs(np.subtract(t["trainer_logprob"], t["sampler_logprob"]))) < 1e-4
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["turns"]["turns"] == 3 and manifest["config"]["turns"]["turn_ids"] == "tokens"
    assert manifest["fingerprint"]["turns"]["tool_response"] == DEFAULT_TOOL_RESPONSE
    samples = pq.read_table(out / "samples" / "round-00000.parquet")
    assert "turns" in samples.column_names
    doc = json.loads(r.stdout)
    assert [row["bucket"] for row in doc["report"]["breakdowns"]["turn"]] == ["0", "1", "2"]


def test_messages_mode_records_the_trainer_s_ids_beside_the_sampler_s(tmp_path):
    r, out = _probe(tmp_path, "run-messages", "--turn-ids", "messages")
    assert r.returncode == 0, r.stderr
    t = _tokens(out)
    same = np.equal(t["trainer_token_id"], t["token_id"])
    d = np.abs(np.subtract(t["trainer_logprob"], t["sampler_logprob"]))
    assert d[same].max() < 1e-3 or not same.all()  # where the ids agree (and nothing before them drifted)...
    assert json.loads((out / "manifest.json").read_text())["config"]["turns"]["turn_ids"] == "messages"


def test_a_killed_multi_turn_probe_resumes_from_its_next_turn(tokens_run, tmp_path, monkeypatch):
    """Sampling fails at turn 2: turns 0 and 1 are saved; --resume samples turn 2 only and ends where an
    uninterrupted probe ends, row for row (the transformers sampler is seeded per call)."""
    whole = tokens_run[1]
    from mismatchscope.probe import conversations

    real = conversations._turn

    def failing(run, r, t, *args):
        if t == 2:
            raise KeyboardInterrupt  # killed mid-round
        return real(run, r, t, *args)

    monkeypatch.setattr(conversations, "_turn", failing)
    r, _ = _probe(tmp_path, "killed")
    assert r.returncode == 130, r.stderr  # interrupted
    killed = tmp_path / "killed"
    assert sorted(p.name for p in (killed / "samples" / "turns").iterdir()) == [
        "round-00000-turn-000.parquet",
        "round-00000-turn-001.parquet",
    ]
    monkeypatch.setattr(conversations, "_turn", real)
    r, _ = _probe(tmp_path, "killed", "--resume")
    assert r.returncode == 0, r.stderr
    a, b = _tokens(whole), _tokens(killed)
    for c in ("sequence_id", "position", "turn", "turn_position", "token_id", "sampler_logprob", "trainer_logprob"):
        assert a[c] == b[c], c
