"""Ship the bundled sample in the wheel, so ``mismatchscope probe`` with no
arguments works from an installed package too.

The sample lives at the repository root (``sample_data/``: tests, docs and
its builder refer to it there); the wheel build copies the checkpoints, the
prompts and the simulated pairs into ``mismatchscope/_sample_data``.
It also compiles the analysis pass's loops (``mismatchscope/analysis/_loops.c``)
and the audit's binary-KL loops (``mismatchscope/audit/_kl.c``), C extensions
without dependencies. It is optional: where no C compiler is
found the package installs without it and runs the same arithmetic in numpy,
with the same numbers, more slowly (docs/analysis.md, "Speed and memory").
Everything else is in ``pyproject.toml``.
"""

import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

SAMPLE_FILES = (
    "tiny-qwen3",
    "tiny-qwen3-later",
    "tiny-qwen3-moe",
    "tiny-qwen3-chat",
    "prompts.jsonl",
    "simulated_pairs.parquet",
    "runs",
    "README.md",
)


class BuildWithSample(build_py):
    def run(self):
        super().run()
        src = Path(__file__).resolve().parent / "sample_data"
        dst = Path(self.build_lib) / "mismatchscope" / "_sample_data"
        for name in SAMPLE_FILES:
            if (src / name).is_dir():
                shutil.copytree(src / name, dst / name, dirs_exist_ok=True)
            elif (src / name).is_file():
                dst.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src / name, dst / name)


LOOPS = Extension(
    "mismatchscope.analysis._loops",
    ["mismatchscope/analysis/_loops.c"],
    # No fused multiply-add: a * b + c rounds as two operations, as numpy's separate passes do.
    extra_compile_args=["/fp:precise"] if sys.platform == "win32" else ["-O2", "-ffp-contract=off"],
    optional=True,
)

AUDIT_KL = Extension(
    "mismatchscope.audit._kl",
    ["mismatchscope/audit/_kl.c"],
    # -O3 vectorises the loops (no value-changing optimisation: contraction stays off)
    extra_compile_args=["/O2", "/fp:precise"] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"],
    optional=True,
)

setup(cmdclass={"build_py": BuildWithSample}, ext_modules=[LOOPS, AUDIT_KL])
