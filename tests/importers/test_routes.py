"""``import --routes``: every stack's route encoding lands on the same ``routes/`` rows.

The model: 4 decoder layers, layer 0 dense (``mlp_only_layers: [0]``), MoE
layers 1-3, top-2 of 16 experts. Two sequences: 5 (3 prompt + 4 completion
tokens: 6 route rows, input positions 0..5) and 9 (2 + 3: 4 rows). Each
fixture writes those same routes in one source's exact encoding.
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import ImportFormatError, UsageError
from mismatchscope.importers import import_run
from mismatchscope.importers.routes import RoutesOptions
from mismatchscope.routing.layout import RoutingMeta
from tests.helpers import cli
from tests.inputs import error_line

CONFIG = {
    "model_type": "qwen3_moe",
    "num_hidden_layers": 4,
    "mlp_only_layers": [0],
    "num_experts": 16,
    "num_experts_per_tok": 2,
}
MOE = (1, 2, 3)
SEQS = {5: ([11, 12, 13], [21, 22, 23, 24]), 9: ([31, 32], [41, 42, 43])}


def moe_routes(sid: int) -> np.ndarray:
    """``[rows, 3 MoE layers, 2]``: a in 1..15 and (a + 7) % 16: never two equal ids, never both 0."""
    prompt, completion = SEQS[sid]
    rows = len(prompt) + len(completion) - 1
    a = (np.arange(rows)[:, None] + 3 * np.arange(3)[None, :] + sid) % 15 + 1
    return np.stack([a, (a + 7) % 16], axis=-1)


def decoder_routes(sid: int, dtype=np.int32) -> np.ndarray:
    """The engines' layout: every decoder layer, the dense layer 0 all zeros."""
    moe = moe_routes(sid)
    full = np.zeros((len(moe), 4, 2), dtype=dtype)
    full[:, list(MOE)] = moe
    return full


def npy_b64(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, arr)
    return base64.b64encode(buf.getvalue()).decode()


def base(sid: int) -> dict:
    prompt, completion = SEQS[sid]
    return {"sequence_id": sid, "prompt_token_ids": prompt, "completion_token_ids": completion}


def sglang(sid):  # base64 of raw int32, no shape
    return {**base(sid), "routed_experts": base64.b64encode(decoder_routes(sid).astype("<i4").tobytes()).decode()}


def vllm_npy(sid):  # the HTTP choice: base64 .npy, uint8 (16 experts)
    return {**base(sid), "routed_experts": npy_b64(decoder_routes(sid, np.uint8))}


def vllm_lists(sid):  # the offline CompletionOutput array, written as lists
    return {**base(sid), "routed_experts": decoder_routes(sid, np.uint16).tolist()}


def vllm_021(sid):  # prompt rows and completion rows apart, MoE ordinals, int16 lists; a placeholder last row
    prompt = SEQS[sid][0]
    moe = moe_routes(sid).astype(np.int16)
    completion = np.concatenate([moe[len(prompt) :], np.zeros((1, 3, 2), np.int16)])
    return {**base(sid), "prompt_routed_experts": moe[: len(prompt)].tolist(), "routed_experts": completion.tolist()}


def verl(sid):  # one sample of the left-padded int16 batch: prompt padded to 5, response to 4, placeholder row
    prompt = SEQS[sid][0]
    batch_row = np.zeros((5 + 4, 4, 2), np.int16)
    full = decoder_routes(sid, np.int16)
    batch_row[5 - len(prompt) : 5 - len(prompt) + len(full)] = full
    return {**base(sid), "routed_experts": batch_row.tolist(), "prompt_pad": 5}


def slime(sid):  # Sample.rollout_routed_experts: (len(tokens) - 1, layers, k) int32
    return {**base(sid), "rollout_routed_experts": decoder_routes(sid).tolist()}


def prime_rl(sid):
    full = decoder_routes(sid, np.uint8)
    return {
        **base(sid),
        "routed_experts": {
            "data": base64.b64encode(full.tobytes()).decode(),
            "shape": list(full.shape),
            "start": 0,
            "dtype": "uint8",
        },
    }


SOURCES = {
    "sglang": sglang,
    "vllm": vllm_npy,
    "vllm-lists": vllm_lists,
    "vllm-0.21": vllm_021,
    "verl": verl,
    "slime": slime,
    "prime-rl": prime_rl,
}


def encoding(name: str) -> str:
    return "vllm" if name == "vllm-lists" else name


def write_tokens(path, sids=(5, 9)):
    with open(path, "w") as fh:
        for sid in sids:
            n = len(SEQS[sid][1])
            fh.write(
                json.dumps(
                    {
                        "sequence_id": sid,
                        "token_ids": SEQS[sid][1],
                        "sampler_logprobs": [-0.5] * n,
                        "trainer_logprobs": [-0.6] * n,
                    }
                )
                + "\n"
            )


@pytest.fixture
def dumps(tmp_path):
    write_tokens(tmp_path / "tokens.jsonl")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path


def run(dumps, fmt: str, records: list[dict], out: str = "out", config=None):
    (dumps / "routes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = dumps / "config.json"
    if config is not None:
        cfg = dumps / "other-config.json"
        cfg.write_text(json.dumps(config))
    return import_run(
        "jsonl", dumps / "tokens.jsonl", dumps / out, route_options=RoutesOptions(dumps / "routes.jsonl", fmt, cfg)
    )


def expected_rows() -> list[dict]:
    """Per input position: layer 0 null (dense), layers 1-3 the MoE ids; token_position = ip - (prompt - 1)."""
    rows = []
    for sid in (5, 9):
        prompt, _ = SEQS[sid]
        for ip, moe in enumerate(moe_routes(sid).tolist()):
            tp = ip - (len(prompt) - 1)
            rows.append(
                {
                    "sequence_id": sid,
                    "input_position": ip,
                    "token_position": tp if tp >= 0 else None,
                    "sampler_experts": [None, *moe],
                    "trainer_experts": None,
                }
            )
    return rows


def read_routes(out) -> list[dict]:
    t = pq.read_table(out / "routes")
    return t.select(
        ["sequence_id", "input_position", "token_position", "sampler_experts", "trainer_experts"]
    ).to_pylist()


@pytest.mark.parametrize("name", SOURCES)
def test_every_source_imports_to_the_same_rows(dumps, name):
    run(dumps, encoding(name), [SOURCES[name](5), SOURCES[name](9)])
    out = dumps / "out"
    assert read_routes(out) == expected_rows()
    ids_type = pq.read_schema(out / "routes" / "part-00000.parquet").field("sampler_experts").type
    assert ids_type.value_type.value_type == pa.uint8()  # 16 experts: the narrowest id type
    manifest = json.loads((out / "manifest.json").read_text())
    meta = RoutingMeta.from_dict(manifest["routing"])
    assert (meta.num_layers, meta.moe_layers, meta.num_experts, meta.top_k) == (4, MOE, 16, 2)
    assert meta.sampler.recorded and not meta.trainer.recorded
    assert manifest["routes"]["missing_captures"] == 0
    assert manifest["routes"]["layer_axis"] == (["moe"] if name == "vllm-0.21" else ["decoder"])
    # vllm-0.21 and verl carry one trailing placeholder row per sequence, dropped
    assert manifest["routes"]["placeholder_rows_dropped"] == (2 if name in ("vllm-0.21", "verl") else 0)
    # what scoring the run again needs: every prompt and completion token id per sequence
    seqs = pq.read_table(out / "sequences.parquet").to_pylist()
    assert [(s["sequence_id"], s["prompt_token_ids"], s["completion_token_ids"]) for s in seqs] == [
        (sid, *SEQS[sid]) for sid in (5, 9)
    ]


def test_moe_ordinal_layer_axis_maps_onto_decoder_layers(dumps):
    """verl's R2 on a mixed model writes MoE layers only: 3 of them, mapped to decoder layers 1, 2, 3."""
    recs = [{**slime(sid), "rollout_routed_experts": moe_routes(sid).tolist()} for sid in (5, 9)]
    run(dumps, "slime", recs)
    assert read_routes(dumps / "out") == expected_rows()


def test_routes_starting_past_the_prompt_start(dumps):
    """SGLang's routed_experts_start_len 2: sequence 5's rows cover input positions 2..5 only."""
    full = decoder_routes(5)[2:]
    rec = {
        **base(5),
        "routed_experts": base64.b64encode(full.astype("<i4").tobytes()).decode(),
        "routed_experts_start_len": 2,
    }
    run(dumps, "sglang", [rec, sglang(9)])
    rows = [r for r in read_routes(dumps / "out") if r["sequence_id"] == 5]
    assert rows == [r for r in expected_rows() if r["sequence_id"] == 5 and r["input_position"] >= 2]


def test_prime_rl_total_router_recall_imports_the_weights(dumps):
    """[T, L, 2k] int32: ids, then the float32 bits of the gate weights (0.75, 0.25 on every MoE layer)."""
    recs = []
    for sid in (5, 9):
        ids = decoder_routes(sid)
        w = np.zeros(ids.shape, np.float32)
        w[:, list(MOE)] = [0.75, 0.25]
        packed = np.concatenate([ids, w.view(np.int32)], axis=-1)
        recs.append(
            {
                **base(sid),
                "routed_experts": {
                    "data": base64.b64encode(packed.tobytes()).decode(),
                    "shape": list(packed.shape),
                    "start": 0,
                    "dtype": "int32",
                },
            }
        )
    run(dumps, "prime-rl", recs)
    t = pq.read_table(dumps / "out" / "routes").to_pylist()
    assert [r["sampler_experts"] for r in t] == [r["sampler_experts"] for r in expected_rows()]
    assert all(r["sampler_weights"] == [None, [0.75, 0.25], [0.75, 0.25], [0.75, 0.25]] for r in t)
    meta = json.loads((dumps / "out" / "manifest.json").read_text())["routing"]
    assert meta["sampler"]["weights"] is True


def test_mtp_layers_after_the_decoder_layers_are_left_out(dumps):
    """A DeepSeek-style config with one MTP layer; the dump has 4 + 1 layers: the 5th is dropped."""
    config = {**CONFIG, "num_nextn_predict_layers": 1}
    recs = []
    for sid in (5, 9):
        full = decoder_routes(sid)
        recs.append({**base(sid), "rollout_routed_experts": np.concatenate([full, full[:, 1:2]], axis=1).tolist()})
    result = run(dumps, "slime", recs, config=config)
    assert read_routes(dumps / "out") == expected_rows()
    assert any("MTP" in w for w in result.warnings)


def test_an_all_zero_moe_row_is_a_missing_capture_not_expert_0(dumps):
    """Sequence 5, input position 1, layer 2 zeroed: 1 of 30 MoE entries (10 rows x 3 layers) missing, null."""
    rec = slime(5)
    rec["rollout_routed_experts"][1][2] = [0, 0]
    result = run(dumps, "slime", [rec, slime(9)])
    rows = read_routes(dumps / "out")
    assert rows[1]["sampler_experts"] == [None, moe_routes(5)[1][0].tolist(), None, moe_routes(5)[1][2].tolist()]
    routes = json.loads((dumps / "out" / "manifest.json").read_text())["routes"]
    assert (routes["missing_captures"], routes["moe_entries"]) == (1, 30)
    assert any("1 of 30" in w and "3.3%" in w and "not expert 0" in w for w in result.warnings)


def test_a_run_with_most_routes_missing_says_so_loudly(dumps):
    recs = [{**base(sid), "rollout_routed_experts": np.zeros_like(decoder_routes(sid)).tolist()} for sid in (5, 9)]
    result = run(dumps, "slime", recs)
    assert any(w.startswith("MOST ROUTES ARE MISSING: 30 of 30") for w in result.warnings)
    assert all(r["sampler_experts"] == [None] * 4 for r in read_routes(dumps / "out"))


@pytest.mark.parametrize(
    "change, message",
    [
        # 3 layers where the model has 4 decoder and 3 MoE layers would be read as MoE ordinals; 2 fits neither
        (lambda a: a[:, :2], "routes have 2 layers; the model is qwen3_moe: 4 decoder layers, 3 MoE"),
        (lambda a: np.where(a == 9, 16, a), "expert id 16 is not below the model's 16 experts"),
        (
            lambda a: a[:-1],
            ("5 route rows; a 3-token prompt and 4-token completion starting at 0 need len(tokens) - 1 - start = 6"),
        ),
        (lambda a: np.concatenate([a, a[:2]]), "8 route rows"),
        (lambda a: np.where(a == a[0, 1, 1], a[0, 1, 0], a), "name one expert twice"),
        (lambda a: a[:, :, :1], "routes hold 1 ids per layer; the model routes top-2"),
    ],
)
def test_bad_routes_stop_the_import_before_anything_is_written(dumps, change, message):
    rec = {**base(5), "rollout_routed_experts": change(decoder_routes(5)).tolist()}
    with pytest.raises(ImportFormatError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        run(dumps, "slime", [slime(9), rec])
    assert str(e.value).startswith("routes.jsonl:2: ")
    assert not (dumps / "out").exists() or not any((dumps / "out").iterdir())


def test_routes_that_match_no_imported_sequence_leave_nothing(dumps):
    """Checked after the tokens are written: they are removed again, and no manifest marks the run complete."""
    rec = {**slime(5), "sequence_id": 6}
    with pytest.raises(ImportFormatError, match="sequence_id 6 is not in the imported run"):
        run(dumps, "slime", [rec])
    out = dumps / "out"
    assert not (out / "manifest.json").exists() and not list(out.rglob("*.parquet"))


def test_a_completion_the_mask_cut_maps_through_loss_mask(dumps):
    """Sequence 5's token 22 was masked out at import: completion index 2 -> tokens/ position 1, 22 -> null."""
    completion = SEQS[5][1]
    with open(dumps / "tokens.jsonl", "w") as fh:
        fh.write(
            json.dumps(
                {
                    "sequence_id": 5,
                    "token_ids": completion,
                    "mask": [1, 0, 1, 1],
                    "sampler_logprobs": [-0.5] * 4,
                    "trainer_logprobs": [-0.6] * 4,
                }
            )
            + "\n"
        )
    with pytest.raises(ImportFormatError, match="differ from its 3 imported tokens"):
        run(dumps, "slime", [slime(5)])
    run(dumps, "slime", [{**slime(5), "loss_mask": [1, 0, 1, 1]}], out="out2")
    # rows predicting completion tokens: input positions 2..5 -> completion index 0..3 -> positions 0, null, 1, 2
    tps = [r["token_position"] for r in read_routes(dumps / "out2")]
    assert tps == [None, None, 0, None, 1, 2]
    assert pq.read_table(dumps / "out2" / "sequences.parquet")["completion_kept"].to_pylist() == [
        [True, False, True, True]
    ]


def test_a_config_that_is_not_moe_is_refused(dumps):
    with pytest.raises(UsageError, match="no num_experts / num_local_experts"):
        run(dumps, "slime", [slime(5)], config={"model_type": "qwen3", "num_hidden_layers": 4})


def test_deepseek_style_dense_first_layers(dumps):
    """first_k_dense_replace 1 and n_routed_experts: the same MoE layers 1-3."""
    config = {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 4,
        "first_k_dense_replace": 1,
        "n_routed_experts": 16,
        "num_experts_per_tok": 2,
    }
    run(dumps, "sglang", [sglang(5), sglang(9)], config=config)
    assert read_routes(dumps / "out") == expected_rows()


@pytest.mark.slow
def test_cli_bad_routes_one_line_exit_2(dumps):
    (dumps / "routes.jsonl").write_text(json.dumps({**base(5), "routed_experts": "not base64!"}) + "\n")
    p = cli(
        "import",
        "jsonl",
        str(dumps / "tokens.jsonl"),
        "--out",
        str(dumps / "out"),
        "--routes",
        str(dumps / "routes.jsonl"),
        "--routes-format",
        "sglang",
        "--routes-config",
        str(dumps),
    )
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "routes.jsonl:1: routed_experts is not valid base64" in p.stderr
    assert not (dumps / "out" / "manifest.json").exists()
    p = cli(
        "import",
        "jsonl",
        str(dumps / "tokens.jsonl"),
        "--out",
        str(dumps / "out"),
        "--routes",
        str(dumps / "routes.jsonl"),
    )
    assert p.returncode == 2 and "routes need --routes-format, --routes-config too" in p.stderr


def test_one_jsonl_holds_tokens_and_routes(dumps):
    """The generic importer ignores the route fields, so one dump can serve as SRC and --routes."""
    both = dumps / "both.jsonl"
    with open(both, "w") as fh:
        for sid in (5, 9):
            n = len(SEQS[sid][1])
            fh.write(
                json.dumps(
                    {
                        **vllm_npy(sid),
                        "token_ids": SEQS[sid][1],
                        "sampler_logprobs": [-0.5] * n,
                        "trainer_logprobs": [-0.6] * n,
                    }
                )
                + "\n"
            )
    import_run("jsonl", both, dumps / "out", route_options=RoutesOptions(both, "vllm", dumps / "config.json"))
    assert read_routes(dumps / "out") == expected_rows()


def test_sglang_meta_info_nesting_and_a_wide_expert_count(dumps):
    """/generate's meta_info.routed_experts; 300 experts need uint16 ids (257 and over do not fit uint8)."""
    recs = [{**base(sid), "meta_info": {"routed_experts": sglang(sid)["routed_experts"]}} for sid in (5, 9)]
    run(dumps, "sglang", recs, config={**CONFIG, "num_experts": 300})
    assert read_routes(dumps / "out") == expected_rows()
    ids_type = pq.read_schema(dumps / "out" / "routes" / "part-00000.parquet").field("sampler_experts").type
    assert ids_type.value_type.value_type == pa.uint16()


def test_top_1_zero_is_expert_0_unless_the_whole_layer_is_zero(dumps):
    """Top-1: sequence 5 picks expert 0 at input position 0 in layer 1 (a real choice, kept); its layer 3 is 0
    on all 6 rows: a failed capture (6 of 30 MoE entries = 10 rows x 3 layers missing)."""
    recs = []
    for sid in (5, 9):
        full = decoder_routes(sid)[:, :, :1].copy()
        if sid == 5:
            full[0, 1, 0] = 0
            full[:, 3, 0] = 0
        recs.append({**base(sid), "rollout_routed_experts": full.tolist()})
    result = run(dumps, "slime", recs, config={**CONFIG, "num_experts_per_tok": 1})
    rows = read_routes(dumps / "out")
    assert rows[0]["sampler_experts"] == [None, [0], [moe_routes(5)[0, 1, 0]], None]
    assert all(r["sampler_experts"][3] is None for r in rows[:6]) and rows[6]["sampler_experts"][3] is not None
    assert any(w.startswith("6 of 30 MoE layer routes (20.0%)") for w in result.warnings)


def test_an_id_past_int32_is_refused_not_wrapped(dumps):
    """2^32 + 3 would wrap to 3 (a valid expert) in a narrowing cast."""
    full = decoder_routes(5).astype(np.int64)
    full[0, 1, 0] = (1 << 32) + 3
    with pytest.raises(ImportFormatError, match="holds expert id 4294967299, past any expert count"):
        run(dumps, "slime", [{**base(5), "rollout_routed_experts": full.tolist()}])


def test_skip_bad_skips_the_routes_of_a_skipped_sequence(dumps):
    """Sequence 9's token record is bad (no trainer logprobs): with --skip-bad its routes are skipped, counted."""
    write_tokens(dumps / "tokens.jsonl", sids=(5,))
    with open(dumps / "tokens.jsonl", "a") as fh:
        fh.write(json.dumps({"sequence_id": 9, "token_ids": SEQS[9][1], "sampler_logprobs": [-0.5] * 3}) + "\n")
    (dumps / "routes.jsonl").write_text(json.dumps(slime(5)) + "\n" + json.dumps(slime(9)) + "\n")
    result = import_run(
        "jsonl",
        dumps / "tokens.jsonl",
        dumps / "out",
        skip_bad=True,
        route_options=RoutesOptions(dumps / "routes.jsonl", "slime", dumps / "config.json"),
    )
    assert read_routes(dumps / "out") == [r for r in expected_rows() if r["sequence_id"] == 5]
    assert result.routes is not None and result.routes["routes_of_skipped_sequences"] == 1
    assert result.routes["sequences"] == 1 and result.routes["rows"] == 6
    assert any(w.startswith("skipped the routes of 1 sequence(s) the token import skipped") for w in result.warnings)


@pytest.mark.slow
def test_slime_train_dump_routes_read_in_place(tmp_path):
    """A --dump-details folder whose train samples carry rollout_routed_experts (int32 tensors, as R3 keeps
    them): no routes file; the slime import numbers sequences 5 -> 0 and 9 -> 1 in reading order."""
    torch = pytest.importorskip("torch")
    from .layouts import slime_rollout_sample, slime_train_sample, write_slime

    train, rollout = [], []
    for k, sid in enumerate((5, 9)):
        prompt, completion = SEQS[sid]
        n = len(completion)
        sample = slime_train_sample(prompt, completion, [-0.5] * n, [-0.6] * n, 1.0, position=k, sample_index=k)
        sample["rollout_routed_experts"] = torch.tensor(decoder_routes(sid), dtype=torch.int32)
        train.append(sample)
        rollout.append(slime_rollout_sample(0, k, 1.0, prompt + completion, n))
    write_slime(tmp_path / "dump", 3, train, rollout)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    import_run(
        "slime",
        tmp_path / "dump",
        tmp_path / "out",
        route_options=RoutesOptions(tmp_path / "dump", "slime", tmp_path / "config.json"),
    )
    renumbered = [{**r, "sequence_id": {5: 0, 9: 1}[r["sequence_id"]]} for r in expected_rows()]
    assert read_routes(tmp_path / "out") == renumbered

    del train[1]["rollout_routed_experts"]
    write_slime(tmp_path / "dump2", 3, train, rollout)
    with pytest.raises(
        ImportFormatError,
        match=r"train_data/3_0.pt \(record 1\): the sample has no "
        r"rollout_routed_experts",
    ):
        import_run(
            "slime",
            tmp_path / "dump2",
            tmp_path / "out2",
            route_options=RoutesOptions(tmp_path / "dump2", "slime", tmp_path / "config.json"),
        )


def test_vllm_021_refuses_a_decoder_layer_axis(dumps):
    """0.21 indexed MoE layers only: 4 layers on a model with 3 MoE layers is a layout mix-up, not decoder layers."""
    prompt = SEQS[5][0]
    full = decoder_routes(5, np.int16)
    rec = {
        **base(5),
        "prompt_routed_experts": full[: len(prompt)].tolist(),
        "routed_experts": full[len(prompt) :].tolist(),
    }
    with pytest.raises(ImportFormatError, match=r"routes have 4 layers; .* \(expected its 3 MoE layers\)"):
        run(dumps, "vllm-0.21", [rec])


def _routes_import(tmp_path, records, fmt):
    import json

    write_tokens(tmp_path / "tokens.jsonl")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "routes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return error_line(
        cli(
            "import",
            "jsonl",
            str(tmp_path / "tokens.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--routes",
            str(tmp_path / "routes.jsonl"),
            "--routes-format",
            fmt,
            "--routes-config",
            str(tmp_path / "config.json"),
        )
    )


def test_routes_of_another_encoding_point_at_the_format_not_at_pickles(tmp_path):

    # sglang's raw int32 bytes read as vllm's .npy: numpy's reason once advised allow_pickle
    line = _routes_import(tmp_path, [sglang(5), sglang(9)], "vllm")
    assert "routed_experts is base64 but not of a .npy array, as --routes-format vllm reads it" in line
    assert "pickle" not in line and "check --routes-format" in line


def test_a_routes_record_without_its_sequence_id_says_so(tmp_path):

    rec = sglang(5)
    del rec["sequence_id"]  # once "sequence_id is None, not an integer"
    line = _routes_import(tmp_path, [rec, sglang(9)], "sglang")
    assert "routes.jsonl:1: the record has no sequence_id: routes are matched to the imported sequences by it" in line


def test_a_config_of_another_layer_count_is_refused_naming_both(dumps):
    """Routes of a 3-layer model whose layer 0 is dense (written as zeros, as engines write every decoder layer),
    imported with the 4-layer config (layer 0 dense, 3 MoE). 3 layers fit the config's MoE count, so they were
    read as MoE ordinals: their zero layer became "missing captures" (a third of all) and every other layer
    landed one layer off. Refused, naming both counts; the MoE-ordinal reading itself stays (the test above)."""
    recs = [{**base(sid), "rollout_routed_experts": decoder_routes(sid)[:, :3].tolist()} for sid in (5, 9)]
    with pytest.raises(ImportFormatError, match="routes have 3 layers; --routes-config's model has 4 decoder layers"):
        run(dumps, "slime", recs)
    assert not (dumps / "out").exists()
