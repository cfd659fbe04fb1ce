"""The output formats, one module each: its ``FORMAT`` (a :class:`~mismatchscope.render.seam.Format`), which the
seam loads on first use. A new format is one module here; a document's renderer in it is
``render/<type>_<format>.py`` (:mod:`mismatchscope.render.seam`)."""
