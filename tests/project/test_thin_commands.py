"""The commands stay thin: what a run directory holds, the zero profile's implications and the bundled sample are
decided in the library, behind typed functions, never in ``cli/``.

A command module that reads a manifest by hand, swaps a dtype for the zero profile or picks a bundled model
fails here; the library function it should call is named in the message.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import mismatchscope.cli

CLI = Path(mismatchscope.cli.__file__).parent
FORBIDDEN = {
    r"manifest\.json\"|MANIFEST\b|read_manifest|json\.load\(": "read the run through rundir/ or execution.read",
    r"\.zero\b": "ask the library what the zero profile implies (EngineValues.profiled, probe.options.records_prefill)",
    r"sample_dir|tiny-qwen3": "probe.options.bundled_checkpoint / bundled_prompts",
}


@pytest.mark.parametrize("module", sorted(p.name for p in CLI.glob("*.py")))
def test_no_command_module_holds_a_domain_decision(module):
    source = (CLI / module).read_text()
    code = "\n".join(line.split("#")[0] for line in source.splitlines())
    for pattern, instead in FORBIDDEN.items():
        assert not re.search(pattern, code), f"cli/{module} matches {pattern}: {instead}"
