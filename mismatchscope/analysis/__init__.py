"""The analysis engine behind ``report``, ``compare-masks``, ``gate``, ``timeline`` and diagnose.

One streaming pass over the token pairs, then assembly. Modules, by job:

* ``engine``: the streaming pass (:func:`~.engine.analyse`) as plan, batch,
  fold, finish: the request becomes a frozen plan once, the batches are
  folded in file order, the finish returns an ``AnalysisResult``.
* ``plan``: the ``AnalysisPlan`` and how its columns and reductions follow
  from the request and the input.
* ``batch``: one batch analysed from the plan: the per-token terms computed
  once and handed to the accumulators below.
* ``parallel``: each batch analysed on a worker thread into a partial result,
  the partials folded in file order (the same numbers on any number of cores).
* ``validate``: what refuses an input (negative positions, non-finite
  advantages, no token left) and what only warns (position gaps).
* ``table``: the typed per-sequence table (``SequenceTable``: token counts,
  sums of TV, |l|, l, k2, k3, reverse KL, r, r^2, maxima and minima, mean
  advantage, each rule's rejections per sequence). Built once by the pass;
  read by report, the gate's bootstrap, the worst-sequence ranking and
  diagnose.
* ``sums``: metrics derived from sums (TV, k1/k2/k3, reverse KL, chi2, ESS),
  for the whole file, a bucket or a step alike; ``timeline`` and the live
  Monitor use it too.
* ``tokenstats``: running token sums, tails, exact quantiles, breakdowns.
* ``quantiles``: exact quantiles by binned selection, memory flat in tokens.
* ``grouping``: the streaming group-by over ``sequence_id``.
* ``positions``: duplicate, gap and late-start checks on positions.
* ``masks``: the rule accumulator (each rule under each advantage
  hypothesis; token rules per batch, sequence rules at the end).
* ``topk``: top-k lower bounds and score-centering statistics.
* ``report``: assembles the ``report`` payload; ``comparison`` the
  ``compare-masks`` payload; ``readings`` reads the headline numbers against
  published yardsticks (and the policy-lag caveat).
* ``worst``: the sequences with the largest mismatch, and their traces.
* ``route_scan``: MoE runs: reads ``routes/`` once, flip rates per MoE layer
  (completion and prompt rows apart), missing captures, margins;
  ``route_columns`` decodes and checks a batch's route columns;
  ``expert_sets`` compares the two sides' top-k sets (a sorting network);
  ``route_join`` is the flip index the token pass joins on (|log p - log q|
  on flipped tokens, the rules' flipped rejections); ``routing_report``
  turns them into the report's ``routing`` entry.
"""
