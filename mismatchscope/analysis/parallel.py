"""Run a pass's per-batch work on every core, and fold the results in file order.

The analysis of a batch is numpy work on arrays of a few hundred thousand
tokens, and numpy releases the GIL inside its loops, so threads share the
cores without pickling a byte. Each batch is turned into a partial result by
a pure function on a worker thread; the caller folds the partials into its
running totals one by one, in the order the batches were read. Folding in
order keeps every number reproducible to the bit (the same additions in the
same order, whatever the thread timing) and makes an error surface at the
first bad batch of the file, not at whichever a thread reached first.

Memory stays bounded: at most ``workers + 1`` batches are in flight.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """Threads for the per-batch work: one per core, at most 8 (beyond that, decoding is the bound).

    ``MISMATCHSCOPE_THREADS`` overrides it (1: everything on the calling thread).
    """
    env = os.environ.get("MISMATCHSCOPE_THREADS", "").strip()
    if env.isdigit() and int(env) >= 1:
        return int(env)
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)))


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` with ``fn`` on ``workers`` threads, results in input order.

    An exception from ``fn`` is raised when its item's turn comes, after the
    results of every earlier item; the items after it are not waited for.
    """
    workers = default_workers() if workers is None else workers
    if workers <= 1:
        yield from map(fn, items)
        return
    pending: deque[Future] = deque()
    with ThreadPoolExecutor(workers, thread_name_prefix="mismatchscope-pass") as pool:
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) > workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:  # an error or an early stop: drop what has not started
                f.cancel()


def each(fn: Callable[[T], R], items: Iterable[T], workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]`` on ``workers`` threads with every item queued at once, results in input order.

    For a few independent pieces of work whose costs differ tenfold (doctor's causes on one sample): queued at
    once, a thread done with the cheap ones takes the next instead of waiting behind a slow one, as
    :func:`ordered_map`'s bounded window would make it (that bound keeps a pass's batches in memory, which a few
    findings never need). An exception from ``fn`` is raised for the first item, in order, that raised one.
    """
    workers = default_workers() if workers is None else workers
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="mismatchscope-each") as pool:
        return list(pool.map(fn, items))


def keep_freed_memory() -> None:
    """Ask glibc's allocator to reuse freed blocks instead of handing them back to the kernel.

    A pass allocates and frees the same few dozen arrays of a batch over and
    over. By default glibc maps each large block fresh and unmaps it on free,
    so every batch pays its pages again as page faults: a third of a pass's CPU
    time went to the kernel on two cores. Raising the mmap and trim thresholds
    keeps those blocks in the heap; peak memory is unchanged (the same arrays
    at the same moments), only the kernel round trips go. The commands that
    run the pass (report, compare-masks, gate, timeline) call this; probe and
    diagnose, whose processes hold torch and vLLM, do not, and the library
    never changes a host process's allocator. Elsewhere than glibc this does
    nothing.
    """
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    mallopt(M_MMAP_THRESHOLD, 64 << 20)
    mallopt(M_TRIM_THRESHOLD, 256 << 20)


def release_freed_memory() -> None:
    """Hand the memory a finished pass freed back to the kernel, before a second pass in the same process.

    Arrow's allocator and glibc's heap (see :func:`keep_freed_memory`) keep
    freed pages for reuse; over two passes on different threads the second one
    reuses them only in part, so ``gate`` with a quantile limit (a full pass on
    each file) peaked 280 MB above one pass on 10 million tokens. Between
    passes the kept pages are returned, and the second pass peaks as the first.
    """
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim_heap()


def trim_heap() -> None:
    """Hand the free pages inside glibc's heap back to the kernel now (``malloc_trim``; elsewhere nothing).

    With :func:`keep_freed_memory`'s thresholds the heap never shrinks by itself: a step that frees
    one large structure while it builds the next (the per-sequence reduction at the end of a pass)
    calls this between chunks, so the two do not add up in memory.
    """
    malloc_trim = _glibc("malloc_trim")
    if malloc_trim is not None:
        malloc_trim(0)


def _glibc(name: str):
    """A function of glibc's allocator, or None elsewhere (musl, macOS)."""
    try:
        import ctypes

        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
