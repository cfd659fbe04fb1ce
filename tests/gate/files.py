"""Token-pair files built by hand for the gate's tests, so that every number they assert is derived from the
tokens written."""

from __future__ import annotations

import math


def seqs(spec: list[list[tuple[float, float]]], first_id: int = 1) -> dict:
    """Columns from sequences of (q, p) probability pairs."""
    cols: dict[str, list] = {
        k: [] for k in ("sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob")
    }
    for s, tokens in enumerate(spec):
        for pos, (q, p) in enumerate(tokens):
            cols["sequence_id"].append(first_id + s)
            cols["position"].append(pos)
            cols["token_id"].append(7)
            cols["sampler_logprob"].append(math.log(q))
            cols["trainer_logprob"].append(math.log(p))
    return cols


def two_sequence_file(write, name="two.parquet", metadata=None):
    """Two sequences of one and three tokens, their TV derived below."""
    # A: one token q=0.5, p=0.6 -> tv 0.1; B: three tokens q=0.5, p=0.8 -> tv 0.3 each, 0.9 in all
    return write(seqs([[(0.5, 0.6)], [(0.5, 0.8)] * 3]), name, metadata)
