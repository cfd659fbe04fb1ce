"""One bytecode cache for a diagnose's sampler processes, where Python would otherwise compile vLLM in each.

Every sampler configuration runs in a fresh interpreter (:mod:`.worker`), and
each imports vLLM, torch and transformers: some 6,000 modules. Where the
installed packages carry no compiled bytecode and Python is told not to write
any (``PYTHONDONTWRITEBYTECODE``, as container images often set, with
installers that do not compile), every one of those interpreters compiles all
of them from source again: about 10 CPU-seconds of a 20-second engine start
on 2 cores, repeated for each configuration. For the time of one diagnose its
sampler processes then share a bytecode cache (``PYTHONPYCACHEPREFIX``) in a
temporary folder: the baseline's process fills it, the variants' read it, and
the folder is removed when the diagnose ends, however it ends. The diagnose's
own process writes into it too while it checks the options (its first import
of vLLM), so the baseline's process finds vLLM compiled already. Nothing is
written beside the installed sources, and nothing outlives the command.
Where bytecode is installed, or Python writes it, or the caller chose a
cache folder of their own, nothing changes.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

PROBE_MODULES = ("vllm", "torch")
"""the package whose installed bytecode decides (its ``__init__``; the first installed): the bulk of what a
sampler imports."""


def compiles_each_time(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """True when a new interpreter would compile the sampler's imports from source: writing bytecode is
    switched off, no cache folder is set, and the installed package has no compiled ``__init__``."""
    if not environ.get("PYTHONDONTWRITEBYTECODE") or environ.get("PYTHONPYCACHEPREFIX"):
        return False
    for name in PROBE_MODULES:
        spec = importlib.util.find_spec(name)  # finds the package without importing it
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            return not os.path.exists(importlib.util.cache_from_source(spec.origin))
    return False


@contextmanager
def shared_bytecode() -> Iterator[None]:
    """For the block's duration, child interpreters share one temporary bytecode cache when they would
    otherwise each compile from source (:func:`compiles_each_time`); the cache is removed on the way out."""
    if not compiles_each_time():
        yield
        return
    folder = tempfile.mkdtemp(prefix="mismatchscope-bytecode-")
    saved = os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    # this process too, from here on: what it imports first (vLLM, for the engine options' checks) is compiled
    # once for the baseline's process as well
    own = sys.pycache_prefix, sys.dont_write_bytecode
    sys.pycache_prefix, sys.dont_write_bytecode = folder, False
    try:
        yield
    finally:
        sys.pycache_prefix, sys.dont_write_bytecode = own
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        os.environ["PYTHONDONTWRITEBYTECODE"] = saved
        shutil.rmtree(folder, ignore_errors=True)
