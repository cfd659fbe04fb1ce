"""``prompt_boundary``: the share of sequences whose first tokens are off, so one outlier names nothing."""

from __future__ import annotations

import numpy as np

from mismatchscope.doctor import doctor
from tests.doctor import runs


def _finding(doc, cause: str):
    return next(f for f in doc.findings if f.cause == cause)


def test_one_outlier_token_at_position_0_is_no_prompt_boundary(tmp_path):
    cols = runs.clean_columns(runs.make(1, sequences=40, noise=1e-3))
    first = np.flatnonzero(cols["position"] == 0)[3]
    cols["trainer_logprob"] = cols["trainer_logprob"].copy()
    cols["trainer_logprob"][first] -= 4.0  # one token, 4 nats off
    f = _finding(doctor(runs.write(cols, tmp_path)), "prompt_boundary")
    assert f.status == "clear", f.sentence


def test_the_need_it_names_is_the_one_it_has(tmp_path):
    # 300 tokens, none at position 8 or later (50 sequences of 6): the check needs 50 tokens from position 8 on,
    # and says that, not "needs at least 50 tokens" with 300 in hand
    cols = runs.clean_columns(runs.make(2, sequences=50, length=6, noise=1e-3))
    f = _finding(doctor(runs.write(cols, tmp_path)), "prompt_boundary")
    assert f.status == "not_checked" and f.needs == ["at least 50 tokens at position 8 or later"], f.needs
    assert f.sentence == "not checked: 0 tokens at position 8 or later, needs at least 50"
