"""Results are typed: a function returns ``dict[str, Any]`` (or a bare ``dict``) only at the JSON edge.

The edge is declared where it is, with :func:`mismatchscope.documents.json_edge`; the functions listed in
``PENDING`` still return untyped dicts and are to be typed. The list may only shrink: an entry that no longer
offends fails too, so it is removed when its function is typed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mismatchscope

PACKAGE = Path(mismatchscope.__file__).parent

PENDING: frozenset[str] = frozenset(
    {
        "analysis/masks.py:MaskAccumulator.finish",
        "analysis/sums.py:token_means",
        "certify/compare.py:PairingResult.earliest_summary",
        "certify/run.py:_manifest",
        "certify/scope.py:scope_of",
        "checks.py:json_object",
        "cli/_engine_options.py:engine_args",
        "doctor/causes/persists_in_float32.py:_sides",
        "doctor/retokenized.py:_drift",
        "gate/checks.py:Check.to_dict",
        "importers/__init__.py:_manifest",
        "importers/__init__.py:_provenance",
        "importers/_base.py:ImportResult.to_dict",
        "importers/_base.py:Importer.semantics",
        "importers/_mask.py:add_turns",
        "importers/_mask.py:explicit",
        "importers/_records.py:parse_record",
        "importers/generic.py:GenericImporter.semantics",
        "importers/nemo_rl.py:NemoRLImporter.semantics",
        "importers/prime_rl.py:PrimeRLImporter.semantics",
        "importers/roll.py:RollImporter.semantics",
        "importers/routes.py:_manifest",
        "importers/skyrl.py:SkyRLImporter.semantics",
        "importers/skyrl.py:read_batch",
        "importers/slime.py:SlimeImporter._rollout",
        "importers/slime.py:SlimeImporter.semantics",
        "importers/stack_pickle.py:_consolidated",
        "importers/stack_pickle.py:load_tensordict",
        "importers/verl.py:VerlImporter.semantics",
        "live/inputs.py:_turn_columns",
        "live/inputs.py:strict_meta",
        "live/recorder.py:Recorder._open_record",
        "live/recorder.py:_provenance_record",
        "live/verl_batch.py:verl_step",
        "probe/checkpoint.py:CheckpointInfo.record",
        "probe/checkpoint.py:_read_config",
        "probe/checkpoint.py:text_config",
        "probe/columns.py:with_row_columns",
        "probe/command.py:_config",
        "probe/command.py:_fingerprint",
        "probe/command.py:_safe_engine_args",
        "probe/command.py:_turns_config",
        "probe/engine_checks.py:_declared_vllm_engine_args",
        "probe/hf_model.py:model_description",
        "probe/hf_model.py:torch_versions",
        "probe/policy_lag.py:TrainerCheckpoint.record",
        "probe/policy_lag.py:TrainerCheckpoint.semantics",
        "probe/policy_lag.py:recorded_trainer_checkpoint",
        "probe/provenance.py:_sent",
        "probe/rescore.py:_config",
        "probe/rescore_import.py:_config",
        "probe/rescore_import.py:_token_columns",
        "probe/samplers/base.py:Sampler.describe",
        "probe/samplers/hf_generate.py:HFGenerateSampler.describe",
        "probe/samplers/hf_zero.py:HFZeroSampler.describe",
        "probe/samplers/trl_server.py:TRLServerSampler._body",
        "probe/samplers/trl_server.py:TRLServerSampler._model_config",
        "probe/samplers/trl_server.py:TRLServerSampler.describe",
        "probe/samplers/vllm_offline.py:VLLMOfflineSampler.describe",
        "probe/samplers/vllm_offline.py:VLLMOfflineSampler.engine_args",
        "probe/samplers/vllm_offline.py:_device_info",
        "probe/samplers/vllm_server.py:VLLMServerSampler._body",
        "probe/samplers/vllm_server.py:VLLMServerSampler._served_model",
        "probe/samplers/vllm_server.py:VLLMServerSampler.describe",
        "probe/scoring.py:lag_fingerprint",
        "probe/scoring.py:semantics",
        "probe/tokenizer.py:_read_json_object",
        "probe/trainer.py:HFTrainer.describe",
        "probe/trainer.py:LogitTransform.to_dict",
        "probe/turns.py:TurnsConfig.record",
        "probe/types.py:SamplerConfig.to_dict",
        "probe/types.py:SamplingConfig.to_dict",
        "probe/types.py:TrainerConfig.to_dict",
        "probe/writer.py:RunDir.open",
        "probe/writer.py:RunDir.read_manifest",
        "probe/writer.py:open_session",
        "probe/writer.py:total_timings",
        "reader/metadata.py:read_metadata",
        "reader/sources.py:Source.run_config",
        "routing/layout.py:RoutingMeta.to_dict",
        "rules/base.py:RuleInstance.params",
        "rundir/manifest.py:read_json",
        "rundir/manifest.py:read_manifest",
        "schema.py:decode_metadata",
        "schema.py:token_write_options",
        "timeline/changes.py:methods",
    }
)


def _untyped(returns: ast.expr | None) -> bool:
    """A return annotation that says "some dict": ``dict``, ``dict[str, Any]``, either ``| None``."""
    if returns is None:
        return False
    text = ast.unparse(returns).replace(" ", "").strip("'\"")
    parts = set(text.split("|")) - {"None"}
    return bool(parts) and parts <= {"dict", "dict[str,Any]", "Dict[str,Any]"}


def _is_edge(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d).split(".")[-1] == "json_edge" for d in fn.decorator_list)


def _offenders() -> set[str]:
    found: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(PACKAGE).as_posix()
        for scope, fn in _functions(tree):
            if _untyped(fn.returns) and not _is_edge(fn):
                found.add(f"{rel}:{scope}{fn.name}")
    return found


def _functions(tree: ast.AST, scope: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield scope, node
            yield from _functions(node, f"{scope}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{scope}{node.name}.")


def test_annotation_reading():
    # what counts as untyped, on annotations written both ways
    assert _untyped(ast.parse("dict[str, Any]", mode="eval").body)
    assert _untyped(ast.parse("dict[str, Any] | None", mode="eval").body)
    assert _untyped(ast.parse("dict", mode="eval").body)
    assert not _untyped(ast.parse("dict[str, float]", mode="eval").body)
    assert not _untyped(ast.parse("None", mode="eval").body)


def test_no_untyped_result_outside_the_json_edge():
    new = sorted(_offenders() - PENDING)
    assert not new, "return a typed result, or mark the JSON edge with @json_edge:\n" + "\n".join(new)


def test_pending_only_shrinks():
    stale = sorted(PENDING - _offenders())
    assert not stale, "typed now: remove from PENDING:\n" + "\n".join(stale)
