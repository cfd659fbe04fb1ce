"""The one derivation of turns from a loss mask (``mismatchscope.turns``), which every importer and the Recorder call."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchscope.errors import InputError, TurnOrderError
from mismatchscope.turns import explicit_turns, mask_turns


def test_a_mask_with_two_tool_spans_gives_three_turns_counted_over_the_kept_tokens():
    # prompt 0 0 | turn 0: 1 1 1 | tool 0 0 | turn 1: 1 1 | tool 0 | turn 2: 1 | padding 0
    turn, turn_position = mask_turns(np.array([0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1, 0]))
    assert turn.tolist() == [0, 0, 0, 1, 1, 2]
    assert turn_position.tolist() == [0, 1, 2, 0, 1, 0]
    assert turn.dtype == np.int32 and turn_position.dtype == np.int32


@pytest.mark.parametrize("mask", [[0, 1, 1, 1, 0], [1, 1], [1.0, True, 1], [0, 0, 1]])
def test_one_run_of_kept_tokens_is_one_turn_and_no_columns(mask):
    assert mask_turns(np.array(mask)) is None


def test_rows_laid_end_to_end_each_count_their_own_turns():
    # row 0: 0 1 1 0 1 -> turns 0 0 1; row 1 (starts kept, so no run continues across rows): 1 1 0 1 1 -> 0 0 1 1
    turn, turn_position = mask_turns(np.array([0, 1, 1, 0, 1, 1, 1, 0, 1, 1]), np.array([5, 5]))
    assert turn.tolist() == [0, 0, 1, 0, 0, 1, 1]
    assert turn_position.tolist() == [0, 1, 0, 0, 1, 0, 1]


def test_an_empty_row_between_two_rows_changes_nothing():
    turn, turn_position = mask_turns(np.array([1, 1, 1, 0, 1, 0, 1]), np.array([3, 0, 4]))
    assert turn.tolist() == [0, 0, 0, 0, 1]
    assert turn_position.tolist() == [0, 1, 2, 0, 0]


def test_explicit_turns_give_their_positions_within_each_turn():
    turn, turn_position = explicit_turns(np.array([0, 0, 1, 1, 1, 3]))
    assert turn.tolist() == [0, 0, 1, 1, 1, 3]
    assert turn_position.tolist() == [0, 1, 0, 1, 2, 0]
    assert explicit_turns(np.array([0, 0, 0])) is None


def test_an_explicit_turn_that_decreases_is_refused_naming_where():
    with pytest.raises(TurnOrderError, match="turn decreases within a sequence: 1 then 0 at kept token 2"):
        explicit_turns(np.array([0, 1, 0]))


@pytest.mark.parametrize("bad", [[0, -1], [0.0, 0.5]])
def test_a_negative_or_fractional_turn_is_refused(bad):
    with pytest.raises(InputError):
        explicit_turns(np.array(bad))
