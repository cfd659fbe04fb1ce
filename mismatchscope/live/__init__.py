"""Recording from inside a training loop: ``Recorder`` writes, ``Monitor`` watches.

Both take the loop's own ``[B, T]`` tensors (torch on any device, or numpy)
and a mask; see ``docs/recorder.md``.
"""

from .inputs import StepBatch
from .monitor import Alert, Monitor, StepReport
from .recorder import Recorder

__all__ = ["Alert", "Monitor", "Recorder", "StepBatch", "StepReport"]
