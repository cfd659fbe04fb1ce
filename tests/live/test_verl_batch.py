"""The verl recipe's logic on a batch laid out as verl's ``DataProto`` holds it.

verl's ``DataProto`` cannot be imported here: ``verl.protocol`` imports ray
and tensordict at module level (and verl 0.9 pins transformers < 5.11). The
stand-in below has the two fields the recipe reads, ``batch`` (verl: a
``TensorDict`` of ``[B, response_length]`` tensors) and ``non_tensor_batch``
(numpy object arrays, ``uid`` a string per sequence), with verl's key names.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import RecorderInputError
from mismatchscope.live import Monitor, Recorder
from mismatchscope.live.verl_batch import verl_step

torch = pytest.importorskip("torch")


def _batch(**drop):
    b = {
        "responses": torch.tensor([[11, 12, 0], [13, 14, 15]]),
        "response_mask": torch.tensor([[1, 1, 0], [1, 1, 1]]),
        "rollout_log_probs": torch.log(torch.tensor([[0.5, 0.25, 1.0], [0.8, 0.5, 0.5]])),
        "old_log_probs": torch.log(torch.tensor([[0.25, 0.25, 1.0], [0.1, 0.5, 0.5]])),
        "advantages": torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]]),
    }
    for k in drop:
        b.pop(k)
    return SimpleNamespace(batch=b, non_tensor_batch={"uid": np.array(["a3f", "a3f"], dtype=object)})


def test_a_verl_batch_is_recorded_with_its_groups(tmp_path):
    with Recorder(tmp_path / "run") as rec:
        got = Monitor(rec, prefix="").add(5, **verl_step(_batch()))
    # tokens (q, p): (0.5, 0.25), (0.25, 0.25) | (0.8, 0.1), (0.5, 0.5), (0.5, 0.5); tv = 0.25, 0, 0.7, 0, 0 -> 0.95 / 5
    assert got["tv_token_mean"] == pytest.approx(0.95 / 5, rel=1e-6)
    # |l| = ln 2, 0, 3 ln 2, 0, 0 -> 4 ln 2 / 5
    assert got["abs_logprob_diff_mean"] == pytest.approx(4 * math.log(2) / 5, rel=1e-6)
    t = pq.read_table(tmp_path / "run" / "tokens").to_pydict()
    assert t["token_id"] == [11, 12, 13, 14, 15] and t["advantage"] == [1.0, 1.0, -1.0, -1.0, -1.0]
    assert len(set(t["prompt_id"])) == 1  # one uid: one GRPO group, as an int64 hash of the string


@pytest.mark.parametrize(
    "drop, message",
    [
        (
            "rollout_log_probs",
            "the verl batch has no rollout_log_probs (set actor_rollout_ref.rollout.calculate_log_probs=True)",
        ),
        (
            "old_log_probs",
            "the verl batch has no old_log_probs yet (record after the actor's compute_log_prob "
            "(after batch.union(old_log_prob)))",
        ),
    ],
)
def test_a_verl_batch_without_both_logprobs_is_a_clear_error(drop, message):
    with pytest.raises(RecorderInputError) as e:
        verl_step(_batch(**{drop: True}))
    assert str(e.value) == message


def test_bypass_mode_is_refused():
    b = _batch()
    b.batch["old_log_probs"] = b.batch["rollout_log_probs"]
    with pytest.raises(RecorderInputError) as e:
        verl_step(b)
    assert str(e.value) == "old_log_probs is rollout_log_probs (bypass mode): there is no trainer recompute to compare"
