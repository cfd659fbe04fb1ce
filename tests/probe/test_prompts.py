"""Prompts files the probe cannot read as prompts are refused before the run, in one line naming the file and line."""

from __future__ import annotations

import json

import pytest

from tests.helpers import cli_no_engine as cli
from tests.probe.refusals import CHECKPOINT, error_line, needs_checkpoint, probe_unstarted, prompts_file, refused_probe


@needs_checkpoint
def test_an_empty_prompt_is_refused_before_the_run(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "1+1="}\n{"prompt": ""}\n')
    assert (
        error_line(probe_unstarted(tmp_path, prompts=prompts))
        == "error: prompt 1 is empty (remove empty lines from the prompts file)"
    )


@needs_checkpoint
def test_a_prompts_file_that_is_not_utf8(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b'{"prompt": "1+1="}\n{"prompt": "caf\xe9"}\n')
    assert error_line(probe_unstarted(tmp_path, prompts=prompts)) == (
        f"error: {prompts}:2: not UTF-8 text (byte 0xe9 at column 16) (save the prompts file as UTF-8)"
    )


@needs_checkpoint
def test_a_prompts_file_nested_too_deeply(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert error_line(probe_unstarted(tmp_path, prompts=prompts)) == f"error: {prompts}:1: JSON nested too deeply"


@needs_checkpoint
def test_a_lone_surrogate_names_the_file_and_line(tmp_path):
    prompts = prompts_file(tmp_path, '{"prompt": "1+1="}\n{"prompt": "\\ud800 1+1="}\n')
    assert refused_probe(tmp_path, prompts=prompts) == (
        f"error: {prompts}:2: \"prompt\" holds '\\ud800', a lone UTF-16 surrogate that is not a character "
        "(write the character itself, or its escaped surrogate pair)"
    )


@needs_checkpoint
def test_an_escaped_surrogate_pair_is_one_character(tmp_path):
    from mismatchscope.errors import PromptError
    from mismatchscope.probe.prompts import load_prompts

    p = prompts_file(tmp_path, '{"prompt": "\\ud83d\\ude00 1+1=", "answer": "\\ud800"}\n')
    with pytest.raises(PromptError, match=r":1: \"answer\" holds '\\ud800'"):  # the prompt's pair was fine
        load_prompts(p)
    p.write_text('{"prompt": "\\ud83d\\ude00 1+1="}\n')
    assert load_prompts(p)[0].text == "\U0001f600 1+1="


@needs_checkpoint
def test_a_long_prompt_gets_our_error_only(tmp_path, dense_tokenizer):
    text = "1+2+" * 200 + "="
    n = len(dense_tokenizer.encode(text))
    assert n > 320  # longer than the tokenizer's model_max_length: transformers would warn
    prompts = prompts_file(tmp_path, json.dumps({"prompt": text}) + "\n")
    r = cli("probe", str(CHECKPOINT), "--out", str(tmp_path / "run"), "--prompts", str(prompts), "--sampler", "hf")
    line = error_line(r)
    assert r.stderr == line + "\n"  # no transformers warning before it
    assert f"is {n} tokens; with max_tokens=1 it needs {n + 1} > max_model_len=320" in line
