"""Fixtures shared by every test module (helpers live in tests/helpers.py), and how tests are sorted.

* Every test that needs a real vLLM engine (marker ``vllm``) is also ``slow``: an engine takes 15-30 s to
  start on two cores. So is every test in :data:`SLOW_TESTS` or using a fixture in :data:`SLOW_FIXTURES`
  (measured: over ~5 s of CPU each). ``pytest -m "not slow"`` is the fast lane.
* Under pytest-xdist with ``--dist loadgroup``, tests that share an expensive fixture stay on one worker:
  the in-process engines and the vLLM server (``vllm_sampler``, ``vllm_server``) form one group, and a
  module whose tests share a module-scoped fixture of its own is one group. Everything else spreads test
  by test, the command-line probes too: each starts its own engine process, and two of them on two cores
  finish sooner side by side than one after the other (measured: 60 s against 87 s for two probes of the
  sample).
"""

from __future__ import annotations

import os

import pytest

from mismatchscope.schema import write_table
from tests.helpers import pairs
from tests.inputs import ROWS

# vLLM reads these when an engine starts, here and in every probe the tests start. In-process engines need no
# __main__ guard, share the test process, and start in two thirds of the time the engine's own processes take
# (measured: 34 s against 48 s for the sample's probe): the tests about those processes ask for them
# (VLLM_ENABLE_V1_MULTIPROCESSING=1). 1 GiB of KV cache is plenty.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

SLOW_TESTS = frozenset(
    {
        # a test id, with or without its parameters; CPU seconds measured (test, its fixtures, its child processes)
        "tests/probe/test_zero.py::test_a_fresh_zero_probe_of_the_dense_model_certifies_all_three_pairings",  # 6 s
        "tests/probe/test_zero.py::test_a_fresh_zero_probe_of_the_moe_model_certifies_logprobs_and_routes",  # 6 s
        "tests/live/test_recorder.py::test_killed_loop_leaves_finished_steps_readable_and_the_run_incomplete",  # 15 s
        "tests/live/test_recorder.py::test_rl_loop_recorded_every_step_and_read_back",  # 18 s
        "tests/probe/test_engine_log.py::test_diagnoses_model_loading_prints_only_the_tools_line",  # 8 s, torch's import
        "tests/probe/test_options.py::test_an_hf_probe_with_aliases_records_the_canonical_dtypes",  # 4 s, in this process
        "tests/probe/test_options.py::test_vllm_engine_args_are_checked_against_vllm",  # 5 s, in this process
        "tests/project/test_docs.py::test_cli_reference_is_generated_from_help",  # 5 s
        "tests/test_outputs.py::test_report_html_on_a_full_device",  # 6 s
        "tests/test_reader.py::test_a_lone_surrogate_in_the_metadata_is_printed_as_its_escape",  # 6 s
        "tests/render/test_figures.py::test_an_infinite_bucket_mean_is_drawn_and_marked",  # 6 s
        "tests/test_outputs.py::test_an_output_may_not_replace_a_file_of_the_input_run",  # 6 s
        "tests/test_outputs.py::test_pictures_may_go_into_the_input_run_folder",  # 5 s
        "tests/test_outputs.py::test_pictures_never_replace_an_input",  # 10 s
        "tests/render/test_figures.py::test_gate_plots_and_html",  # 6 s (test_report_plots_and_html keeps the page in the fast lane)
        "tests/project/test_wheel.py::test_the_wheel_carries_the_sample",  # builds a wheel
        "tests/analysis/test_worst.py::test_trace_pictures",  # 7 s
        "tests/probe/test_turns.py::test_messages_mode_records_the_trainer_s_ids_beside_the_sampler_s",  # 20 s, hf probe
        "tests/probe/test_turns.py::test_a_killed_multi_turn_probe_resumes_from_its_next_turn",  # 30 s, two probes
    }
)
"""Slow tests named here rather than marked where they stand, so the list reads as one measurement."""

SLOW_FIXTURES = frozenset(
    {
        "base_run",
        "lag_run",  # tests/probe/test_policy_lag.py: two probes of the tiny checkpoint, 10 s in this process
        "secret_run",  # tests/probe/test_provenance.py: a probe of the tiny checkpoint under secrets, 5 s
        "full_distributions",  # tests/doctor/test_run.py: torch, transformers and two float32 forwards, 8-10 s
        "tokens_run",  # tests/probe/test_turns.py: a three-turn probe with the transformers sampler, 20 s
    }
)
"""Fixtures that run a probe or train a model: every test using one is slow."""

ENGINE_FIXTURES = frozenset({"vllm_sampler", "vllm_server"})
"""Session fixtures holding real engines: one set per worker, so their tests go to one worker."""


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module- or session-scoped fixture its own module declares (not a conftest's)."""
    info = getattr(item, "_fixtureinfo", None)
    module = getattr(item, "module", None)
    if info is None or module is None:
        return False
    for defs in info.name2fixturedefs.values():
        fixturedef = defs[-1]
        own = getattr(fixturedef.func, "__module__", None) == module.__name__
        if own and fixturedef.scope in ("module", "session"):
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        listed = not SLOW_TESTS.isdisjoint((item.nodeid, item.nodeid.split("[")[0]))
        uses_slow = not SLOW_FIXTURES.isdisjoint(item.fixturenames)
        slow = item.get_closest_marker("vllm") is not None or listed or uses_slow
        if slow and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if ENGINE_FIXTURES & set(item.fixturenames):
            # the in-process engines are per worker: their tests on two workers would start every engine twice
            _group(config, item, "vllm-engines")
        elif _shares_a_module_fixture(item):
            _group(config, item, item.nodeid.split("::")[0])
    # Modules that start engines first, the rest after them, each in its own order: the longest pieces of work
    # then start at once, and the quick tests fill the gaps on both workers instead of one engine module
    # running alone at the end.
    engine_modules = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("vllm") is not None}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in engine_modules)


def _group(config: pytest.Config, item: pytest.Item, name: str) -> None:
    """Mark ``item`` for the ``name`` group, and give it the id pytest-xdist's scheduler reads the group from.

    pytest-xdist appends ``@name`` to ``item._nodeid``; pytest 9.2 reads an item's id from ``item._id``
    instead, so the scheduler saw no group at all and spread a group's tests over the workers, each
    building the group's engines and runs again. The id is set here where pytest keeps it.
    """
    item.add_marker(pytest.mark.xdist_group(name))
    if not getattr(config.option, "loadgroup", False) or "@" in item.nodeid or not hasattr(item, "_id"):
        return
    from _pytest.nodeid import NodeId

    item._id = NodeId.parse(f"{item.nodeid}@{name}")  # type: ignore[attr-defined]


@pytest.fixture
def write(tmp_path):
    """write(columns, name="x.parquet", metadata=None) -> path, through the real schema."""

    def _write(columns: dict, name: str = "pairs.parquet", metadata: dict | None = None):
        return write_table(tmp_path / name, columns, metadata)

    return _write


@pytest.fixture
def data(write):
    """A hand-built token-pair file (``tests.helpers.ROWS``) for the refusals around a command's work."""
    return write(pairs(ROWS))


@pytest.fixture
def runs(tmp_path, write):
    """(baseline, candidate): two hand-built files a gate compares, the candidate's last token moved."""
    base = write(pairs(ROWS), "base.parquet")
    cand = write(pairs(ROWS[:4] + [(2, 1, 0.4, 0.5)]), "cand.parquet")
    return base, cand


REQUIRED_IN_CI = ("torch", "transformers", "vllm", "trl", "matplotlib", "jsonschema", "ruptures")
"""What the README's test command installs: under ``CI=true`` a missing or broken one fails the run instead of
skipping the tests that need it (hundreds of them would skip and the run would still pass)."""

REQUIRED_FILES_IN_CI = ("sample_data/tiny-qwen3/config.json", "sample_data/tiny-qwen3-moe/config.json")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def pytest_configure(config: pytest.Config) -> None:
    """Under ``CI=true``, import every required engine once (in the controller, not in each worker) and stop
    the run with the first one missing or broken, before any test starts."""
    if not _in_ci() or hasattr(config, "workerinput"):
        return
    import importlib
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    missing = [name for name in REQUIRED_FILES_IN_CI if not (repo / name).is_file()]
    environ = dict(os.environ)  # importing trl sets VLLM_LOGGING_LEVEL=ERROR (and torch a few of its own):
    for name in REQUIRED_IN_CI:  # the workers and every engine they start must not inherit that
        try:
            importlib.import_module(name)
        except Exception as exc:  # an import that breaks (not only a missing one) skips tests just the same
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    os.environ.clear()
    os.environ.update(environ)
    if missing:
        pytest.exit(f"CI=true but the test command's install is incomplete: {'; '.join(missing)}", returncode=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Under ``CI=true`` a test skipped because a required module could not be imported fails instead."""
    outcome = yield
    report = outcome.get_result()
    if not (_in_ci() and report.skipped and isinstance(report.longrepr, tuple)):
        return
    reason = str(report.longrepr[2])
    if any(f"could not import '{name}'" in reason for name in REQUIRED_IN_CI):
        report.outcome = "failed"
        report.longrepr = f"CI=true: {reason}"
