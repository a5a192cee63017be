"""The process's heap: a slow full collection freezes what survived it; a dropped read is trimmed.

A service process holds hundreds of thousands of long-lived objects (the hot cache's and the
state view's rows, Faust's and FastAPI's machinery). CPython's full collection (generation 2)
walks every one of them with every thread stopped, and under load it comes every few seconds
(each request leaves a few dozen objects promoted to generation 2 before they die): 350-470 ms
each at 10,000 memories here, the p99 of a recall (docs/benchmarks.md). With
:func:`freeze_slow_collections` a full collection that took longer than the limit ends by moving
its survivors to the permanent generation (:func:`gc.freeze`), so the next ones walk only the
objects that came since, until those are many enough to be slow in turn.

The cost: garbage that forms a reference cycle among frozen objects is never reclaimed, with
whatever only that cycle references (reference counting still frees every object that is not
in such a cycle). Each slow collection freezes what is alive then, so this adds up over a
process's life: objects alive at some slow collection that later die in a cycle. In-flight
requests are what such a moment catches besides long-lived state; once that state is frozen,
the next slow collection waits until enough new long-lived objects have come for walking them
to take the limit again.

:func:`trim_heap` hands the C heap's free pages back to the operating system once a start-up's
bulk read is dropped.
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Callable
from typing import Any


def freeze_slow_collections(limit_ms: float) -> Callable[[], None]:
    """Freeze the survivors of every full collection that takes longer than ``limit_ms``
    (milliseconds; 0: of every full collection). Returns the function that removes the policy
    (what was frozen stays frozen). Process-wide: call once, at start-up.
    """
    started: list[float] = []

    def on_collection(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:  # only a full collection (of the oldest generation)
            return
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started and (time.perf_counter() - started[0]) * 1000 >= limit_ms:
            gc.freeze()

    gc.callbacks.append(on_collection)
    return lambda: gc.callbacks.remove(on_collection)


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the operating system (glibc's ``malloc_trim``).

    A start-up that reads the changelogs (bytes values, gigabytes at 1M memories) builds the hot
    cache's long-lived rows after them; once the read is dropped, its space sits in the heap
    below live blocks, where the allocator keeps it (3.6 GB at 1M memories, docs/benchmarks.md).
    Pages touched again later fault back in. Returns True when memory was released; False when
    none was, or where the C library has no such call (not glibc): harmless either way.
    """
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    return bool(trim(0))
