"""The default reward reads a worked solution's final answer after ``####``."""

import sys

import numpy as np
import pytest

from mismatchscope.errors import UsageError
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


REWARDS = """
def raises(*, prompt, completion, answer):
    raise KeyError("score")

def text(*, prompt, completion, answer):
    return "1.0"

def huge(*, prompt, completion, answer):
    return 10 ** 400

def positional(prompt):
    return 1.0

def fine(*, prompt, completion, answer):
    return 0.5
"""


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_rewards"
    sys.modules.pop("my_rewards", None)


@pytest.mark.parametrize(
    "name, message",
    [
        ("raises", "--reward-fn my_rewards:raises on the prompt 'What is 2+2?' raised KeyError: 'score'"),
        ("text", "--reward-fn my_rewards:text on the prompt 'What is 2+2?' returned '1.0', not a number"),
        ("huge", "--reward-fn my_rewards:huge on the prompt 'What is 2+2?' returned 1000000000"),
    ],
)
def test_a_reward_function_that_fails_is_named_with_the_prompt(rewards_module, name, message):
    from mismatchscope.probe.rewards import load_reward_fn

    fn = load_reward_fn(f"{rewards_module}:{name}")
    with pytest.raises(UsageError) as e:
        fn(prompt="What is 2+2?", completion="4", answer="4")
    assert str(e.value).startswith(message)
    assert load_reward_fn(f"{rewards_module}:fine")(prompt="p", completion="c", answer=None) == 0.5


def test_a_reward_function_with_the_wrong_signature_is_refused_when_loaded(rewards_module):
    from mismatchscope.probe.rewards import load_reward_fn

    with pytest.raises(UsageError, match=r"cannot be called as fn\(prompt=..., completion=..., answer=...\)"):
        load_reward_fn(f"{rewards_module}:positional")
