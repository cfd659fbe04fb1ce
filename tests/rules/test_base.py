"""Rule parameters are read strictly: given twice, Python-only number spellings, ranges that rounding would make contradict themselves."""

from __future__ import annotations

import pytest

from tests.helpers import (
    SAMPLE_PAIRS,
    cli,
    error_line,
)


@pytest.mark.parametrize(
    "rule, message",
    [
        (
            "icepop:alpha=0.2,alpha=0.3",
            "rule 'icepop': alpha is given twice in 'icepop:alpha=0.2,alpha=0.3' (give each parameter once)",
        ),
        ("icepop:beta=1_000", "rule 'icepop': parameter beta='1_000' is not a number"),  # float() would read 1000
        ("icepop:beta=\u0665", "rule 'icepop': parameter beta='\u0665' is not a number"),  # an Arabic-Indic 5
        # '_' separates verl's two bounds; float() would read 0.5 and 2_3 = 23
        (
            "verl-rs:option=token_k1,threshold=0.5_2_3",
            "rule 'verl-rs': threshold '0.5_2_3' for token_k1 is not 'L_U' or one number U (e.g. 0.5_2.0 or 2)",
        ),
        # 1.0000001 printed as :g would read "delta=1 is outside [0, 1]"
        ("ipo:delta=1.0000001", "rule 'ipo': delta=1.0000001 is outside its range [0, 1]"),
    ],
)
def test_rule_parameters_are_read_strictly(rule, message):
    r = cli("compare-masks", str(SAMPLE_PAIRS), "--rule", rule)
    assert error_line(r) == f"error: {message}"
