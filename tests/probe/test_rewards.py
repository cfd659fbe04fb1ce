"""The default reward reads a worked solution's final answer after ``####``."""

import numpy as np
import pytest

from mismatchscope.probe.rewards import exact_match, final_answer, group_advantages


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("52", "52"),  # no marker: the whole completion
        ("  52 \n", "52"),  # stripped
        (" then add 3: 4+3=7, #### 7", "7"),  # after the marker
        ("#### 6 #### 7", "7"),  # the last marker wins
        ("4+3=7, ####", ""),  # marker with nothing after it: an empty answer
    ],
)
def test_final_answer(completion, expected):
    assert final_answer(completion) == expected


def test_exact_match_on_worked_solutions():
    assert exact_match(prompt="4+3=", completion=" then add 3: 4+3=7, #### 7", answer="7") == 1.0
    # a right chain with a wrong total is wrong; the marker's text is what counts
    assert exact_match(prompt="4+3=", completion=" then add 3: 4+3=7, #### 8", answer="7") == 0.0
    # without a marker the whole completion must match, as before
    assert exact_match(prompt="47+5=", completion="52", answer="52") == 1.0
    assert exact_match(prompt="47+5=", completion="52 and more", answer="52") == 0.0
    assert exact_match(prompt="4+3=", completion="#### 7", answer=None) == 0.0


def test_group_advantages_hand_values():
    # rewards [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735
    # -> +-0.5 / 0.57735 = +-0.866025 (minus the 1e-6 in the denominator)
    np.testing.assert_allclose(
        group_advantages(np.array([1.0, 0, 0, 1])), [0.866025, -0.866025, -0.866025, 0.866025], atol=1e-5
    )
    assert group_advantages(np.array([1.0, 1.0])).tolist() == [0.0, 0.0]
    assert group_advantages(np.array([1.0])).tolist() == [0.0]
