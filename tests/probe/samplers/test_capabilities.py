"""Samplers declare what they can do (their ``SAMPLERS`` entry's ``Capabilities``); nothing outside a sampler asks
for its name. A sampler registered with a capability is accepted where the capability is needed, refused where it is not,
with no check changed."""

from __future__ import annotations

import ast

import pytest

from mismatchscope.errors import UsageError
from mismatchscope.probe.samplers import SAMPLERS, Capabilities, SamplerEntry, capabilities_of, kinds_with
from mismatchscope.probe.types import SamplingConfig
from tests.helpers import REPO


def test_the_bundled_samplers_declare_what_the_checks_asked_their_names_for():
    assert kinds_with("remote") == ["vllm-server", "trl-server"]
    assert kinds_with("can_prefill") == ["vllm", "hf"]
    assert kinds_with("starts_here") == ["vllm", "hf"]
    assert kinds_with("has_full_rows") == kinds_with("can_zero") == kinds_with("transformers") == ["hf"]
    assert capabilities_of("vllm").capture == "vllm" and capabilities_of("hf").capture == "transformers"
    assert capabilities_of("no-such-sampler") == Capabilities()


@pytest.fixture
def prefiller(monkeypatch):
    """A sampler of a new engine that can score prefills and nothing else."""

    monkeypatch.setitem(SAMPLERS, "prefiller", SamplerEntry("prefiller:Prefiller", Capabilities(can_prefill=True)))


def test_a_new_sampler_is_judged_by_what_it_declares(prefiller):
    from mismatchscope.probe.sampler_prefill import check_sampler_prefill

    check_sampler_prefill("prefiller", SamplingConfig())  # accepted: it declares it can
    with pytest.raises(UsageError) as e:
        check_sampler_prefill("vllm-server", SamplingConfig())
    assert e.value.hint == "use --sampler vllm or --sampler hf or --sampler prefiller"


def test_no_module_outside_the_samplers_asks_a_sampler_its_name():
    """A comparison of a sampler's kind (``.kind``, ``sampler_kind``, ``.name``) with a sampler's name, outside
    ``probe/samplers/``: the capability it stands for belongs in the sampler's declaration."""
    names = set(SAMPLERS)
    found = []
    for path in sorted((REPO / "mismatchscope").rglob("*.py")):
        if "samplers" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            parts = [node.left, *node.comparators]
            consts = {c.value for p in parts for c in ast.walk(p) if isinstance(c, ast.Constant)}
            asks = any(
                (isinstance(p, ast.Attribute) and p.attr in ("kind", "name") and "sampler" in ast.unparse(p))
                or (isinstance(p, ast.Name) and p.id == "sampler_kind")
                for p in parts
            )
            if asks and consts & names:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, found


def test_no_module_reads_a_sampler_or_trainer_private_member():
    """``sampler._engine_for``, ``trainer._logits``: what another module needs of an engine is its public API.
    (``live/`` hooks a training framework's own trainer, which is not one of ours.)"""
    found = []
    for path in sorted((REPO / "mismatchscope").rglob("*.py")):
        if "live" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in ("sampler", "trainer", "reference")
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value.id}.{node.attr}")
    assert not found, found
