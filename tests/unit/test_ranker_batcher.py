from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import pytest

from ranker.batcher import Batcher, BatchStats, Overloaded, Stopping

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_concurrent_submits_share_a_batch_and_keep_their_results() -> None:
    calls: list[list[int]] = []
    stats: list[BatchStats] = []

    async def handler(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        return [i * 10 for i in items]

    async def main() -> list[int]:
        batcher: Batcher[int, int] = Batcher(
            handler, max_batch=8, max_wait_s=0.05, on_batch=stats.append
        )
        await batcher.start()
        try:
            return list(await asyncio.gather(*(batcher.submit(i) for i in range(20))))
        finally:
            await batcher.stop()

    assert run(main()) == [i * 10 for i in range(20)]
    assert [len(c) for c in calls] == [8, 8, 4]  # size-bounded, then the timeout flushes the rest
    assert [s.size for s in stats] == [8, 8, 4]


def test_requests_already_waiting_share_a_batch_without_any_wait() -> None:
    calls: list[list[int]] = []

    async def handler(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        return list(items)

    async def main() -> list[int]:
        batcher: Batcher[int, int] = Batcher(handler, max_batch=4, max_wait_s=0.0)
        await batcher.start()
        try:  # queued before the batching task runs: all waiting when it takes the first
            return list(await asyncio.gather(*(batcher.submit(i) for i in range(6))))
        finally:
            await batcher.stop()

    assert run(main()) == list(range(6))
    assert calls == [[0, 1, 2, 3], [4, 5]]


def test_the_loop_runs_between_batches_of_a_handler_that_never_suspends() -> None:
    order: list[object] = []

    async def handler(items: Sequence[int]) -> list[int]:  # as the kernel on the loop
        if not order:
            asyncio.get_running_loop().call_soon(order.append, "other work")
        order.append(list(items))
        return list(items)

    async def main() -> None:
        batcher: Batcher[int, int] = Batcher(handler, max_batch=2, max_wait_s=0.0)
        await batcher.start()
        try:
            await asyncio.gather(*(batcher.submit(i) for i in range(6)))
        finally:
            await batcher.stop()

    run(main())
    assert order == [[0, 1], "other work", [2, 3], [4, 5]]


def test_stop_answers_the_batch_being_gathered() -> None:
    async def handler(items: Sequence[int]) -> list[int]:
        return list(items)

    async def main() -> None:
        batcher: Batcher[int, int] = Batcher(handler, max_batch=8, max_wait_s=10.0)
        await batcher.start()
        waiting = asyncio.ensure_future(batcher.submit(1))
        await asyncio.sleep(0.05)  # taken from the queue: the batch waits for more
        await batcher.stop()
        with pytest.raises(Stopping, match="batcher stopped"):
            await asyncio.wait_for(waiting, 5)

    run(main())


def test_a_lone_request_waits_at_most_the_timeout() -> None:
    async def handler(items: Sequence[str]) -> list[str]:
        return [s.upper() for s in items]

    async def main() -> str:
        batcher: Batcher[str, str] = Batcher(handler, max_batch=100, max_wait_s=0.01)
        await batcher.start()
        try:
            return await batcher.submit("a")
        finally:
            await batcher.stop()

    assert run(main()) == "A"


def test_a_full_queue_is_overload_with_a_retry_hint() -> None:
    release = asyncio.Event()

    async def handler(items: Sequence[int]) -> list[int]:
        await release.wait()
        return list(items)

    async def main() -> Overloaded:
        batcher: Batcher[int, int] = Batcher(handler, max_batch=1, max_wait_s=0, max_queue=2)
        await batcher.start()
        try:
            first = asyncio.create_task(batcher.submit(0))  # taken by the loop, blocks in handler
            await asyncio.sleep(0.01)
            queued = [asyncio.create_task(batcher.submit(i)) for i in (1, 2)]
            await asyncio.sleep(0.01)
            with pytest.raises(Overloaded) as err:
                await batcher.submit(3)
            release.set()
            assert await first == 0
            assert [await q for q in queued] == [1, 2]
            return err.value
        finally:
            await batcher.stop()

    error = run(main())
    assert error.retriable
    assert error.retry_after_s > 0


def test_handler_errors_reach_every_waiter_and_the_loop_goes_on() -> None:
    async def handler(items: Sequence[int]) -> list[int]:
        if 13 in items:
            raise ValueError("unlucky batch")
        return list(items)

    async def main() -> tuple[list[object], int]:
        batcher: Batcher[int, int] = Batcher(handler, max_batch=2, max_wait_s=0.05)
        await batcher.start()
        try:
            failed = await asyncio.gather(
                batcher.submit(13), batcher.submit(1), return_exceptions=True
            )
            return list(failed), await batcher.submit(7)
        finally:
            await batcher.stop()

    failed, after = run(main())
    assert all(isinstance(f, ValueError) for f in failed)
    assert after == 7


def test_invalid_settings() -> None:
    async def handler(items: Sequence[int]) -> list[int]:
        return list(items)

    with pytest.raises(ValueError, match="max_batch=0"):
        Batcher(handler, max_batch=0)


def test_running_follows_start_and_stop() -> None:
    async def handler(items: Sequence[int]) -> list[int]:
        return list(items)

    async def main() -> list[bool]:
        batcher: Batcher[int, int] = Batcher(handler, max_batch=2, max_wait_s=0.01)
        seen = [batcher.running]
        await batcher.start()
        seen.append(batcher.running)
        await batcher.stop()
        return [*seen, batcher.running]

    assert run(main()) == [False, True, False]


def test_a_submit_after_stop_is_refused_not_left_waiting() -> None:
    async def handler(items: Sequence[int]) -> list[int]:
        return list(items)

    async def main() -> None:
        batcher: Batcher[int, int] = Batcher(handler, max_batch=4, max_wait_s=0.01)
        await batcher.start()
        assert await batcher.submit(1) == 1
        await batcher.stop()
        with pytest.raises(Stopping, match="batcher stopped"):
            await asyncio.wait_for(batcher.submit(2), 2.0)  # a hang would time out instead

    run(main())


def test_stop_during_a_submit_that_wakes_the_gathering_returns() -> None:
    """A submit that wakes the batch's gathering in the tick stop() cancels it (Python 3.11's
    wait_for returned the item and dropped the cancel: stop() never returned).
    """

    async def handler(items: Sequence[int]) -> list[int]:
        return list(items)

    async def main() -> None:
        batcher: Batcher[int, int] = Batcher(handler, max_batch=8, max_wait_s=60.0)
        await batcher.start()
        first = asyncio.ensure_future(batcher.submit(1))
        await asyncio.sleep(0.05)  # item 1 taken; the batch gathers for up to 60 s (stop ends it)
        second = asyncio.ensure_future(batcher.submit(2))
        await asyncio.wait_for(batcher.stop(), 3.0)
        assert not batcher.running
        for waiting in (first, second):
            with pytest.raises(Stopping, match="batcher stopped"):
                await waiting

    run(main())


def test_nothing_a_handler_or_the_hook_does_ends_the_loop() -> None:
    answers: list[object] = ["no len", asyncio.CancelledError(), [7]]

    async def handler(items: Sequence[int]) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return 5 if answer == "no len" else answer

    def hook(_stats: BatchStats) -> None:
        raise ValueError("metrics")

    async def main() -> list[str]:
        batcher: Batcher[int, int] = Batcher(handler, max_batch=1, max_wait_s=0, on_batch=hook)
        await batcher.start()
        seen = []
        for i in range(3):
            try:
                seen.append(str(await asyncio.wait_for(batcher.submit(i), 2.0)))
            except (TypeError, RuntimeError) as exc:
                seen.append(type(exc).__name__)
        assert batcher.running
        await batcher.stop()
        return seen

    assert run(main()) == ["TypeError", "RuntimeError", "7"]
