"""``diagnose``: where the sampler-trainer gap comes from, and what removing it costs.

Modules by concept: :mod:`.variants` (the baseline's one-change variants,
from ``--vary``, a TOML matrix or the device's default matrix),
:mod:`.reference` (the high-precision reference forward), :mod:`.decompose`
(per-token error decomposition), :mod:`.pairs` (run directories for every
compared pair), :mod:`.effects` (bootstrap deltas against the baseline),
:mod:`.determinism` (bit-level repeatability and batch invariance),
:mod:`.cost` (throughput and the Pareto front), :mod:`.options` (what is
asked, checked before any engine starts), :mod:`.sampler_process` and
:mod:`.worker` (one sampler configuration in its own process, told and
answered through :mod:`.sampler_result`), :mod:`.records` (one
configuration's gaps, routes and costs), :mod:`.run` (orchestration),
:mod:`.reading` (the document's one-paragraph reading) and :mod:`.document`
(the typed document every step builds and the renderers read). Importing
this package imports no engine.
"""
