"""``mismatchscope gate``: limits on the mismatch of a candidate serving stack,
absolute and against a baseline, judged with bootstrap intervals.

Modules: ``config`` (typed limits, TOML, the starter file), ``metrics`` (what a
limit can name), ``compare`` (are the two runs comparable?), ``bootstrap``
(resampling sequences as matrix products), ``estimate`` (per-file values and
replicates), ``checks`` (verdicts) and ``run`` (the one library call). numpy
only; the verdict's tables, Markdown, JUnit and pictures live in
``mismatchscope.render``.
"""
