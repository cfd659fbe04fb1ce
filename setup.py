"""Ship the bundled sample in the wheel, so ``mismatchscope probe`` with no
arguments works from an installed package too.

The sample lives at the repository root (``sample_data/``: tests, docs and
its builder refer to it there); the wheel build copies the checkpoints, the
prompts and the simulated pairs into ``mismatchscope/_sample_data``.
Everything else is in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SAMPLE_FILES = (
    "tiny-qwen3",
    "tiny-qwen3-later",
    "tiny-qwen3-moe",
    "prompts.jsonl",
    "simulated_pairs.parquet",
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


setup(cmdclass={"build_py": BuildWithSample})
