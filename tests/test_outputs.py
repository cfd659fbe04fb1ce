"""Outputs never touch inputs, however either is spelt, and an output path that cannot be written fails cleanly.

Each test drives the real console script and pins the whole one-line message. What these pin, by class:

- an output onto a file of an input run reached through its ``tokens/``
  folder (the manifest), among a run's shards, onto a hard link of an input
  (``GITHUB_STEP_SUMMARY`` is appended in place), a picture whose name is an
  input or a link to one, ``..`` after a link;
- a run directory written inside another run;
- ``--html``, ``--plots``, ``--junit-xml``, ``--markdown``, the step summary, ``--out``: onto a directory, a
  file, an unwritable folder, a full device, a name that is not UTF-8, one path given twice.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from tests.helpers import REPO, cli, pairs
from tests.inputs import (
    ROWS,
    assert_plots_folder_checked,
    error_line,
    gate_cli,
    one_line_error,
    sequence_rows,
    write_run_dir,
)

# ---- outputs never replace inputs ------------------------------------------------


def test_an_output_may_not_replace_a_file_of_the_input_run(tmp_path, write):
    run = write_run_dir(tmp_path / "run", write)
    manifest = run / "manifest.json"
    before = manifest.read_bytes()
    r = cli("report", str(run / "tokens"), "--html", str(manifest))
    assert error_line(r) == (
        f"error: --html {manifest} would replace manifest.json of the input run {run / 'tokens'} "
        "(choose another output path)"
    )
    shard_dir = run / "tokens" / "x.html"
    assert error_line(cli("report", str(run), "--html", str(shard_dir))) == (
        f"error: --html {shard_dir} is among the shards of the input run {run} (write outputs outside the run's tokens/ folder)"
    )
    assert manifest.read_bytes() == before
    r = cli(
        "report", str(run), "--html", str(run / "report.html"), "--format", "json"
    )  # a new file beside the run's is fine
    assert r.returncode in (0, 2) and "would replace" not in r.stderr  # 2 only without the plot extra


def test_the_step_summary_may_not_be_a_hard_link_to_the_candidate(tmp_path, write):
    cand = write(pairs(ROWS), "cand.parquet")
    link = tmp_path / "summary.md"
    os.link(cand, link)
    before = cand.read_bytes()
    r = cli(
        "gate",
        str(cand),
        "--absolute-only",
        "--bootstrap",
        "0",
        "--limit",
        "k3_mean<=1",
        env={"GITHUB_STEP_SUMMARY": str(link)},
    )
    assert error_line(r) == (
        f"error: GITHUB_STEP_SUMMARY {link} is an input of this command ({cand}); writing it would "
        "destroy the data (choose another output path)"
    )
    assert cand.read_bytes() == before


def test_pictures_never_replace_an_input(tmp_path, write):
    pytest.importorskip("matplotlib", reason="pictures need the plot extra")
    data = write(pairs(ROWS), "data.parquet")
    pics = tmp_path / "pics"
    pics.mkdir()
    (pics / "log_ratio_hist.png").symlink_to(data)  # a link in the folder, named like a picture, onto the input
    before = data.read_bytes()
    r = cli("report", str(data), "--plots", str(pics))
    assert error_line(r, after_work=True) == (
        f"error: --plots {pics / 'log_ratio_hist.png'} is an input of this command ({data}); writing it would destroy "
        "the data (choose another output path)"
    )
    named = pics / "prob_density.png"  # the input itself carries a picture's name
    named.write_bytes(before)
    r = cli("report", str(named), "--plots", str(pics))
    assert error_line(r, after_work=True) == (
        f"error: --plots {named} is an input of this command ({named}); writing it would destroy the data "
        "(choose another output path)"
    )
    assert data.read_bytes() == before and named.read_bytes() == before


def test_compare_masks_checks_its_plots_folder_before_the_analysis(tmp_path, write):
    assert_plots_folder_checked("compare-masks", write(pairs(ROWS), "data.parquet"), tmp_path)


def test_a_run_may_not_be_written_inside_another_run(tmp_path, write):
    run = write_run_dir(tmp_path / "run", write)
    dump = tmp_path / "dump.jsonl"
    dump.write_text(
        json.dumps({"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}) + "\n"
    )
    inner = run / "tokens"
    assert error_line(cli("import", "jsonl", str(dump), "--out", str(inner))) == (
        f"error: --out {inner} is inside the run directory {run} (give each run its own folder, outside other runs)"
    )
    # the other way round: a folder holding a run would become a run holding it
    assert error_line(cli("import", "jsonl", str(dump), "--out", str(tmp_path))) == (
        f"error: --out {tmp_path} holds the run directory {run} (give each run its own folder, outside other runs)"
    )
    assert error_line(cli("import", "jsonl", str(dump), "--out", "", cwd=tmp_path)) == (
        "error: --out is an empty path (give --out a new folder, e.g. --out runs/new)"
    )
    assert not (tmp_path / "tokens").exists() and not (tmp_path / "manifest.json").exists()


# ---- runs are judged whole ---------------------------------------------------------


# ---- empty and special paths ---------------------------------------------------------


# ---- gate baselines ---------------------------------------------------------------------


# ---- rule parameters ---------------------------------------------------------------------


# ---- streams ---------------------------------------------------------------------------------


# ---- found by a second sweep ------------------------------------------------------------------


def test_dot_dot_after_a_link_is_resolved_in_order(tmp_path, write):
    """``lnk/../manifest.json`` with lnk -> run/tokens is run/manifest.json, not ./manifest.json."""
    run = write_run_dir(tmp_path / "run", write)
    (tmp_path / "lnk").symlink_to(run / "tokens")
    before = (run / "manifest.json").read_bytes()
    r = cli("report", "run", "--html", "lnk/../manifest.json", cwd=tmp_path)
    assert error_line(r) == (
        "error: --html lnk/../manifest.json would replace manifest.json of the input run run "
        "(choose another output path)"
    )
    dump = tmp_path / "dump.jsonl"
    dump.write_text(json.dumps({"token_ids": [5], "sampler_logprobs": [-0.5], "trainer_logprobs": [-0.4]}) + "\n")
    r = cli("import", "jsonl", str(dump), "--out", "lnk/../tokens/new", cwd=tmp_path)
    assert error_line(r) == (
        f"error: --out lnk/../tokens/new is inside the run directory {run} "
        "(give each run its own folder, outside other runs)"
    )
    assert (run / "manifest.json").read_bytes() == before and not (run / "tokens" / "new").exists()


def test_a_hard_link_to_a_runs_manifest_outside_the_run(tmp_path, write):
    run = write_run_dir(tmp_path / "run", write)
    link = tmp_path / "summary.md"
    os.link(run / "manifest.json", link)
    r = cli(
        "gate",
        str(run),
        "--absolute-only",
        "--bootstrap",
        "0",
        "--limit",
        "tv_token_mean<=1",
        env={"GITHUB_STEP_SUMMARY": str(link)},
    )
    assert error_line(r) == (
        f"error: GITHUB_STEP_SUMMARY {link} is an input of this command ({run}); writing it would "
        "destroy the data (choose another output path)"
    )


def test_a_run_reached_through_a_link_to_its_tokens_folder(tmp_path, write):
    run = write_run_dir(tmp_path / "run", write, status="running")
    link = tmp_path / "tl"
    link.symlink_to(run / "tokens")
    r = cli("gate", str(link), "--absolute-only", "--bootstrap", "0", "--limit", "tv_token_mean<=1")
    assert error_line(r) == (
        f"error: {run} is an incomplete run (manifest.json status is 'running', not 'complete': "
        "killed, or still being written); read what is there: 1 shard(s), 5 rows (wait for the run "
        "to finish, or point at complete shards)"
    )
    r = cli("report", str(link), "--html", str(run / "manifest.json"))
    assert error_line(r) == (
        f"error: --html {run / 'manifest.json'} would replace manifest.json of the input run {link} "
        "(choose another output path)"
    )


def test_pictures_may_go_into_the_input_run_folder(tmp_path, write):
    pytest.importorskip("matplotlib", reason="pictures need the plot extra")
    run = write_run_dir(tmp_path / "run", write)
    r = cli("report", str(run), "--plots", str(run), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert (run / "log_ratio_hist.png").stat().st_size > 0 and (
        run / "manifest.json"
    ).read_text() == '{"status": "complete"}'


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "{data}", "--plots", ""], "--plots is an empty path (give --plots a name)"),
        (["report", "{data}", "--html", " "], "--html is an empty path (give --html a name)"),
        (["gate", "--init", ""], "gate --init is an empty path (give gate --init a name)"),
        (
            ["gate", "{data}", "--config", ""],
            "--config is an empty path (give a gate.toml, or write one with mismatchscope gate --init)",
        ),
    ],
)
def test_empty_output_names(tmp_path, write, args, message):
    data = write(pairs(ROWS), "data.parquet")
    r = cli(*[a.format(data=data) for a in args], cwd=tmp_path)
    assert error_line(r) == f"error: {message}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.parquet"]


def _unwritable(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(stat.S_IRUSR | stat.S_IXUSR)
    return d


needs_permissions = pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")


needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


def test_report_html_into_a_directory(data, tmp_path):
    assert error_line(cli("report", str(data), "--html", str(tmp_path))) == (
        f"error: --html {tmp_path} is a directory (give --html a file name, e.g. {tmp_path / 'out'})"
    )


def test_report_plots_onto_a_file(data):
    assert error_line(cli("report", str(data), "--plots", str(data))) == (
        f"error: --plots {data} is an input of this command ({data}); writing it would destroy the data "
        "(choose another output path)"
    )


@needs_permissions
def test_report_html_in_an_unwritable_folder(data, tmp_path):
    ro = _unwritable(tmp_path)
    assert error_line(cli("report", str(data), "--html", str(ro / "r.html"))) == (
        f"error: --html {ro / 'r.html'}: no permission to write in {ro} (choose a writable location)"
    )


def test_report_html_under_a_file(data, tmp_path):
    target = data.with_name("pairs.parquet") / "sub" / "r.html"
    assert error_line(cli("report", str(data), "--html", str(target))) == (
        f"error: --html {target}: {data} is not a directory (choose a path inside a folder)"
    )


@needs_dev_full
def test_report_html_on_a_full_device(data):
    assert error_line(cli("report", str(data), "--html", "/dev/full")) == (
        "error: --html /dev/full: cannot write (No space left on device)"
    )


def test_report_html_over_its_input(data, tmp_path):
    before = data.read_bytes()
    for target in (data, tmp_path / "." / data.name):
        assert error_line(cli("report", str(data), "--html", str(target))) == (
            f"error: --html {target} is an input of this command ({data}); writing it would destroy the data "
            "(choose another output path)"
        )
    assert data.read_bytes() == before


def test_report_html_over_a_shard_inside_an_input_directory(tmp_path, write):
    shard = write(pairs(ROWS), "tokens/part-0.parquet")
    r = cli("report", str(tmp_path), "--html", str(shard))
    assert error_line(r) == (
        f"error: --html {shard} is an input of this command ({tmp_path}); writing it would destroy "
        "the data (choose another output path)"
    )


def test_report_html_over_an_input_through_a_symlink(data, tmp_path):
    link = tmp_path / "link.html"
    link.symlink_to(data)
    assert error_line(cli("report", str(data), "--html", str(link))) == (
        f"error: --html {link} is an input of this command ({data}); writing it would destroy the data "
        "(choose another output path)"
    )


@pytest.mark.parametrize("option", ["--junit-xml", "--markdown"])
def test_gate_outputs_over_an_input_are_refused_before_writing(runs, option):
    base, cand = runs
    for target, role in ((cand, cand), (base, base)):
        before = target.read_bytes()
        r = gate_cli(str(cand), "--baseline", str(base), option, str(target))
        assert error_line(r) == (
            f"error: {option} {target} is an input of this command ({role}); writing it would "
            "destroy the data (choose another output path)"
        )
        assert target.read_bytes() == before


@pytest.mark.parametrize("option", ["--junit-xml", "--markdown", "--html"])
def test_gate_outputs_into_a_directory(runs, tmp_path, option):
    base, cand = runs
    r = gate_cli(str(cand), "--baseline", str(base), option, str(tmp_path))
    assert (
        error_line(r)
        == f"error: {option} {tmp_path} is a directory (give {option} a file name, e.g. {tmp_path / 'out'})"
    )


@needs_dev_full
@pytest.mark.parametrize("option", ["--junit-xml", "--markdown"])
def test_gate_outputs_on_a_full_device_exit_2_not_1(runs, option):
    base, cand = runs
    r = gate_cli(str(cand), "--baseline", str(base), option, "/dev/full")
    assert error_line(r, after_work=True) == f"error: {option} /dev/full: cannot write (No space left on device)"


@needs_dev_full
def test_gate_step_summary_on_a_full_device(runs):
    base, cand = runs
    r = gate_cli(str(cand), "--baseline", str(base), env={"GITHUB_STEP_SUMMARY": "/dev/full"})
    assert (
        error_line(r, after_work=True) == "error: GITHUB_STEP_SUMMARY /dev/full: cannot write (No space left on device)"
    )


def test_gate_step_summary_that_is_a_directory(runs, tmp_path):
    base, cand = runs
    r = gate_cli(str(cand), "--baseline", str(base), env={"GITHUB_STEP_SUMMARY": str(tmp_path)})
    assert error_line(r) == (
        f"error: GITHUB_STEP_SUMMARY {tmp_path} is a directory (give GITHUB_STEP_SUMMARY a file name, "
        f"e.g. {tmp_path / 'out'})"
    )


@needs_permissions
def test_gate_plots_in_an_unwritable_directory(runs, tmp_path):
    base, cand = runs
    ro = _unwritable(tmp_path)
    r = gate_cli(str(cand), "--baseline", str(base), "--plots", str(ro))
    assert (
        error_line(r) == f"error: --plots {ro}: no permission to write in this directory (choose a writable location)"
    )


def test_gate_two_outputs_on_one_path(runs, tmp_path):
    base, cand = runs
    out = tmp_path / "same.txt"
    r = gate_cli(str(cand), "--baseline", str(base), "--junit-xml", str(out), "--markdown", str(out))
    assert error_line(r) == f"error: --markdown {out} is also --junit-xml (give each output its own path)"


def test_timeline_plots_onto_a_file_or_a_full_device(tmp_path, write):
    data = write(pairs(sequence_rows(1, [0, 1]), step=[0, 1]))
    assert_plots_folder_checked("timeline", data, tmp_path)
    (tmp_path / "out" / "timeline.png").mkdir(parents=True)  # the picture's own name taken by a folder
    assert error_line(cli("timeline", str(data), "--plots", str(tmp_path / "out")), after_work=True) == (
        f"error: --plots {tmp_path / 'out' / 'timeline.png'}: cannot write (Is a directory)"
    )


def test_gate_init_into_a_directory(tmp_path):
    r = cli("gate", "--init", str(tmp_path), "--force")
    assert (
        error_line(r)
        == f"error: gate --init {tmp_path} is a directory (give gate --init a file name, e.g. {tmp_path / 'out'})"
    )


def test_import_out_that_is_a_file_or_the_dump(tmp_path):
    dump = tmp_path / "d.jsonl"
    dump.write_text("{}\n")
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert error_line(cli("import", "jsonl", str(dump), "--out", str(other))) == (
        f"error: --out {other} exists and is not a directory (give --out a folder)"
    )
    assert error_line(cli("import", "jsonl", str(dump), "--out", str(dump))) == (
        f"error: --out {dump} is an input of this command ({dump}); writing it would destroy the data "
        "(choose another output path)"
    )
    assert error_line(cli("import", "jsonl", str(tmp_path), "--out", str(tmp_path))) == (
        f"error: --out {tmp_path} is the dump being imported (write the token pairs to a new directory)"
    )


def test_gate_markdown_over_its_own_config_is_refused(runs, tmp_path, monkeypatch):
    base, cand = runs
    cfg = tmp_path / "gate.toml"
    cfg.write_text("[absolute]\ntv_token_mean = { max = 1 }\n")
    monkeypatch.chdir(tmp_path)  # ./gate.toml is read without --config
    r = cli("gate", str(cand), "--absolute-only", "--bootstrap", "0", "--markdown", "gate.toml")
    assert error_line(r) == (
        "error: --markdown gate.toml is an input of this command (" + str(cfg) + "); writing it would "
        "destroy the data (choose another output path)"
    )
    assert cfg.read_text() == "[absolute]\ntv_token_mean = { max = 1 }\n"


TINY = REPO / "sample_data" / "tiny-qwen3"


def test_a_non_utf8_out_is_refused_before_anything_is_written(tmp_path):
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/run-\xff")
    r = cli(
        "probe", str(TINY), "--prompts", str(REPO / "sample_data" / "prompts.jsonl"), "--sampler", "hf", "--out", out
    )
    one_line_error(r, "the path is not valid UTF-8")
    assert list(tmp_path.iterdir()) == []
