"""The README's two commands are the project's contract: CI runs the test
command verbatim (read out of the README by .ci/run), and this module runs the
main command in a fresh virtual environment, as a new user would."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.helpers import REPO


def readme_command(marker: str) -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(rf"<!-- {marker} -->\s*```bash\n(.+?)\n```", text, re.S)
    assert m, f"README lost its {marker} block"
    return m.group(1).strip()


def test_commands_come_first_in_readme():
    text = (REPO / "README.md").read_text()
    first_block = text.index("```")
    assert text.index("<!-- main-command -->") < first_block and "<!-- test-command -->" in text


def test_ci_runs_the_readme_test_command():
    out = subprocess.run(
        [
            "awk",
            "/<!-- test-command -->/{f=1; next} f && /^```bash/{g=1; next} g && /^```/{exit} g{print}",
            "README.md",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == readme_command("test-command")
    assert "README.md" in (REPO / ".ci" / "run").read_text()
    assert "pytest" in readme_command("test-command")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("python3") is None, reason="needs python3 on PATH")
def test_main_command_works_in_a_fresh_environment(tmp_path):
    """Copy the checkout (tracked files only), run the README main command there."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for f in files:
        src = REPO / f
        if src.is_file():
            dst = tmp_path / "checkout" / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    r = subprocess.run(
        ["bash", "-c", readme_command("main-command")],
        cwd=tmp_path / "checkout",
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "What each rule would reject" in r.stdout or "Token mismatch" in r.stdout
