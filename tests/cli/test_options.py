"""Options by type (``cli/_options.py``): every option of every command reaches the library, shared options are
declared once, and no value is looked up by its parameter's name.

* A command passes each parameter on by its name in the command's body (``EngineValues(top_p=top_p, ...)``): a
  parameter renamed in the signature alone is an undefined name (ruff, pyright), one renamed in the body alone is a
  parameter nothing reads (here), a field renamed in ``EngineValues`` alone an unknown keyword (pyright).
* A flag that ``_options.py`` or ``_engine_options.py`` declares (``--column``, ``--plots``, ``--top-p``) is taken
  through its ``Annotated`` alias, never declared again by hand, so its help, metavar and bounds cannot drift apart.
* ``cli/`` reads no value by name: no ``ctx.params``, no ``getattr`` with a computed name, no ``EngineValues.of``.
"""

from __future__ import annotations

import ast
import inspect
import typing
from collections import defaultdict
from pathlib import Path

import pytest
import typer
from typer.models import OptionInfo

import mismatchscope.cli
from mismatchscope.cli import _options
from mismatchscope.cli.main import COMMANDS, _command

CLI = Path(mismatchscope.cli.__file__).parent

OWN_MEANING = {
    ("import", "--routes"): "the file of routes to import, not probe's and rescore's switch that records them",
    ("certify", "--full-vocab"): "compares the row digests that probe --full-vocab records",
}
"""A shared flag that one command declares by hand because it means something else there."""
OWN_FLAGS = {
    "--by": "what compare-masks, timeline and view split or rank by: a different choice in each",
    "--worst": "report lists the N worst sequences (0: none), view shows them (default 20)",
}
"""Flags that several commands declare by hand, each its own option under a common word."""


def _function(fn) -> ast.FunctionDef:
    tree = ast.parse(inspect.getsource(inspect.getmodule(fn)))
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == fn.__name__)


def _read(fn) -> set[str]:
    """The names the command's body reads."""
    body = ast.Module(body=_function(fn).body, type_ignores=[])
    return {n.id for n in ast.walk(body) if isinstance(n, ast.Name)}


def _parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def _option_infos(fn) -> dict[str, OptionInfo]:
    """Each option parameter's declaration: the ``Annotated`` alias's, or the one written as its default."""
    hints = typing.get_type_hints(fn, include_extras=True)
    out = {}
    for name, param in inspect.signature(fn).parameters.items():
        found = [m for m in getattr(hints.get(name), "__metadata__", ()) if isinstance(m, OptionInfo)]
        if isinstance(param.default, OptionInfo):
            found.append(param.default)
        if found:
            out[name] = found[0]
    return out


def _flags(info: OptionInfo) -> set[str]:
    """The long flags an option declares (``--routes/--no-routes`` is two; in an alias the first flag is typer's
    ``default`` slot), or its short ones where it has none (``-n``): one letter means different things in different
    commands (``-p``: probe's prompts, certify's pairing)."""
    decls = [*([info.default] if isinstance(info.default, str) and info.default.startswith("-") else [])]
    decls += list(info.param_decls or ())
    flags = {flag for decl in decls for flag in decl.split("/") if flag.startswith("-")}
    return {f for f in flags if f.startswith("--")} or flags


SHARED = {id(info): alias for alias, info in _options.shared_options().items()}
SHARED_FLAGS = {flag for info in _options.shared_options().values() for flag in _flags(info)}


def by_hand(command: str, fn) -> list[str]:
    """The shared flags ``fn`` declares by hand instead of through their alias."""
    return sorted(
        f"{name} ({flag})"
        for name, info in _option_infos(fn).items()
        if id(info) not in SHARED
        for flag in _flags(info) & SHARED_FLAGS
        if (command, flag) not in OWN_MEANING
    )


@pytest.mark.parametrize("name", COMMANDS)
def test_every_parameter_is_read(name):
    fn = _command(name)
    unread = _parameters(fn) - _read(fn)
    assert not unread, f"{name}: {sorted(unread)} never reach the library"


@pytest.mark.parametrize("name", COMMANDS)
def test_shared_options_are_taken_through_their_alias(name):
    assert not by_hand(name, _command(name)), f"{name} declares shared options by hand: {by_hand(name, _command(name))}"


def test_a_flag_two_commands_declare_is_declared_once():
    declared: dict[str, set[str]] = defaultdict(set)
    for name in COMMANDS:
        for info in _option_infos(_command(name)).values():
            if id(info) not in SHARED:
                for flag in _flags(info) - SHARED_FLAGS:
                    declared[flag].add(name)
    twice = {flag: sorted(names) for flag, names in declared.items() if len(names) > 1 and flag not in OWN_FLAGS}
    assert not twice, f"declare these once, as an alias in cli/_options.py: {twice}"


def test_an_option_declared_by_hand_is_found():
    """The checks above can fail: a command that writes its own ``--column``, and one whose body no longer reads a
    parameter its signature renamed (probe's ``top_p`` become ``nucleus``)."""

    def by_hand_column(column: list[str] | None = typer.Option(None, "--column", "-c")) -> None:
        print(column)

    def aliased(column: _options.ColumnOpt = None, plots: _options.ReportPlotsOpt = None) -> None:
        print(column, plots)

    def renamed(nucleus: float = 1.0) -> None:
        print(dict(top_p=1.0))

    assert by_hand("report", by_hand_column) == ["column (--column)"]
    assert by_hand("report", aliased) == []
    assert _parameters(renamed) - _read(renamed) == {"nucleus"}


def _lookups_by_name(tree: ast.AST) -> list[str]:
    """``.params``, ``EngineValues.of``, a ``getattr`` by a computed name or a click context taken by a command;
    a stream wrapper's ``__getattr__`` hands attributes on, which is no lookup of an option."""
    proxies = {id(n) for f in ast.walk(tree) if getattr(f, "name", "") == "__getattr__" for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        if id(node) in proxies:
            continue
        if isinstance(node, ast.Attribute) and node.attr == "params":
            found.append(f"line {node.lineno}: .params")
        if isinstance(node, ast.Attribute) and node.attr == "of" and ast.unparse(node.value) == "EngineValues":
            found.append(f"line {node.lineno}: EngineValues.of")
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr" and len(node.args) > 1:
            if not isinstance(node.args[1], ast.Constant):
                found.append(f"line {node.lineno}: getattr by a computed name")
        if isinstance(node, ast.arg) and node.annotation is not None and "Context" in ast.unparse(node.annotation):
            found.append(f"line {node.lineno}: a command takes the click context")
    return found


@pytest.mark.parametrize("module", sorted(p.name for p in CLI.glob("*.py")))
def test_no_value_is_looked_up_by_its_parameters_name(module):
    found = _lookups_by_name(ast.parse((CLI / module).read_text()))
    assert not found, f"cli/{module}: {found}"


def test_a_lookup_by_name_is_found():
    code = "def probe(ctx: typer.Context):\n    v = EngineValues.of(ctx.params)\n    return getattr(v, name)\n"
    assert len(_lookups_by_name(ast.parse(code))) == 4


def test_report_names_the_rules_it_draws_by_default():
    from mismatchscope.rules import RULES

    assert _options.REPORT_DRAWN_RULES == tuple(n for n, s in RULES.items() if s.drawn_by_default)


def test_diagnose_s_bootstrap_defaults_are_the_library_s():
    from mismatchscope.diagnose.effects import Bootstrap

    assert (_options.DIAGNOSE_BOOTSTRAP, _options.DIAGNOSE_CONFIDENCE) == (Bootstrap.resamples, Bootstrap.confidence)


SAMPLING_AND_SAMPLER = frozenset(
    {"temperature", "top_p", "top_k", "n", "max_tokens", "top_k_logprobs", "seed", "logprobs_mode", "sampler"}
    | {"sampler_dtype", "tensor_parallel_size", "max_num_seqs", "enforce_eager", "gpu_memory_utilization"}
    | {"max_model_len", "fp32_lm_head", "sampler_fp32_lm_head", "url", "api_key_env", "zero", "engine_args"}
)
ENGINE_NOT_TAKEN = {
    # --engine-arg is parsed once the other values are judged, and set with replace()
    "probe": frozenset({"engine_args"}),
    # rescore scores samples already drawn: the trainer's options alone
    "rescore": SAMPLING_AND_SAMPLER,
    # diagnose starts its own samplers (no server), records routes in every run, and varies the zero profile, the
    # heads on both sides and route replay as variants (--vary)
    "diagnose": frozenset({"url", "api_key_env", "zero", "fp32_lm_head", "routes", "replay_routes", "replay_weights"})
    | {"device_map", "trainer_device"},
}
"""The engine options each command does not pass to ``EngineValues``: they keep the configs' defaults."""


@pytest.mark.parametrize("name", sorted(ENGINE_NOT_TAKEN))
def test_each_engine_option_is_passed_under_its_own_name_or_declared_not_taken(name):
    """An option the command stopped passing would silently take its default; two passed into each other's
    fields (``top_p=top_k``) would swap them. Each keyword of the command's ``EngineValues(...)`` is the parameter
    of the same name (``engine_args``: its parsed ``--engine-arg``), and the rest is declared above."""
    import dataclasses
    import textwrap

    from mismatchscope.probe.engine_config import EngineValues

    tree = ast.parse(textwrap.dedent(inspect.getsource(_command(name))))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "EngineValues"]
    assert len(calls) == 1, f"{name} builds EngineValues {len(calls)} times"
    given = {str(k.arg): ast.unparse(k.value) for k in calls[0].keywords}
    expected = {"engine_args": "engine_args(engine_arg)"}
    crossed = {k: v for k, v in given.items() if v != expected.get(k, k)}
    assert not crossed, f"{name} passes these under another name: {crossed}"
    options = {f.name for f in dataclasses.fields(EngineValues)}
    assert options - given.keys() == ENGINE_NOT_TAKEN[name], f"{name}: options neither passed nor declared not taken"
