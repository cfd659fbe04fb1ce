"""The ``mismatchscope`` command line: thin commands over the library."""
