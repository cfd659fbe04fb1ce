"""Every option of every command reaches the library: a parameter the command never reads, or an engine option
looked up by a name the command no longer has, fails here instead of taking its default in silence.

A command reads a parameter by its name in the command's body, as ``params["name"]`` where the parsed line
travels as a mapping (probe's options), or through ``EngineValues.of`` (the engine options of probe, rescore and
diagnose, whose names are the fields of ``EngineValues``, less those the command declares it does not take).
Renaming a parameter on one side only breaks one of these.
"""

from __future__ import annotations

import ast
import inspect

import pytest

from mismatchscope.cli.main import COMMANDS, _command
from mismatchscope.probe.engine_config import EngineValues

NOT_TAKEN = {"probe": "", "rescore": "RESCORE_NOT_TAKEN", "diagnose": "DIAGNOSE_NOT_TAKEN"}
"""the commands that build engine configs, and the name of the options each declares it does not take."""


def _function(fn) -> ast.FunctionDef:
    tree = ast.parse(inspect.getsource(inspect.getmodule(fn)))
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == fn.__name__)


def _read(fn) -> set[str]:
    """The names the command reads: in its body, and as string keys of a subscript anywhere in its module."""
    body = ast.Module(body=_function(fn).body, type_ignores=[])
    names = {n.id for n in ast.walk(body) if isinstance(n, ast.Name)}
    module = ast.parse(inspect.getsource(inspect.getmodule(fn)))
    keys = {
        n.slice.value
        for n in ast.walk(module)
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)
    }
    return names | keys


def _parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters) - {"ctx"}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_parameter_is_read(name):
    fn = _command(name)
    read = _read(fn) | (EngineValues.names() if name in NOT_TAKEN else set())
    unread = _parameters(fn) - read
    assert not unread, f"{name}: {sorted(unread)} never reach the library"


@pytest.mark.parametrize("name", sorted(NOT_TAKEN))
def test_every_engine_option_is_a_parameter_or_declared_not_taken(name):
    """The static half of ``EngineValues.of``'s own check: a command's parameter renamed without the field
    (or the field without the parameter) leaves an engine option that is neither."""
    fn = _command(name)
    declared = getattr(inspect.getmodule(fn), NOT_TAKEN[name]) if NOT_TAKEN[name] else frozenset()
    params = _parameters(fn)
    assert not (EngineValues.names() - declared) - params, name
    assert not declared & params, f"{name} declares {sorted(declared & params)} not taken, but takes them"
    assert declared <= EngineValues.names(), sorted(declared - EngineValues.names())


def test_a_renamed_parameter_fails_here():
    """The checks above can fail: probe's ``top_p`` renamed to ``nucleus`` in its signature only."""

    def renamed(ctx, nucleus: float = 1.0):  # probe's signature after the rename, its body unchanged
        return ctx.params

    assert "top_p" in EngineValues.names() - _parameters(renamed)  # the engine option has no parameter
    assert "nucleus" not in _read(renamed) | EngineValues.names()  # and the parameter reaches nothing
