"""Mixture-of-experts routes: which experts each side's router chose, per input position and layer.

:mod:`.layout` is the one declaration of the ``routes/`` files of a run
directory; recording, replay, import and the routing metrics all build on it.
"""
