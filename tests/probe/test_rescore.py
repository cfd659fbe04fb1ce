"""``rescore`` of a probe run: where its checkpoint is found, and ``--locate``'s localisation in the output.

The golden probe (``tests/data/golden-probe``) recorded its checkpoint as ``sample_data/tiny-qwen3``, relative to
the checkout it ran in: the case of every run whose probe was given a relative path.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers import REPO, cli, cli_no_engine

GOLDEN = REPO / "tests" / "data" / "golden-probe"


def _moved(tmp_path, path: str):
    """The golden probe, its recorded checkpoint path replaced by ``path``."""
    run = shutil.copytree(GOLDEN, tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["checkpoint"]["path"] = path
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_a_checkpoint_that_is_not_where_the_run_says_names_the_option(tmp_path):
    run = _moved(tmp_path, "elsewhere/tiny-qwen3")
    out = tmp_path / "out"
    r = cli_no_engine("rescore", str(run), "--out", str(out), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: the checkpoint {run} was sampled from, 'elsewhere/tiny-qwen3' (recorded relative to the folder its "
        "probe ran in), is neither here nor under the run's folders (give its folder with --checkpoint PATH (its "
        "sha256 is checked against the run's))"
    )
    assert not out.exists()


def test_checkpoint_takes_a_folder_whose_weights_are_not_the_runs_as_an_error(tmp_path):
    """--checkpoint says where the run's checkpoint is; other weights there are refused, never scored."""
    later = REPO / "sample_data" / "tiny-qwen3-later"
    r = cli_no_engine("rescore", str(GOLDEN), "--out", str(tmp_path / "out"), "--checkpoint", str(later))
    assert r.returncode == 2 and "changed since" in r.stderr and "sha256 differs" in r.stderr, r.stderr


@pytest.mark.vllm
def test_rescore_locate_from_another_folder_carries_the_localisation_in_its_json(tmp_path):
    """From a folder that is not the checkout, the golden probe's relative checkpoint is found under the run's own
    folders; ``--locate --format json`` carries the verdict and the points with the path of locate.json, as
    diagnose's document does; and no engine's loading bar reaches stderr (they go to engine.log)."""
    out = tmp_path / "out"
    r = cli(
        "rescore",
        str(GOLDEN),
        "--out",
        str(out),
        "--locate",
        "--locate-sequences",
        "1",
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    loc = doc["locate"]
    assert loc["path"] == str(out / "locate" / "locate.json")
    on_disk = json.loads((out / "locate" / "locate.json").read_text())
    assert {k: v for k, v in loc.items() if k != "path"} == {k: v for k, v in on_disk.items() if k != "schema_version"}
    assert loc["verdict"]["reading"] and loc["points"][0]["point"] == "embed"
    assert "Loading" not in r.stderr and "%|" not in r.stderr, r.stderr
    assert doc["manifest"]["config"]["checkpoint"]["path"] == str(REPO / "sample_data" / "tiny-qwen3")
