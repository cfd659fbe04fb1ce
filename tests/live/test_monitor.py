"""Monitor options that cannot be meant are refused when the Monitor is made."""

from __future__ import annotations

import math
import re

import pytest

from mismatchscope.errors import UsageError


@pytest.mark.parametrize(
    "kwargs, says",
    [
        # window 0 once meant "every step" and 8 "never an alert" (the detectors need 16 steps), both silently
        ({"window": 8}, "window must be an integer of at least 16 steps, got 8"),
        ({"min_rise": math.nan}, "min_rise must be a finite number >= 0 (0.25: +25%), got nan"),
        ({"rules": "icepop"}, "rules must be a list of rule names, got the string 'icepop'"),  # once "unknown rule 'i'"
        ({"recorder": "runs/x"}, "recorder must be a Recorder, got str"),  # once an AttributeError at the first add
    ],
)
def test_monitor_options_that_cannot_be_meant(kwargs, says):
    from mismatchscope.live.monitor import Monitor

    with pytest.raises(UsageError, match=re.escape(says)):
        Monitor(**kwargs)
