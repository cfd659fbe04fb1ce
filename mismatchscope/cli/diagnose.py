"""``diagnose``: the baseline (every probe option), its variants, and one library call.

Exit codes: 0 every variant ran; 3 the diagnose finished but at least one
variant failed (its engine did not start, or its process died: the reason is
in the output); 2 a usage or input error, before any engine starts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UsageError
from ._options import FormatOpt
from ._output import OutputFormat, emit_json, stdout_console

EXIT_VARIANT_FAILED = 3


def diagnose(
    checkpoint: Optional[Path] = typer.Argument(None, help="A local checkpoint folder. Default: the bundled sample model.", show_default=False),
    prompts: Optional[Path] = typer.Option(None, "--prompts", "-p", help="JSONL prompts. Default: the bundled sample prompts."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output directory. Default: runs/diagnose-<time>."),
    vary: Optional[List[str]] = typer.Option(None, "--vary", metavar="KEY=VALUE", help="One variant changing one thing from the baseline: sampler.FIELD, sampler.engine.NAME, sampler.env.NAME or trainer.FIELD. Repeatable."),
    matrix: Optional[Path] = typer.Option(None, "--matrix", help="TOML file of named variants ([variant.NAME] tables of KEY = VALUE)."),
    sampler_dtype: str = typer.Option("float16", "--sampler-dtype", help="Baseline sampler dtype."),
    trainer_dtype: str = typer.Option("float32", "--trainer-dtype", help="Baseline trainer dtype."),
    temperature: float = typer.Option(1.0, "--temperature", "-T", min=0.0),
    top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0),
    top_k: int = typer.Option(-1, "--top-k"),
    n: int = typer.Option(4, "-n", min=1, help="Samples per prompt."),
    max_tokens: int = typer.Option(0, "--max-tokens", min=0, help="Tokens per completion (0: up to 256 within the context)."),
    top_k_logprobs: int = typer.Option(5, "--top-k-logprobs", min=0),
    seed: int = typer.Option(0, "--seed", help="Sampling seed (and the bootstrap's)."),
    logprobs_mode: str = typer.Option("processed_logprobs", "--logprobs-mode"),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs"),
    enforce_eager: bool = typer.Option(True, "--enforce-eager/--no-enforce-eager"),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len"),
    sampler_fp32_lm_head: bool = typer.Option(False, "--sampler-fp32-lm-head"),
    trainer_fp32_lm_head: bool = typer.Option(False, "--trainer-fp32-lm-head"),
    engine_arg: Optional[List[str]] = typer.Option(None, "--engine-arg", metavar="KEY=VALUE", help="Baseline vllm.LLM argument (VALUE may be JSON). Repeatable."),
    attn_implementation: Optional[str] = typer.Option(None, "--attn-implementation", help="Baseline trainer attention."),
    trainer_batch_tokens: int = typer.Option(8192, "--trainer-batch-tokens", min=1),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code"),
    allow_pickle: bool = typer.Option(False, "--allow-pickle"),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Bootstrap resamples over sequences."),
    confidence: float = typer.Option(0.95, "--confidence", min=0.5, max=0.9999),
    determinism: bool = typer.Option(True, "--determinism/--no-determinism", help="Repeat/alone/shuffled checks."),
    plots: Optional[Path] = typer.Option(None, "--plots", help="Write the mismatch-vs-throughput picture (PNG) here."),
    html: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML summary here."),
    format: OutputFormat = FormatOpt,
) -> None:
    """Where the mismatch comes from (decomposition against a float64 reference), what each change does to it
    (variants with bootstrap intervals), whether the numbers are repeatable, and what each configuration costs."""
    from ..diagnose.effects import Bootstrap
    from ..diagnose.run import DiagnoseOptions, check_options, run_diagnose
    from ..diagnose.variants import Configuration, default_matrix, load_matrix, parse_vary
    from ..probe.types import SamplerConfig, SamplingConfig, TrainerConfig
    from ..bundled import sample_dir
    from .probe import _Bars, _engine_args, _engine_env

    if logprobs_mode not in ("processed_logprobs", "raw_logprobs"):
        raise UsageError(f"--logprobs-mode {logprobs_mode!r}", hint="use processed_logprobs or raw_logprobs")
    variants = parse_vary(vary or [])
    if matrix is not None:
        variants += load_matrix(matrix)
    sampler = SamplerConfig(kind="vllm", dtype=sampler_dtype, max_num_seqs=max_num_seqs, enforce_eager=enforce_eager,
                            max_model_len=max_model_len, fp32_lm_head=sampler_fp32_lm_head,
                            engine_args=_engine_args(engine_arg))
    trainer = TrainerConfig(dtype=trainer_dtype, attn_implementation=attn_implementation, fp32_lm_head=trainer_fp32_lm_head,
                            batch_tokens=trainer_batch_tokens, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle)
    if not variants:
        variants = default_matrix(_device(), Configuration(sampler, trainer))
    checkpoint = checkpoint or sample_dir() / "tiny-qwen3"
    opts = DiagnoseOptions(
        checkpoint=checkpoint, prompts=prompts or sample_dir() / "prompts.jsonl",
        out=out or Path("runs") / time.strftime("diagnose-%Y%m%d-%H%M%S"),
        sampling=SamplingConfig(temperature=temperature, top_p=top_p, top_k=top_k, n=n, max_tokens=max_tokens,
                                top_k_logprobs=top_k_logprobs, seed=seed, logprobs_mode=logprobs_mode),  # type: ignore[arg-type]
        sampler=sampler, trainer=trainer, variants=variants,
        bootstrap=Bootstrap(resamples=bootstrap, confidence=confidence, seed=seed), determinism=determinism,
    )
    check_options(opts)
    _engine_env()
    with _Bars(enabled=True) as bars:
        payload = run_diagnose(opts, bars)
    if plots is not None or html is not None:
        from ..diagnose.plot import write_html, write_pareto

        png = write_pareto(payload, plots or opts.out)
        payload["plots"] = {"pareto": str(png)}
        if html is not None:
            write_html(payload, html, png)
            payload["html"] = str(html)
    if format is OutputFormat.json:
        emit_json(payload)
    else:
        from ..diagnose.output import render

        render(stdout_console(), payload)
    if any(v["status"] == "failed" for v in payload["variants"]):
        raise typer.Exit(EXIT_VARIANT_FAILED)


def _device() -> str:
    """cuda when torch sees a GPU, else cpu (torch is only imported here, after the options parsed)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - the probe extra is missing; check_options will say so
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"



