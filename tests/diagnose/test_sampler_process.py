"""A configuration's sampler process that runs out of time: named as a timeout, and only that variant marked.

The worker here is a process that never answers (it sleeps), with a time limit of one second: what a sampler
that hangs (an engine stuck loading weights) leaves. It once read "the sampler process died (exit code -9):
Loading weights: 100%|..." after the timing server killed it, and the whole diagnose failed with it.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from types import SimpleNamespace

import pytest

from mismatchscope.diagnose import records, sampler_process
from mismatchscope.diagnose.document import Costs, LocateNotRun, SamplerFailed, VariantOk, VariantSkipped
from mismatchscope.diagnose.sampler_result import WorkerSpec
from mismatchscope.diagnose.variants import Configuration, Variant
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig

SLEEPER = [sys.executable, "-c", "import sys, time; print('Loading weights: 100%|#####|', flush=True); time.sleep(60)"]


@pytest.fixture
def hanging(monkeypatch):
    monkeypatch.setattr(sampler_process, "WORKER", SLEEPER)
    monkeypatch.setattr(sampler_process, "WORKER_TIMEOUT_S", 1)

    def spec(opts, cfg, out, repeat, prefill):
        return WorkerSpec(
            "",
            "",
            str(out),
            SamplingConfig(),
            cfg.sampler,
            cfg.trainer,
            {},
            repeat,
            prefill,
            str(out.parent / "r.json"),
            0,
        )

    monkeypatch.setattr(sampler_process, "_spec", spec)


@pytest.mark.parametrize("serve", [False, True], ids=["run to its end", "kept up to time rounds"])
def test_a_sampler_that_runs_out_of_time_is_named_a_timeout(tmp_path, hanging, serve):
    cfg = Configuration(SamplerConfig(), TrainerConfig())
    result, server = sampler_process.sampler_run(None, cfg, tmp_path / "v", repeat=False, prefill=False, serve=serve)  # type: ignore[arg-type]
    assert server is None
    assert (result.status, result.stage) == ("failed", "timeout")
    assert result.reason == f"no result within 1 s: the sampler process was stopped (its output: {result.log})"


def test_a_timed_out_variant_is_marked_timed_out_and_the_others_stand(tmp_path, hanging, monkeypatch):
    base_cfg = Configuration(SamplerConfig(), TrainerConfig())

    class _Opts:
        out = tmp_path

    record = SimpleNamespace(costs=Costs(0, None, None, None, None, None, None))
    base = records.BaselineRun(_Opts(), base_cfg, {}, (None, {}), None, [], record)  # type: ignore[arg-type]
    timer = records.Timer(None, None, None, [], None)
    v = Variant("sampler.dtype=float32", {"sampler.dtype": "float32"})
    launched = records.launch_variant(base.opts, base_cfg, v, serve=False)  # the steps diagnose's schedule runs
    rec = records.variant_record(base, v, records.sampler_timed(base, timer, launched))
    assert isinstance(rec, SamplerFailed)
    assert rec.status == "timed out" and rec.stage == "timeout" and rec.reason.startswith("no result within")
    other = VariantSkipped("trainer.attn=eager", "trainer", {}, "skipped", "not on this device")
    assert _failed_lines([rec, other]) == "sampler.dtype=float32 timed out (stopped without a result)"


def _failed_lines(variants) -> str:
    from mismatchscope.diagnose.summary import _failed

    return "; ".join(_failed(SimpleNamespace(variants=variants)))  # type: ignore[arg-type]


def test_ctrl_c_during_the_localisations_keeps_what_finished_and_says_so(tmp_path, monkeypatch):
    """Ctrl-C during ``diagnose --locate`` once removed every measurement already made and called it a failure:
    the localisations that finished stay, the rest are marked interrupted, and the document is still written."""
    from mismatchscope.diagnose.locate import configurations

    calls = []

    def one(name, *args):
        calls.append(name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return SimpleNamespace(configuration=name, status="ok")  # a localisation that finished stays as it is

    monkeypatch.setattr(configurations, "_one", one)

    class _Opts:
        sampler, trainer, env, out = SamplerConfig(), TrainerConfig(), {}, tmp_path
        variants = [
            Variant("trainer.dtype=bfloat16", {"trainer.dtype": "bfloat16"}),
            Variant("x", {"trainer.dtype": "float16"}),
        ]

    unread = dict.fromkeys(f.name for f in fields(VariantOk))
    variants = [VariantOk(**{**unread, "name": v.name, "side": "trainer", "status": "ok"}) for v in _Opts.variants]
    notes = []
    progress = type("P", (), {"note": lambda self, m: notes.append(m)})()
    entries = configurations.locate_all(_Opts(), None, None, variants, progress)
    assert [(e.configuration, e.status) for e in entries] == [
        ("baseline", "ok"),
        ("trainer.dtype=bfloat16", "interrupted"),
        ("x", "interrupted"),
    ]
    from mismatchscope.diagnose.locate.document import INTERRUPTED

    assert all(isinstance(e, LocateNotRun) and e.status == INTERRUPTED for e in entries[1:])
    assert entries[1].reason == "interrupted (Ctrl-C) before this localisation finished"  # type: ignore[union-attr]
