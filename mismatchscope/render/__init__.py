"""Every output of the commands, from the typed documents the layers below compute.

One flat folder, named by document and format: ``<document>_<format>.py`` holds one document's renderer in one
format (``gate_table``, ``gate_markdown``, ``gate_junit``, ``gate_html``, ``certify_junit``, ``masks_html``,
``token_view_html``, ...), ``<command>_pictures.py`` a command's PNGs. :mod:`.seam` is the one door every command's
output goes through (a document and a format in, text out) and :mod:`.formats` holds the formats, one module
each. What several renderers share: :mod:`.layout` (tables at any width), :mod:`.consoles` (stdout's and stderr's
consoles), :mod:`.run_header` (the input's header line), :mod:`.junit` (the JUnit frame), :mod:`.figures` and
:mod:`.pictures` (the figure base, the PNG writer), :mod:`.page` (every page's scaffolding); every number is
written by :mod:`mismatchscope.formatting`. Nothing here computes a number the commands report: it formats what
it is given. matplotlib (the ``plot`` extra) is imported only inside the functions that draw a picture.
"""
