"""The token view: the worst (or chosen) sequences of a run, token by token, each rule's decision on each token.

:mod:`.select` chooses the sequences from the analysis pass's per-sequence
table, :mod:`.rows` reads their tokens, :mod:`.text` finds the run's
tokenizer and decodes them, :mod:`.build` judges and assembles the typed
:class:`~.document.TokenView` that ``render/token_view_html.py`` draws.
"""

from .build import MAX_TOKENS, ViewOptions, build_view
from .document import TokenView
from .run import given_tokenizer, token_view, view_run
from .select import RANKINGS
from .text import Decoder, TextSource, find_tokenizer

__all__ = [
    "MAX_TOKENS",
    "RANKINGS",
    "Decoder",
    "TextSource",
    "TokenView",
    "ViewOptions",
    "build_view",
    "find_tokenizer",
    "given_tokenizer",
    "token_view",
    "view_run",
]
