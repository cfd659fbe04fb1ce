"""JSON Lines that are not JSON Lines: one line naming the file, the line and the cause."""

from __future__ import annotations

import pytest

from tests.importers.layouts import GOOD, import_cli, imported_tokens, jsonl_file
from tests.inputs import error_line


@pytest.mark.parametrize(
    "content, reason",
    [
        (
            (GOOD + "}\n").encode("utf-16"),
            "not UTF-8 text (it looks like UTF-16); JSON Lines are UTF-8, one object per line",
        ),
        ((GOOD + ', "note": "caf\xe9"}\n').encode("latin-1"), None),  # Latin-1: the offset is that of the \xe9
        ((GOOD + ', "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n").encode(), "malformed JSON (nested too deeply)"),
        (
            b'{\n  "token_ids": [\n    5\n  ]\n}\n',
            "not one JSON object per line (this looks like JSON spread over several "
            "lines: write each record on one line)",
        ),
        (
            ("[" + GOOD + "}]\n").encode(),
            "expected a JSON object, got a JSON list (JSON Lines hold one object per line)",
        ),
        (
            b"\x82\x9c\xfe\x00junk\n",
            "not UTF-8 text (byte 0x82 at offset 0); JSON Lines are UTF-8, one object per line",
        ),
    ],
)
def test_a_file_that_is_not_json_lines_says_why(tmp_path, content, reason):
    if reason is None:  # Latin-1: the first byte that is not UTF-8 is the \xe9 of "caf\xe9"
        offset = content.index(b"\xe9")
        reason = f"not UTF-8 text (byte 0xe9 at offset {offset}); JSON Lines are UTF-8, one object per line"
    path = jsonl_file(tmp_path, content)
    assert error_line(import_cli("jsonl", path, tmp_path / "out")) == f"error: d.jsonl:1: {reason}"


def test_a_bad_first_line_before_good_ones_is_reported_by_the_read(tmp_path):
    """The columns come from the first good record; the bad line is then reported with its number (or skipped)."""
    path = jsonl_file(tmp_path, '{"oops\n' + GOOD + "}\n")
    line = error_line(import_cli("jsonl", path, tmp_path / "out"))
    assert line.startswith("error: d.jsonl:1: malformed JSON ("), line
    r = import_cli("jsonl", path, tmp_path / "out2", "--skip-bad", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert imported_tokens(tmp_path / "out2")["token_id"] == [5, 6]
