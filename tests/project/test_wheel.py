"""``pip install mismatchscope`` without a checkout: the wheel carries the
bundled sample, so ``probe`` with no arguments works from an installed package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel from a copy of the checkout's files (the checkout itself stays clean)."""
    root = tmp_path_factory.mktemp("wheel")
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (root / "src" / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, root / "src" / f)
    import setuptools

    # this environment's setuptools when it can build the project (pyproject needs >= 77), else pip's isolated build
    isolation = ["--no-build-isolation"] if int(setuptools.__version__.split(".")[0]) >= 77 else []
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            *isolation,
            "-w",
            str(root / "dist"),
            str(root / "src"),
        ],
        check=True,
        capture_output=True,
    )
    (whl,) = (root / "dist").glob("mismatchscope-*.whl")
    return whl


def test_the_wheel_carries_the_sample(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in (
        "tiny-qwen3/model.safetensors",
        "tiny-qwen3/tokenizer.json",
        "tiny-qwen3-later/model.safetensors",
        "tiny-qwen3-moe/config.json",
        "tiny-qwen3-chat/chat_template.jinja",
        "runs/multi-turn-messages/manifest.json",
        "prompts.jsonl",
        "simulated_pairs.parquet",
        "runs/rl-zero/manifest.json",
        "runs/rl-default/tokens/step-000007-rank-0000.parquet",
    ):
        assert f"mismatchscope/_sample_data/{f}" in names, f
    assert "mismatchscope/doctor/figures.json" in names  # doctor's published figures, package data
    assert not any(n.startswith(("tests/", "sample_data/")) for n in names)


def test_the_wheel_carries_the_compiled_loops(wheel):
    # built from the C source at wheel time (a compiler is there wherever the checkout's tests run)
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith("mismatchscope/analysis/_loops.") and n.endswith((".so", ".pyd"))]


@pytest.mark.slow
def test_probe_with_no_model_arguments_from_an_installed_wheel(wheel, tmp_path):
    pytest.importorskip("transformers", reason="probe scores with transformers (the hf extra)")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
    )
    # the installed package first, then this environment's dependencies; no checkout anywhere near
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]])}
    env.pop("MISMATCHSCOPE_DEBUG", None)
    work = tmp_path / "work"
    work.mkdir()
    where = subprocess.run(
        [sys.executable, "-c", "import mismatchscope; print(mismatchscope.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(site), where
    r = subprocess.run(
        # the bundled checkpoint and prompts found from the installed copy; the transformers sampler, since
        # what this pins is the wheel, not vLLM (whose default probe the README's main command runs)
        [sys.executable, "-m", "mismatchscope", "probe", "--sampler", "hf", "-n", "1", "--max-tokens", "16"]
        + ["--out", "runs/p"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "What each rule would reject" in r.stdout
    assert (work / "runs" / "p" / "manifest.json").is_file()
