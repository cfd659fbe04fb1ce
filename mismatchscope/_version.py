"""The package's version, in a module of its own: every run records it, and library code reads it from here
rather than from the package face (``mismatchscope/__init__.py``), which sits above every layer."""

__version__ = "0.1.0"
