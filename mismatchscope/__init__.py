"""mismatchscope: how far apart are the RL sampler and the trainer, where, and
what would each masking rule throw away.

The analysis core (``schema``, ``reader``, ``divergence``, ``rules``,
``analysis``) needs only numpy and pyarrow. torch, transformers and vLLM are
imported inside ``mismatchscope.probe`` only.
"""

__version__ = "0.1.0"
