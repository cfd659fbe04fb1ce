"""Orchestration of ``diagnose``: baseline, reference, variants, determinism, cost.

Order of work, cheapest checks first:

1. variants, checkpoint and prompts are checked before any engine starts
   (:mod:`.options`);
2. the baseline samples in its own process (:mod:`.sampler_process`,
   :mod:`.worker`), samples again with the same seed and scores its own
   sequences by prefill;
3. the float64 reference scores the baseline's tokens; the four pairs are
   written as run directories and decomposed (:mod:`.records`);
4. the baseline trainer scores the same sequences alone, in the full batch
   and shuffled;
5. each variant runs: trainer-side ones rescore the baseline's samples
   (no sampling, in this process), sampler-side ones sample again in their
   own process; a variant that fails is recorded with its reason and the
   others still run. Steps 3 to 5 interleave as :mod:`.schedule` orders
   them: sampler-side processes start up in groups while this process works,
   and every timed round runs while the other processes are idle;
6. every variant's total gap is compared with the baseline's (bootstrap over
   sequences) and decomposed against the reference.

Layout of ``OUT``: ``baseline/`` and ``variants/NAME/`` are probe run
directories; ``pairs/CONFIG/PAIR/`` hold the reference pairs; ``diagnose.json``
is the document the CLI prints (:class:`.document.DiagnoseDocument`, what :func:`run_diagnose` returns).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from .. import rundir
from ..errors import SamplerError
from ..probe.types import SamplerConfig
from ..progress import Progress
from .bytecode import shared_bytecode
from .determinism import sampler_checks, trainer_checks
from .document import (
    Baseline,
    Decomposition,
    Determinism,
    DiagnoseDocument,
    ReferenceForward,
    Throughput,
    VariantEntry,
    VariantSkipped,
)
from .effects import rank
from .options import DiagnoseOptions, check_empty_out, check_options, device, resolve_max_tokens
from .pairs import load_tokens, prompt_ids, score_requests
from .records import (
    BaselineRun,
    NotRan,
    Ran,
    config_record,
    launch_variant,
    rescored,
    sampler_timed,
    self_consistency,
    variant_dir,
    variant_record,
    with_timing,
)
from .reference import reference_rows
from .sampler_process import Launched, sampler_run
from .sampler_result import SamplerResult
from .schedule import AHEAD_CPU, AHEAD_GPU, Engines, Step, plan, run_plan
from .summary import finish
from .timing import SamplerServer, Timer
from .variants import Configuration, apply


def run_diagnose(opts: DiagnoseOptions, progress: Progress | None = None) -> DiagnoseDocument:
    """The whole diagnose. When it stops without a result (an error, an interrupt) it removes what it wrote,
    so the same command can run again into the same ``--out``."""
    progress = progress or Progress()
    with shared_bytecode():  # its processes compile their imports once (where Python would each time)
        info = check_options(opts)
        existed = opts.out.exists()
        try:
            with rundir.lock_run(opts.out):  # one diagnose per --out; checked again under the lock
                check_empty_out(opts.out)
                return _diagnose_locked(opts, info, progress)
        except BaseException:
            _remove_partial(opts.out, existed)
            raise


def _remove_partial(out: Path, existed: bool) -> None:
    """Everything this diagnose wrote under ``out`` (it was new, or empty, when it started)."""
    import shutil

    if (out / "diagnose.json").exists():
        return
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for child in list(out.iterdir()) if out.is_dir() else []:
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _diagnose_locked(opts: DiagnoseOptions, info, progress: Progress) -> DiagnoseDocument:
    """Sample the baseline in a process that stays up to serve timing rounds, then the rest; the process is
    closed whatever happens."""
    opts = replace(opts, sampling=replace(opts.sampling, max_tokens=resolve_max_tokens(opts, info)))
    if opts.locate is not None:
        from .locate.run import fit_budget

        opts = replace(opts, locate=fit_budget(opts.locate, info.config))
    t_start = time.perf_counter()
    base_cfg = _base_configuration(opts)

    progress.note(
        f"baseline: sampler {opts.sampler.kind}/{opts.sampler.dtype}, trainer {opts.trainer.dtype} (own process)"
    )
    base_dir = opts.out / "baseline"
    base, base_server = sampler_run(opts, base_cfg, base_dir, repeat=opts.determinism, prefill=True, serve=True)
    try:
        return _diagnose_served(opts, info, progress, base, base_server, t_start)
    finally:
        if base_server is not None:
            base_server.close()


def _diagnose_served(
    opts: DiagnoseOptions, info, progress: Progress, base: SamplerResult, server: SamplerServer | None, t_start: float
) -> DiagnoseDocument:
    """The diagnose past the baseline's sampling, while its sampler process serves timing rounds."""
    if not base.ok:
        raise SamplerError(
            f"the baseline sampler failed ({base.stage}): {base.reason}",
            hint="nothing was kept; `mismatchscope probe` with the same options shows the engine's own output",
        )
    matrix = _Matrix(opts, info, progress, base, server)
    sides = [v.side for v in matrix.todo]
    run_plan(plan(sides, matrix.ahead), matrix.engines, matrix.launch, matrix.do)
    baseline = matrix.baseline
    assert baseline is not None  # the plan's baseline step always runs
    assert matrix.decomposition is not None
    variants = matrix.variant_records()
    doc = _document(baseline, info, matrix.reference_s, matrix.decomposition, variants, matrix.determinism)
    doc = replace(doc, wall_s=time.perf_counter() - t_start)
    if opts.locate is not None:  # last: it changes no number computed above
        from .locate.configurations import locate_all

        doc = replace(doc, locate=locate_all(opts, info, baseline.reference, variants, progress))
    doc = _conclude(doc)
    write_document(opts.out, doc)
    return doc


class _Matrix:
    """The baseline's analysis and every variant, step by step as :func:`.schedule.plan` orders them: sampler
    processes start ahead of their turn while this process analyses, and each timed round runs alone."""

    def __init__(
        self, opts: DiagnoseOptions, info, progress: Progress, base: SamplerResult, server: SamplerServer | None
    ):
        self.opts, self.info, self.progress, self.base, self.server = opts, info, progress, base, server
        self.todo = [v for v in opts.variants if not v.skip_reason]  # a skipped entry is reported, never started
        self.ahead = AHEAD_GPU if device() == "cuda" else AHEAD_CPU
        self.engines = Engines()
        self.baseline: BaselineRun | None = None
        self.timer: Timer | None = None
        self.reference_s = 0.0
        self.decomposition: Decomposition | None = None
        self.determinism = Determinism()
        self.ran: dict[int, Ran | NotRan] = {}
        self.records: dict[int, VariantEntry] = {}
        self.announced = 0
        self.left: Remaining | None = None
        self.mark = 0.0
        self.last_side = ""

    def launch(self, i: int) -> Launched:
        return launch_variant(self.opts, _base_configuration(self.opts), self.todo[i], serve=self.server is not None)

    def do(self, step: Step) -> None:
        if step.kind == "baseline":
            self._baseline()
            return
        v = self.todo[step.index]
        base, timer = self.baseline, self.timer
        assert base is not None and timer is not None  # the baseline step comes before any variant's
        if step.kind == "prepare":
            self.ran[step.index] = rescored(base, apply(base.cfg, v), variant_dir(self.opts, v))
        elif step.kind == "time":
            self._announce(step.index)
            if v.side == "sampler":
                launched = self.engines.take(step.index)
                assert isinstance(launched, Launched)
                self.ran[step.index] = sampler_timed(base, timer, launched)
            elif self.records[step.index].status == "ok":  # recorded already, while engines started
                timing = timer.trainer(apply(base.cfg, v).trainer, base.record.costs)
                self.records[step.index] = with_timing(self.records[step.index], timing)
        else:
            self.records[step.index] = variant_record(base, v, self.ran.pop(step.index))

    def variant_records(self) -> list[VariantEntry]:
        """Every entry of the matrix in its order: the skipped ones with their reason, the others' records."""
        runs = iter(self.records[i] for i in range(len(self.todo)))
        return [
            VariantSkipped(v.name, v.side, v.changes, "skipped", v.skip_reason) if v.skip_reason else next(runs)
            for v in self.opts.variants
        ]

    def _baseline(self) -> None:
        opts, info, progress = self.opts, self.info, self.progress
        self.baseline, self.reference_s = _baseline(opts, info, progress, self.base)
        self.decomposition = _decomposition(self.baseline, self.base)
        self.determinism = _determinism(self.baseline, info, progress, self.base)
        requests = score_requests(opts.out / "baseline", self.baseline.prompt_ids)
        self.timer = Timer(self.server, info, opts.trainer, requests, opts.sampling)
        # before a side's first variant: a group of sampler processes starts up in about the baseline's time
        self.left = Remaining({"sampler": self.base.process_wall_s / max(1, self.ahead), "trainer": self.reference_s})
        self.mark = time.perf_counter()

    def _announce(self, i: int) -> None:
        """The variant's place in the matrix and the time the rest will take (:class:`Remaining`): each
        variant's time is the wall from its own announcement to the next one's."""
        assert self.left is not None
        now = time.perf_counter()
        if self.last_side:
            self.left.spent[self.last_side].append(now - self.mark)
        self.mark, self.last_side = now, self.todo[i].side
        rest = [self.todo[j].side for j in self._unannounced(i)]
        self.announced += 1
        v = self.todo[i]
        self.progress.note(
            f"variant {self.announced}/{len(self.todo)}: {v.name} ({v.side} side); {self.left.words(rest)}"
        )

    def _unannounced(self, i: int) -> list[int]:
        """This variant and those whose rounds are still to come, in the plan's order."""
        order = [s.index for s in plan([v.side for v in self.todo], self.ahead) if s.kind == "time"]
        return order[order.index(i) :]


def _baseline(opts: DiagnoseOptions, info, progress: Progress, base: SamplerResult) -> tuple[BaselineRun, float]:
    """The reference forward of the baseline's tokens, and the baseline's record; the forward's seconds."""
    from .reference import load_reference

    base_dir = opts.out / "baseline"
    tokens = load_tokens(base_dir)
    progress.note("reference forward of the baseline's tokens")
    t0 = time.perf_counter()
    reference = load_reference(info, trust_remote_code=opts.trainer.trust_remote_code, dtype=opts.reference_dtype)
    ids = prompt_ids(base_dir)
    ref = reference_rows(reference, tokens, ids, opts.sampling)
    reference_s = time.perf_counter() - t0
    run = Ran(base.startup_s, base.wall_s)
    record = config_record("baseline", base_dir, tokens, ref, reference, run, opts, paired=False)
    return BaselineRun(opts, _base_configuration(opts), tokens, ref, reference, ids, record), reference_s


def _decomposition(baseline: BaselineRun, base: SamplerResult) -> Decomposition:
    """The baseline's gaps, its sampler's decode against its own prefill, the shares and the routes."""
    record = baseline.record
    return Decomposition(
        total=record.gaps.total,
        sampler_vs_reference=record.gaps.sampler_vs_reference,
        trainer_vs_reference=record.gaps.trainer_vs_reference,
        sampler_decode_vs_prefill=self_consistency(baseline.opts, base, baseline.tokens),
        shares=record.decomposition,
        routes=record.routes,
    )


def _determinism(baseline: BaselineRun, info, progress: Progress, base: SamplerResult) -> Determinism:
    """Repeat sampling, prefill and the trainer alone and shuffled, bit for bit (empty without --determinism)."""
    from ..probe.trainer import HFTrainer

    opts = baseline.opts
    if not opts.determinism:
        return Determinism()
    progress.note("determinism: repeat sampling, prefill and trainer batch invariance")
    sampler = sampler_checks(base, baseline.tokens, _engine_name(opts.sampler))
    trainer = HFTrainer(info, opts.trainer)
    requests = score_requests(opts.out / "baseline", baseline.prompt_ids)
    compared = f"trainer logprobs ({opts.trainer.dtype} model, fp32 log-softmax)"
    checks = trainer_checks(trainer, requests, opts.sampling, opts.bootstrap.seed, compared)
    del trainer
    return Determinism(**sampler, **checks)


class Remaining:
    """The time the variants still to run will take: each side's mean so far, else a guess from the baseline
    (a sampler-side variant starts an engine and samples as the baseline did; a trainer-side one rescores)."""

    def __init__(self, guess: dict[str, float]) -> None:
        self.guess = guess
        self.spent: dict[str, list[float]] = {"sampler": [], "trainer": []}

    def seconds(self, sides: list[str]) -> float:
        def each(side: str) -> float:
            done = self.spent[side]
            return sum(done) / len(done) if done else self.guess[side]

        return sum(each(side) for side in sides)

    def words(self, sides: list[str]) -> str:
        s = self.seconds(sides)
        return f"about {s / 60:.0f} min left" if s >= 90 else f"about {max(5, round(s / 5) * 5):.0f} s left"


def _document(
    baseline: BaselineRun,
    info,
    reference_s: float,
    decomposition: Decomposition,
    variants: list[VariantEntry],
    determinism: Determinism,
) -> DiagnoseDocument:
    """The document of the measurements, before the ranking and the reading (:func:`_conclude`)."""
    opts, record, reference = baseline.opts, baseline.record, baseline.reference
    return DiagnoseDocument(
        checkpoint=str(info.path),
        out=str(opts.out),
        device=device(),
        reference=ReferenceForward(reference.dtype, reference.note, reference_s, reference.moe_layers),
        baseline=Baseline(
            sampler=opts.sampler,
            trainer=opts.trainer.to_dict(),
            env=opts.env,
            sampling=opts.sampling,
            run_dir=str(opts.out / "baseline"),
            metrics=record.gaps.total.metrics,
            throughput=Throughput(record.costs, None),
            certified=record.certified,
        ),
        decomposition=decomposition,
        variants=variants,
        determinism=determinism,
        wall_s=0.0,
        no_effect=[],
        pareto_front=[],
        reading="",
    )


def _conclude(doc: DiagnoseDocument) -> DiagnoseDocument:
    """The ranking, the price of zero and the reading, from the numbers above."""
    from .price import zero_price

    doc = rank(doc)
    doc = replace(doc, zero_price=zero_price(doc))
    return finish(doc)


def write_document(out: Path, doc: DiagnoseDocument) -> None:
    """``OUT/diagnose.json``: the document, as ``--format json`` prints it."""
    from ..documents import json_text

    rundir.atomic_write_bytes(out / "diagnose.json", json_text(doc).encode())


def _base_configuration(opts: DiagnoseOptions) -> Configuration:
    return Configuration(opts.sampler, opts.trainer, dict(opts.env))


def _engine_name(sampler: SamplerConfig) -> str:
    return {"vllm": "vLLM", "hf": "transformers generate"}.get(sampler.kind, sampler.kind)
