"""``mismatchscope gate``: limits on the mismatch of a candidate serving stack,
absolute and against a baseline, judged with bootstrap intervals.

Modules: ``config`` (typed limits, TOML, the starter file), ``metrics`` (what a
limit can name), ``compare`` (are the two runs comparable?), ``bootstrap``
(resampling sequences as matrix products), ``estimate`` (per-file values and
replicates), ``checks`` (verdicts), ``run`` (the one library call), and the
outputs ``markdown`` and ``junit``. numpy only; the pictures live in
``mismatchscope.plots``.
"""
