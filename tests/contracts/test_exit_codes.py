"""Every user error ends in one line on stderr and exit code 2, never a traceback.

Each test drives the real console script with a hostile input of one class
and pins the whole message: the class is what is fixed, so each test tries
more than one instance where the instances fail differently.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.schema import METADATA_KEY
from tests.helpers import DUP_HINT, REPO, ROWS, assert_plots_folder_checked, cli, error_line, pairs, raw_parquet

# ---- column mappings --------------------------------------------------------


def test_a_mapping_onto_a_column_the_file_already_reads_is_refused(write):
    path = write(pairs(ROWS))
    r = cli("report", str(path), "--column", "sampler_logprob=trainer_logprob")
    assert error_line(r) == (
        f"error: {path}: --column sampler_logprob=trainer_logprob makes sampler_logprob and trainer_logprob both read "
        "the file's column 'trainer_logprob' (also map the file's own trainer_logprob to another name, or map "
        "sampler_logprob to another column)"
    )


def test_a_swap_of_two_columns_is_allowed(write):
    path = write(pairs(ROWS))
    r = cli(
        "report",
        str(path),
        "--column",
        "sampler_logprob=trainer_logprob",
        "--column",
        "trainer_logprob=sampler_logprob",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr


def test_two_targets_on_one_source_are_refused(write):
    cols = pairs(ROWS)
    cols["lp"] = cols.pop("sampler_logprob")
    path = raw_parquet(write(pairs(ROWS)).with_name("lp.parquet"), cols)
    r = cli("report", str(path), "--column", "sampler_logprob=lp", "--column", "trainer_logprob=lp")
    assert error_line(r) == (
        "error: --column 'trainer_logprob=lp': 'lp' is already read as sampler_logprob "
        "(map each column of the file to one mismatchscope column)"
    )


def test_one_target_mapped_twice_is_refused(write):
    path = write(pairs(ROWS))
    r = cli("compare-masks", str(path), "-c", "advantage=a", "-c", "advantage=b")
    assert error_line(r) == "error: --column 'advantage=b': advantage is already mapped to 'a' (map each column once)"


@pytest.mark.parametrize("target", ["sampler_logprob", "advantage"])
def test_a_mapping_from_a_missing_column_is_refused(write, target):
    path = write(pairs(ROWS))
    r = cli("compare-masks", str(path), "--column", f"{target}=nope")
    assert error_line(r) == (
        f"error: {path}: --column {target}=nope: the file has no column 'nope'; it has: position, sampler_logprob, "
        "sequence_id, token_id, trainer_logprob (check the spelling of the name in the file)"
    )


# ---- file metadata ----------------------------------------------------------


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"{not json", "is not valid JSON"),
        (b"\xff\xfe", "is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "is nested too deeply"),
    ],
)
def test_metadata_that_is_not_json_is_refused(tmp_path, raw, reason):
    path = raw_parquet(tmp_path / "m.parquet", pairs(ROWS), {METADATA_KEY: raw})
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: the 'mismatchscope' file metadata {reason} (the file was not written by mismatchscope, or was "
        "damaged; rewrite it without that metadata key)"
    )


@pytest.mark.parametrize(
    "payload, message",
    [
        (
            [1, 2],
            "the 'mismatchscope' file metadata is a JSON list, not an object (the file was not written by "
            "mismatchscope; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": "1"},
            "the 'mismatchscope' file metadata has schema_version '1', not a version number (the file "
            "was not written by mismatchscope; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": True},
            "the 'mismatchscope' file metadata has schema_version True, not a version number (the "
            "file was not written by mismatchscope; rewrite it without that metadata key)",
        ),
        (
            {},
            "the 'mismatchscope' file metadata has schema_version None, not a version number (the file was not written by "
            "mismatchscope; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": 99},
            "schema_version 99 is newer than this mismatchscope understands (1) (upgrade mismatchscope)",
        ),
        (
            {"schema_version": 1, "sampler": "vllm"},
            "the 'mismatchscope' file metadata has 'sampler' = 'vllm', not a table "
            "(the file's metadata was damaged; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": 1, "checkpoint": [1]},
            "the 'mismatchscope' file metadata has 'checkpoint' = [1], not a table "
            "(the file's metadata was damaged; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": 1, "source": {"semantics": "lagged"}},
            "the 'mismatchscope' file metadata has 'source.semantics' = 'lagged', not a table (the file's metadata was damaged; "
            "rewrite it without that metadata key)",
        ),
    ],
)
def test_metadata_of_the_wrong_shape_is_refused(tmp_path, payload, message):
    path = raw_parquet(tmp_path / "m.parquet", pairs(ROWS), {METADATA_KEY: json.dumps(payload).encode()})
    for command in ("report", "compare-masks"):
        assert error_line(cli(command, str(path))) == f"error: {path}: {message}"


def test_gate_reads_damaged_metadata_as_an_error_too(tmp_path):
    good = raw_parquet(tmp_path / "good.parquet", pairs(ROWS))
    bad = raw_parquet(tmp_path / "bad.parquet", pairs(ROWS), {METADATA_KEY: b'{"schema_version": 1, "sampling": 3}'})
    r = cli("gate", str(bad), "--baseline", str(good), "--bootstrap", "0")
    assert error_line(r) == (
        f"error: {bad}: the 'mismatchscope' file metadata has 'sampling' = 3, not a table "
        "(the file's metadata was damaged; rewrite it without that metadata key)"
    )


# ---- column types and ranges ---------------------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            {"trainer_entropy": [[1.0], [2.0], [3.0], [1.0], [1.0]]},
            "column 'trainer_entropy' must hold numbers, found list<element: double>",
        ),
        (
            {
                "sampler_topk_ids": [1, 2, 3, 4, 5],
                "sampler_topk_logprobs": [[-1.0]] * 5,
                "trainer_logprobs_at_sampler_topk": [[-1.0]] * 5,
            },
            "column 'sampler_topk_ids' must hold lists of integers, found int64 (top-k columns hold one list per token)",
        ),
        (
            {
                "sampler_topk_ids": [["a"]] * 5,
                "sampler_topk_logprobs": [[-1.0]] * 5,
                "trainer_logprobs_at_sampler_topk": [[-1.0]] * 5,
            },
            "column 'sampler_topk_ids' must hold lists of integers, found list<element: string> (top-k columns hold one list per token)",
        ),
        (
            {
                "sampler_topk_ids": [[7]] * 5,
                "sampler_topk_logprobs": [["x"]] * 5,
                "trainer_logprobs_at_sampler_topk": [[-1.0]] * 5,
            },
            "column 'sampler_topk_logprobs' must hold lists of numbers, found list<element: string> (top-k columns hold one list per token)",
        ),
        (
            {
                "sampler_topk_ids": pa.array([[7], None, [8], [9], [7]]),
                "sampler_topk_logprobs": [[-1.0]] * 5,
                "trainer_logprobs_at_sampler_topk": [[-1.0]] * 5,
            },
            "column 'sampler_topk_ids' has 1 null list(s) (write an empty list for a position without a top-k)",
        ),
    ],
)
def test_columns_of_the_wrong_kind(tmp_path, extra, message):
    path = raw_parquet(tmp_path / "t.parquet", {**pairs(ROWS), **extra})
    assert error_line(cli("report", str(path))) == f"error: {path}: {message}"


@pytest.mark.parametrize("position", [-1, 1 << 24, 1 << 40])
def test_positions_outside_any_context(tmp_path, position):
    cols = pairs(ROWS)
    cols["position"] = pa.array([0, 1, 2, position, 1], pa.int64())
    path = raw_parquet(tmp_path / "p.parquet", cols)
    for command in ("report", "compare-masks"):
        assert error_line(cli(command, str(path))) == (
            f"error: {path}: position {position} of sequence 2 is outside 0..16777215 (position is the 0-based index of "
            "the token within its completion)"
        )


# ---- duplicate (sequence, position) rows ------------------------------------


def _seq(sequence_id: int, positions: list[int]) -> list[tuple[int, int, float, float]]:
    return [(sequence_id, p, 0.5, 0.4) for p in positions]


@pytest.mark.parametrize(
    "rows, where",
    [
        # 0..8 with 1, 5, 6 replaced by 2, 3, 7: count, span, sum (36) and sum of squares (204) all as for 0..8
        (_seq(1, [0, 2, 2, 3, 3, 4, 7, 7, 8]), "sequence 1 position 2"),
        # with a gap no count can tell: 4 rows over the span 0..9 look like a sequence with gaps
        (_seq(5, [0, 3, 3, 9]), "sequence 5 position 3"),
        # the duplicate in another sequence than the first, rows out of order
        (_seq(1, [0, 1, 2]) + _seq(2, [4, 0, 4, 1]), "sequence 2 position 4"),
    ],
)
def test_duplicate_positions_are_refused_exactly(write, rows, where):
    path = write(pairs(rows))
    for command in ("report", "compare-masks"):
        assert (
            error_line(cli(command, str(path)))
            == f"error: duplicate (sequence_id, position) rows: {where} appears more than once {DUP_HINT}"
        )


def test_a_duplicate_across_two_shards_is_refused(tmp_path, write):
    write(pairs(_seq(3, [0, 1, 2, 3])), "a.parquet")
    write(pairs(_seq(3, [4, 5, 2])), "b.parquet")
    assert error_line(cli("report", str(tmp_path))) == (
        f"error: duplicate (sequence_id, position) rows: sequence 3 position 2 appears more than once {DUP_HINT}"
    )


def test_a_shard_copied_twice_is_refused_by_timeline(tmp_path, write):
    rows = pairs(_seq(3, [0, 1, 2]), step=[0, 0, 0])
    write(rows, "a.parquet")
    write(rows, "copy.parquet")
    assert error_line(cli("timeline", str(tmp_path))) == (
        f"error: duplicate (sequence_id, position) rows: sequence 3 position 0 appears more than once {DUP_HINT}"
    )


def test_gaps_without_duplicates_only_warn(write):
    path = write(pairs(_seq(1, [0, 2, 4]) + _seq(2, [1, 2])))
    r = cli("report", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["warnings"] == [
        "1 sequence(s) have gaps in their positions (tokens missing or masked out)",
        "1 sequence(s) do not start at position 0",
    ]


def test_duplicate_tracker_is_exact_on_random_layouts():
    """Against a set-based reference, over shuffled batches with and without one planted duplicate."""
    import numpy as np

    from mismatchscope.analysis.positions import DuplicatePositionError, PositionTracker

    rng = np.random.default_rng(0)
    for trial in range(200):
        n_seq = int(rng.integers(1, 6))
        keys = [(s, int(p)) for s in range(n_seq) for p in rng.choice(40, size=int(rng.integers(1, 20)), replace=False)]
        planted = trial % 2 == 1
        if planted:
            keys.append(keys[int(rng.integers(len(keys)))])
        order = rng.permutation(len(keys))
        seq = np.array([keys[i][0] for i in order])
        pos = np.array([keys[i][1] for i in order])
        tracker = PositionTracker()
        cuts = sorted(set(rng.integers(0, len(keys), size=3).tolist()) | {0, len(keys)})
        try:
            for a, b in zip(cuts, cuts[1:]):
                tracker.add(seq[a:b], pos[a:b])
            tracker.finish()
            found = None
        except DuplicatePositionError as e:
            found = (e.sequence_id, e.position)
        if planted:
            assert found == keys[-1], trial
        else:
            assert found is None, trial


# ---- top-k logprob lists ----------------------------------------------------


def _topk(sampler_lists, trainer_lists):
    cols = pairs(ROWS[:2])
    cols["sampler_topk_ids"] = [[7, 9], [8, 3]]
    cols["sampler_topk_logprobs"] = sampler_lists
    cols["trainer_logprobs_at_sampler_topk"] = trainer_lists
    return cols


@pytest.mark.parametrize(
    "column, sampler_lists, trainer_lists, what",
    [
        (
            "sampler_topk_logprobs",
            [[-0.7, 0.5], [-1.6, -3.0]],
            [[-1.6, -2.0], [-0.5, -3.0]],
            "a positive value 0.5 at sequence 1 position 0",
        ),
        (
            "sampler_topk_logprobs",
            [[-0.7, -1.0], [-1.6, math.nan]],
            [[-1.6, -2.0], [-0.5, -3.0]],
            "a NaN at sequence 1 position 1",
        ),
        (
            "trainer_logprobs_at_sampler_topk",
            [[-0.7, -1.0], [-1.6, -3.0]],
            [[-1.6, -2.0], [math.inf, -3.0]],
            "a positive value inf at sequence 1 position 1",
        ),
    ],
)
def test_topk_lists_hold_logprobs(write, column, sampler_lists, trainer_lists, what):
    path = write(_topk(sampler_lists, trainer_lists))
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: column {column!r} holds 1 NaN or positive value(s), e.g. {what} (top-k lists hold natural-log "
        "probabilities <= 0; is the column holding logits or probabilities?)"
    )


def test_topk_lists_within_the_rounding_tolerance_and_minus_inf_are_fine(write):
    path = write(_topk([[-0.7, 5e-5], [-1.6, -math.inf]], [[-1.6, -2.0], [-0.5, -3.0]]))
    assert cli("report", str(path), "--format", "json").returncode == 0


# ---- output paths -------------------------------------------------------------


@pytest.fixture
def data(write):
    return write(pairs(ROWS))


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


def _gate(*args, env=None):
    return cli("gate", *args, "--bootstrap", "0", "--limit", "tv_token_mean<=1", env=env)


@pytest.fixture
def runs(tmp_path, write):
    base = write(pairs(ROWS), "base.parquet")
    cand = write(pairs(ROWS[:4] + [(2, 1, 0.4, 0.5)]), "cand.parquet")
    return base, cand


@pytest.mark.parametrize("option", ["--junit-xml", "--markdown"])
def test_gate_outputs_over_an_input_are_refused_before_writing(runs, option):
    base, cand = runs
    for target, role in ((cand, cand), (base, base)):
        before = target.read_bytes()
        r = _gate(str(cand), "--baseline", str(base), option, str(target))
        assert error_line(r) == (
            f"error: {option} {target} is an input of this command ({role}); writing it would "
            "destroy the data (choose another output path)"
        )
        assert target.read_bytes() == before


@pytest.mark.parametrize("option", ["--junit-xml", "--markdown", "--html"])
def test_gate_outputs_into_a_directory(runs, tmp_path, option):
    base, cand = runs
    r = _gate(str(cand), "--baseline", str(base), option, str(tmp_path))
    assert (
        error_line(r)
        == f"error: {option} {tmp_path} is a directory (give {option} a file name, e.g. {tmp_path / 'out'})"
    )


@needs_dev_full
@pytest.mark.parametrize("option", ["--junit-xml", "--markdown"])
def test_gate_outputs_on_a_full_device_exit_2_not_1(runs, option):
    base, cand = runs
    r = _gate(str(cand), "--baseline", str(base), option, "/dev/full")
    assert error_line(r, after_work=True) == f"error: {option} /dev/full: cannot write (No space left on device)"


@needs_dev_full
def test_gate_step_summary_on_a_full_device(runs):
    base, cand = runs
    r = _gate(str(cand), "--baseline", str(base), env={"GITHUB_STEP_SUMMARY": "/dev/full"})
    assert (
        error_line(r, after_work=True) == "error: GITHUB_STEP_SUMMARY /dev/full: cannot write (No space left on device)"
    )


def test_gate_step_summary_that_is_a_directory(runs, tmp_path):
    base, cand = runs
    r = _gate(str(cand), "--baseline", str(base), env={"GITHUB_STEP_SUMMARY": str(tmp_path)})
    assert error_line(r) == (
        f"error: GITHUB_STEP_SUMMARY {tmp_path} is a directory (give GITHUB_STEP_SUMMARY a file name, "
        f"e.g. {tmp_path / 'out'})"
    )


@needs_permissions
def test_gate_plots_in_an_unwritable_directory(runs, tmp_path):
    base, cand = runs
    ro = _unwritable(tmp_path)
    r = _gate(str(cand), "--baseline", str(base), "--plots", str(ro))
    assert (
        error_line(r) == f"error: --plots {ro}: no permission to write in this directory (choose a writable location)"
    )


def test_gate_two_outputs_on_one_path(runs, tmp_path):
    base, cand = runs
    out = tmp_path / "same.txt"
    r = _gate(str(cand), "--baseline", str(base), "--junit-xml", str(out), "--markdown", str(out))
    assert error_line(r) == f"error: --markdown {out} is also --junit-xml (give each output its own path)"


def test_timeline_plots_onto_a_file_or_a_full_device(tmp_path, write):
    data = write(pairs(_seq(1, [0, 1]), step=[0, 1]))
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


# ---- gate configurations ------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--limit", "tv_token_mean>=0.5", "--limit", "k3_mean<=-0.1"],
            "k3_mean: max -0.1 is below 0, the smallest value k3_mean can take, so no run can pass (give a limit >= 0)",
        ),
        (["--limit", "tv_token_mean>=inf"], "tv_token_mean: min inf leaves no value that passes (give a finite limit)"),
        (["--limit", "k1_mean<=-inf"], "k1_mean: max -inf leaves no value that passes (give a finite limit)"),
        (
            ["--limit", "icepop.token_reject_rate>=2"],
            "icepop.token_reject_rate: min 2 is above 1, the largest value icepop.token_reject_rate can take, so no run can pass "
            "(shares, rates and TV are fractions: 0.01 = 1%)",
        ),
        # ESS / n, TV and the ratio tails are at most 1 too; chi2 = mean r^2 - 1 is at least -1
        (
            ["--limit", "ess>=1.5"],
            "ess: min 1.5 is above 1, the largest value ess can take, so no run can pass (shares, rates and TV are fractions: 0.01 = 1%)",
        ),
        (
            ["--limit", "ratio_tail_high.2>=1.5"],
            "ratio_tail_high.2: min 1.5 is above 1, the largest value ratio_tail_high.2 can take, so no run can pass "
            "(shares, rates and TV are fractions: 0.01 = 1%)",
        ),
        (
            ["--limit", "chi2_token<=-2"],
            "chi2_token: max -2 is below -1, the smallest value chi2_token can take, so no run can pass (give a limit >= -1)",
        ),
        # two flags on one metric make one limit: here an impossible one; the same bound twice is refused
        (
            ["--limit", "tv_token_mean>=0.5", "--limit", "tv_token_mean<=0.1"],
            "tv_token_mean: min 0.5 is above max 0.1, so no run can pass (swap them, or drop one)",
        ),
        (
            ["--limit", "tv_token_mean<=0.5", "--limit", "tv_token_mean<=0.1"],
            "--limit 'tv_token_mean<=0.1': tv_token_mean already has a max (0.5) from another --limit (give each bound of a metric once)",
        ),
        (
            ["--bootstrap", "1000000000000", "--limit", "k3_mean<=1"],
            "--bootstrap must be an integer between 0 and 100,000, got 1000000000000",
        ),
        (["--limit", "k3_mean<=1_0"], "--limit k3_mean<=1_0: '1_0' is not a number"),
    ],
)
def test_gate_limits_that_can_never_pass(runs, args, message):
    base, cand = runs
    r = cli("gate", str(cand), "--absolute-only", *(["--bootstrap", "0"] if "--bootstrap" not in args else []), *args)
    assert error_line(r) == f"error: {message}"


def test_gate_config_with_min_above_max(runs, tmp_path):
    base, cand = runs
    cfg = tmp_path / "g.toml"
    cfg.write_text("[absolute]\ntv_token_mean = { min = 0.2, max = 0.1 }\n")
    r = cli("gate", str(cand), "--config", str(cfg), "--absolute-only", "--bootstrap", "0")
    assert (
        error_line(r) == "error: tv_token_mean: min 0.2 is above max 0.1, so no run can pass (swap them, or drop one)"
    )


def test_gate_config_nested_too_deeply(runs, tmp_path):
    base, cand = runs
    cfg = tmp_path / "g.toml"
    cfg.write_text("x = " + "[" * 50_000 + "]" * 50_000 + "\n")
    r = cli("gate", str(cand), "--config", str(cfg), "--absolute-only")
    assert error_line(r) == f"error: {cfg} is nested too deeply to be a gate configuration"


def test_gate_baseline_that_is_the_candidate(runs, tmp_path):
    base, cand = runs
    for other in (str(cand), str(tmp_path / "." / cand.name)):
        r = _gate(str(cand), "--baseline", other)
        assert error_line(r) == (
            f"error: the baseline {other} is the candidate itself (pass as --baseline the run sampled "
            "by the current serving stack)"
        )


def test_gate_baseline_sharing_shards_with_the_candidate(tmp_path, write):
    shard = write(pairs(ROWS), "run/tokens/part-0.parquet")
    write(pairs([(9, 0, 0.5, 0.5)]), "run/tokens/part-1.parquet")
    r = _gate(str(tmp_path / "run"), "--baseline", str(shard))
    assert error_line(r) == (
        f"error: the baseline {shard} shares 1 file(s) with the candidate, e.g. {shard} "
        "(pass as --baseline the run sampled by the current serving stack)"
    )


# ---- debug mode -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "false", "no", ""])
def test_debug_off_values_keep_the_one_line(tmp_path, value):
    r = cli("report", str(tmp_path / "missing.parquet"), env={"MISMATCHSCOPE_DEBUG": value})
    assert error_line(r) == f"error: {tmp_path / 'missing.parquet'}: no such file or directory"


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_debug_on_adds_the_traceback_and_keeps_exit_2(tmp_path, value):
    r = cli("report", str(tmp_path / "missing.parquet"), env={"MISMATCHSCOPE_DEBUG": value})
    assert r.returncode == 2 and "Traceback" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'missing.parquet'}: no such file or directory"


def test_debug_keeps_gate_exit_codes(runs):
    base, cand = runs
    r = cli("gate", str(cand), "--baseline", str(cand), "--bootstrap", "0", env={"MISMATCHSCOPE_DEBUG": "1"})
    assert r.returncode == 2


# ---- secrets ----------------------------------------------------------------------


def test_redact_removes_url_credentials_and_tokens():
    from mismatchscope.redact import redact, redact_url

    assert redact_url("http://user:pa%40ss@host:8000/v1") == "http://<redacted>@host:8000/v1"
    assert redact_url("http://host:8000") == "http://host:8000"
    assert redact("--url=https://u:p@w@h/x and http://h/p?a=b@c") == "--url=https://<redacted>@h/x and http://h/p?a=b@c"
    assert (
        redact('echo {"authorization": "Bearer sk-123456"}', ["sk-123456"])
        == 'echo {"authorization": "<redacted> <redacted>"}'
    )
    assert redact("Authorization: Bearer abc.def") == "Authorization: <redacted> <redacted>"
    assert redact("the api_key=hunter22 was sent") == "the api_key=<redacted> was sent"
    # ordinary text keeps its words
    assert (
        redact("token 17 at position 3; max_tokens=16; basic checks")
        == "token 17 at position 3; max_tokens=16; basic checks"
    )


def test_an_error_message_with_url_credentials_is_printed_redacted(tmp_path):
    r = cli("report", "http://alice:s3cret@example.invalid/x.parquet")
    line = error_line(r)
    assert "s3cret" not in line and "alice" not in line
    assert line == "error: http://<redacted>@example.invalid/x.parquet: no such file or directory"


# ---- imports ------------------------------------------------------------------------


def _jsonl(tmp_path, *records: str):
    dump = tmp_path / "dump.jsonl"
    dump.write_text("".join(r + "\n" for r in records))
    return dump


GOOD_RECORD = '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}'


@pytest.mark.parametrize(
    "record, reason",
    [
        ("[" * 100_000 + "]" * 100_000, "malformed JSON (nested too deeply)"),
        (
            '{"token_ids": '
            + "[" * 3000
            + "1"
            + "]" * 3000
            + ', "sampler_logprobs": [-0.5], "trainer_logprobs": [-0.4]}',
            "malformed JSON (nested too deeply)",
        ),
        (
            '{"token_ids": [5, 6.5], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (token ids must be integers, got 6.5 at index 1)",
        ),
        (
            '{"token_ids": [5, "6"], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (token ids must be integers, got '6' at index 1)",
        ),
        (
            '{"token_ids": [5, null], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (token ids must be integers, got None at index 1)",
        ),
        (
            '{"token_ids": [true, false], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (token ids must be integers, got True at index 0)",
        ),
        (
            '{"token_ids": [[5, 6]], "sampler_logprobs": [[-0.5, -1.0]], "trainer_logprobs": [[-0.4, -1.1]]}',
            "bad value (token ids must be a flat list of integers, got nested lists)",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [[-0.5], [-1.0]], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (a per-token list holds nested lists, not one number per token)",
        ),
    ],
)
def test_pathological_jsonl_records(tmp_path, record, reason):
    dump = _jsonl(tmp_path, GOOD_RECORD, record)
    r = cli("import", "jsonl", str(dump), "--out", str(tmp_path / "out"))
    assert error_line(r) == f"error: dump.jsonl:2: {reason}"


def test_integral_float_token_ids_are_read(tmp_path):
    dump = _jsonl(
        tmp_path, '{"token_ids": [5.0, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}'
    )
    r = cli("import", "jsonl", str(dump), "--out", str(tmp_path / "out"), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert pq.read_table(tmp_path / "out" / "tokens").column("token_id").to_pylist() == [5, 6]


def test_fractional_token_ids_in_parquet(tmp_path):
    dump = tmp_path / "dump.parquet"
    pq.write_table(
        pa.table({"token_ids": [[5.0, 6.25]], "sampler_logprobs": [[-0.5, -1.0]], "trainer_logprobs": [[-0.4, -1.1]]}),
        dump,
    )
    r = cli("import", "parquet", str(dump), "--out", str(tmp_path / "out"))
    assert error_line(r) == (
        "error: dump.parquet: bad values in rows 0..0 (integer columns must be integers, got 6.25 at index 1)"
    )


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"hello, this is not a pickle" * 20, "(101)"),  # torch's own KeyError on a bad magic number
        (b"\x80\x04\x95\x10\x00\x00\x00", "(truncated or damaged)"),  # torch blames weights_only: the stream is checked
    ],
)
def test_a_slime_file_that_is_not_a_pickle_is_corrupt(tmp_path, content, reason):
    pytest.importorskip("torch")
    train = tmp_path / "dump" / "train_data"
    train.mkdir(parents=True)
    (train / "0_0.pt").write_bytes(content)
    for trust in ((), ("--trust-pickle",)):
        r = cli("import", "slime", str(tmp_path / "dump"), "--out", str(tmp_path / "out"), *trust)
        assert error_line(r) == f"error: train_data/0_0.pt: corrupt: not a readable torch file or pickle {reason}"


def test_a_truncated_slime_file_is_corrupt_not_untrusted(tmp_path):
    torch = pytest.importorskip("torch")
    import datetime

    train = tmp_path / "dump" / "train_data"
    train.mkdir(parents=True)
    torch.save(
        {"format_version": 2, "when": datetime.date(2020, 1, 1)}, train / "0_0.pt", _use_new_zipfile_serialization=False
    )
    data = (train / "0_0.pt").read_bytes()
    (train / "0_0.pt").write_bytes(data[: len(data) // 3])
    r = cli("import", "slime", str(tmp_path / "dump"), "--out", str(tmp_path / "out"))
    line = error_line(r)
    assert line.startswith("error: train_data/0_0.pt: corrupt: not a readable torch file or pickle ("), line


@pytest.mark.parametrize(
    "columns, message",
    [
        (
            ["sampler_logprob=trainer_logprobs"],
            "--column sampler_logprob=trainer_logprobs makes sampler_logprob and trainer_logprob both read the column "
            "'trainer_logprobs' (map trainer_logprob to another column too)",
        ),
        (
            ["sampler_logprob=lp", "trainer_logprob=lp"],
            "--column trainer_logprob=lp makes sampler_logprob and trainer_logprob both read the column 'lp' "
            "(map the other one to another column too)",
        ),
    ],
)
def test_import_mappings_that_read_one_column_twice(tmp_path, columns, message):
    dump = _jsonl(tmp_path, '{"token_ids": [5], "sampler_logprobs": [-0.5], "trainer_logprobs": [-0.4], "lp": [-0.1]}')
    args = [a for c in columns for a in ("--column", c)]
    assert error_line(cli("import", "jsonl", str(dump), "--out", str(tmp_path / "out"), *args)) == f"error: {message}"


# ---- exit codes for what is not a user error -------------------------------------------


def test_a_bug_in_gate_exits_3_never_1(runs, monkeypatch, capsys):
    """A crash must not read as 'a limit failed' in CI; the traceback stays, for the report."""
    import mismatchscope.gate.run as gate_run
    from mismatchscope.cli.main import main

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(gate_run, "run_gate", broken)
    base, cand = runs
    with pytest.raises(SystemExit) as exit_:
        main(["gate", str(cand), "--baseline", str(base), "--bootstrap", "0"])
    assert exit_.value.code == 3
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.strip().splitlines()[-1] == (
        "error: internal error (RuntimeError: boom); please report it with the traceback above"
    )


def test_a_full_stdout_is_one_line_and_exit_2(data):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    import subprocess

    exe = os.path.join(os.path.dirname(sys.executable), "mismatchscope")
    env = {k: v for k, v in os.environ.items() if k != "MISMATCHSCOPE_DEBUG"}
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [exe, "report", str(data), "--format", "json"], stdout=full, stderr=subprocess.PIPE, text=True, env=env
        )
    assert (
        r.returncode == 2
        and r.stderr.strip() == "error: No space left on device (free space on the device, or write elsewhere)"
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


def test_credentials_in_a_files_metadata_are_never_printed(write):
    meta = {
        "sampler": {"kind": "vllm-server", "url": "http://bob:hunter22@10.0.0.1:8000"},
        "trainer": {"dtype": "float32"},
    }
    path = write(pairs(ROWS), metadata=meta)
    r = cli("report", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "hunter22" not in r.stdout + r.stderr
    assert json.loads(r.stdout)["run"]["sampler"]["url"] == "http://<redacted>@10.0.0.1:8000"


@pytest.mark.parametrize(
    "args, message",
    [
        (["report"], "Missing argument 'path'. (see mismatchscope report --help)"),
        (
            ["report", "x", "--format", "yaml"],
            "Invalid value for '--format' / '-f': 'yaml' is not one of 'table', 'json'. (see mismatchscope report --help)",
        ),
        (["report", "--nope"], "No such option: --nope (see mismatchscope report --help)"),
        (["nosuchcmd"], "No such command 'nosuchcmd'. (see mismatchscope --help)"),
    ],
)
def test_usage_errors_are_one_line_too(args, message):
    assert error_line(cli(*args)) == f"error: {message}"


def test_a_closed_stdout_is_not_a_failed_gate(runs):
    """``gate ... | head -1``: the pipe closes early; exit 1 would say a limit failed."""
    import subprocess

    base, cand = runs
    exe = os.path.join(os.path.dirname(sys.executable), "mismatchscope")
    proc = subprocess.Popen(
        [exe, "gate", str(cand), "--baseline", str(base), "--bootstrap", "0", "--limit", "tv_token_mean<=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader went away before any output
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err


def test_the_exit_code_table_names_every_command_that_exits_1_and_every_command():
    """docs/errors.md once said only gate and certify exit 1, while doctor exits 1 on a likely pipeline
    problem: the commands whose module raises ``typer.Exit(1)`` (certify, doctor, gate) must be the ones the
    table's row for 1 names, and the per-command sentence must name every command."""
    import re

    from mismatchscope.cli.main import COMMANDS

    cli_dir = REPO / "mismatchscope" / "cli"
    verdicts = {p.stem for p in cli_dir.glob("*.py") if "typer.Exit(1)" in p.read_text()}
    assert verdicts == {"certify", "doctor", "gate"}
    text = (REPO / "docs" / "errors.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    assert set(re.findall(r"`([a-z-]+)`,", row)) == verdicts, row
    sentence = text.split("Per command:", 1)[1].split("The library", 1)[0]
    assert set(COMMANDS) <= set(re.findall(r"`([a-z-]+)`", sentence)), sentence
