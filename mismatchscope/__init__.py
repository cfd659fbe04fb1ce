"""mismatchscope: how far apart are the RL sampler and the trainer, where, and
what would each masking rule throw away.

The analysis core (``schema``, ``reader``, ``divergence``, ``rules``,
``analysis``) needs only numpy and pyarrow. torch, transformers and vLLM are
imported inside ``mismatchscope.probe`` only; ``Recorder`` and ``Monitor``
(``mismatchscope.live``) take torch tensors without importing torch.
"""

__version__ = "0.1.0"

_LIVE = ("Recorder", "Monitor", "Alert", "RecorderError", "RecorderInputError")


def __getattr__(name: str):
    """``from mismatchscope import Recorder, Monitor`` without loading them (or numpy) for every CLI call."""
    if name in _LIVE:
        from . import live

        return getattr(live, name)
    raise AttributeError(f"module 'mismatchscope' has no attribute {name!r}")
