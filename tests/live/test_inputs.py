"""What the Recorder records: token ids that are integers, and only the columns it knows."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchscope import Recorder
from mismatchscope.errors import MismatchscopeError, UsageError


def test_recorder_refuses_fractional_token_ids_and_unknown_columns(tmp_path):
    # a cast once wrote token 1.5 as token 1; an unknown keyword once surfaced as a TypeError of an inner function
    with Recorder(tmp_path / "run") as rec:
        with pytest.raises(
            MismatchscopeError, match=r"token_ids must hold integers, got 1\.5 among the recorded tokens"
        ):
            rec.add(0, [[-0.5, -1.0]], [[-0.4, -1.0]], token_ids=np.array([[1.5, 2.0]]))
        with pytest.raises(UsageError, match=r"add\(\) got 'rewardz', which is not a column it records"):
            rec.add(0, [[-0.5]], [[-0.4]], rewardz=[1.0])
        assert rec.add(0, [[-0.5, -1.0]], [[-0.4, -1.0]], token_ids=np.array([[1.0, 2.0]])).columns[
            "token_id"
        ].tolist() == [1, 2]


def test_recorder_refuses_negative_token_ids_other_than_minus_one(tmp_path):
    """-1 is what the Recorder writes without token_ids (an id not recorded); -5 is no token at all."""
    with Recorder(tmp_path / "run") as rec:
        with pytest.raises(
            MismatchscopeError, match=r"token_ids holds -5 among the recorded tokens \(token ids are >= 0; -1 marks"
        ):
            rec.add(0, [[-0.5, -1.0]], [[-0.4, -1.0]], token_ids=np.array([[3, -5]]))
        assert rec.add(0, [[-0.5, -1.0]], [[-0.4, -1.0]], token_ids=np.array([[3, -1]])).columns[
            "token_id"
        ].tolist() == [3, -1]
