"""``view``'s refusals (one line, exit 2, nothing written) and what it says when it shows ids."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.helpers import REPO, SAMPLE_PAIRS, cli, pairs
from tests.inputs import ROWS, error_line
from tests.project.test_golden import GOLDEN


def _data(page) -> dict:
    text = page.read_text()
    return json.loads(re.search(r'<script type="application/json" id="tv-data">(.*?)</script>', text, re.S).group(1))


def test_a_sequence_the_run_does_not_have_is_one_line(tmp_path, write):
    rows = [*ROWS, (5, 0, 0.5, 0.4)]  # ids 1, 2 and 5
    path, page = write(pairs(rows)), tmp_path / "v.html"
    line = error_line(cli("view", str(path), "--html", str(page), "--sequences", "3"), after_work=True)
    assert "--sequences 3: the run has no sequence with this id" in line and "nearest ids: 2, 5" in line
    assert not page.exists()


def test_sequences_past_the_run_is_one_line(tmp_path, write):
    page = tmp_path / "v.html"
    line = error_line(cli("view", str(write(pairs(ROWS))), "--html", str(page), "--sequences", "2,40"), after_work=True)
    assert "--sequences 40 is past the run: its last sequence id is 2" in line
    assert not page.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--sequences", "1,x"], "'x' is not a sequence id"),
        (["--sequences", "1,1"], "names a sequence twice"),
        (["--sequences", "1", "--worst", "2"], "--sequences names the sequences; --worst and --by choose them"),
        (["--by", "nonsense"], "--by 'nonsense' is neither a ranking nor one of the rules shown"),
        (["--rule", "nope"], "unknown rule 'nope'"),
        (["--token-cap", "0"], "--token-cap"),
    ],
)
def test_bad_choices_are_one_line(tmp_path, data, args, said):
    page = tmp_path / "v.html"
    line = error_line(cli("view", str(data), "--html", str(page), *args), after_work=True)
    assert said in line, line
    assert not page.exists()


def test_an_unwritable_html_path_is_refused_before_any_work(tmp_path, data):
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere: the permission cannot be taken away here
            pytest.skip("running as a user who can write into any folder")
        line = error_line(cli("view", str(data), "--html", str(locked / "v.html")))
        assert "--html" in line and "no permission to write" in line
    finally:
        os.chmod(locked, 0o700)


def test_an_html_path_inside_a_file_is_refused_before_any_work(tmp_path, data):
    """Unwritable for every user, root included: the folder it names is a file."""
    notes = tmp_path / "notes.txt"
    notes.write_text("x")
    line = error_line(cli("view", str(data), "--html", str(notes / "v.html")))
    assert "--html" in line and "is not a directory" in line
    assert notes.read_text() == "x"


def test_an_html_path_that_is_a_folder_or_the_input_is_refused(tmp_path, data):
    assert "is a directory" in error_line(cli("view", str(data), "--html", str(tmp_path)))
    assert "is an input of this command" in error_line(cli("view", str(data), "--html", str(data)))


def test_view_needs_a_page(data):
    assert "give it --html FILE" in error_line(cli("view", str(data)))


def test_a_tokenizer_that_is_not_there_is_refused_before_the_pass(tmp_path, data):
    line = error_line(cli("view", str(data), "--html", str(tmp_path / "v.html"), "--tokenizer", str(tmp_path / "nope")))
    assert "--tokenizer" in line and "no such folder" in line


def test_a_tokenizer_too_small_for_the_run_is_refused(tmp_path, write):
    cols = pairs(ROWS)
    cols["token_id"] = [5, 6, 7, 8, 400]  # the bundled tokenizer has 320 tokens
    page = tmp_path / "v.html"
    tok = str(REPO / "sample_data" / "tiny-qwen3")
    line = error_line(cli("view", str(write(cols)), "--html", str(page), "--tokenizer", tok), after_work=True)
    assert "has 320 tokens but the run has token id 400" in line
    assert not page.exists()


def test_a_run_without_a_tokenizer_says_why_ids_are_shown(tmp_path):
    page = tmp_path / "v.html"
    r = cli("view", str(SAMPLE_PAIRS), "--html", str(page), "--worst", "2")
    assert r.returncode == 0, r.stderr
    assert "token ids are shown: the run does not name its checkpoint" in r.stdout  # said under the table too
    d = _data(page)
    assert d["text"]["tokenizer"] is None and "--tokenizer CHECKPOINT" in d["text"]["note"]
    assert "token ids are shown" in page.read_text()


def test_a_probe_run_whose_checkpoint_is_gone_says_so(tmp_path):
    import shutil

    run = tmp_path / "elsewhere" / "run"
    shutil.copytree(GOLDEN, run)  # its manifest names sample_data/tiny-qwen3, which is not above this folder
    page = tmp_path / "v.html"
    r = cli("view", str(run), "--html", str(page), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the run's checkpoint sample_data/tiny-qwen3 is not found from here" in _data(page)["text"]["note"]


def test_a_probe_run_finds_its_checkpoint_from_anywhere(tmp_path):
    """The probe recorded the path it was given (relative to the repository); the run sits below it."""
    page = tmp_path / "v.html"
    r = cli("view", str(GOLDEN), "--html", str(page), "--worst", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = _data(page)
    assert d["text"]["tokenizer"] == str(REPO / "sample_data" / "tiny-qwen3")
    seq = d["sequences"][0]
    assert "".join(seq["text"]).endswith("<eos>") and " #### " in "".join(seq["text"])


def test_the_chosen_sequences_in_the_order_asked(tmp_path):
    page = tmp_path / "v.html"
    r = cli("view", str(GOLDEN), "--html", str(page), "--sequences", "5,0", "--sequences", "3", cwd=REPO)
    assert r.returncode == 0, r.stderr
    d = _data(page)
    assert [s["sequence_id"] for s in d["sequences"]] == [5, 0, 3] and "--sequences" in d["ranking"]
    assert all(s["value"] is None for s in d["sequences"])
