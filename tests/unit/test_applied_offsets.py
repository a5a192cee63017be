"""Read-your-writes waits share the worker's committed offsets: Kafka is asked once per poll,
not once per waiting request.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping

import orjson
import pytest

from memcore import InvalidField
from ranker.applied import AppliedOffsets, NotAppliedError, Token

pytestmark = pytest.mark.anyio


class Group:
    """A worker group whose committed offset reaches ``applied_after`` on the given ask."""

    def __init__(self, applied_after: int, fail: Exception | None = None) -> None:
        self.asked = 0
        self.applied_after = applied_after
        self.fail = fail

    async def committed(self) -> Mapping[tuple[str, int], int]:
        self.asked += 1
        await asyncio.sleep(0)  # an answer takes a round trip
        if self.fail is not None:
            raise self.fail
        return {("memory-writes", 0): 100 if self.asked >= self.applied_after else 0}

    async def end_offsets(self, role: str) -> Mapping[int, int]:
        return {}


async def test_a_hundred_waiters_share_each_ask() -> None:
    group = Group(applied_after=3)
    applied = AppliedOffsets(group.committed, group.end_offsets, poll_s=0.01, timeout_s=30)
    token = Token({"memory-writes": {0: 42}})
    await asyncio.gather(*(applied.wait(token, derived_role="none") for _ in range(100)))
    # one ask per poll for all of them (three polls until applied), not one per waiter and poll
    assert 3 <= group.asked < 10


async def test_a_failed_ask_reaches_every_waiter_and_the_next_ask_is_fresh() -> None:
    group = Group(applied_after=1, fail=RuntimeError("broker gone"))
    applied = AppliedOffsets(group.committed, group.end_offsets, poll_s=0.01, timeout_s=30)
    token = Token({"memory-writes": {0: 42}})
    results = await asyncio.gather(
        *(applied.wait(token, derived_role="none") for _ in range(5)), return_exceptions=True
    )
    assert [str(r) for r in results] == ["broker gone"] * 5
    assert group.asked == 1
    group.fail = None
    await applied.wait(token, derived_role="none")  # no stale failure kept
    assert group.asked == 2


async def test_a_waiter_never_passes_on_an_older_answer() -> None:
    group = Group(applied_after=10**9)  # never applied
    applied = AppliedOffsets(group.committed, group.end_offsets, poll_s=0.01, timeout_s=0.05)
    with pytest.raises(NotAppliedError):
        await applied.wait(Token({"memory-writes": {0: 42}}), derived_role="none")


def _token(offsets: object) -> str:
    return "v1." + base64.urlsafe_b64encode(orjson.dumps(offsets)).decode().rstrip("=")


@pytest.mark.parametrize("stalls", ["committed", "end_offsets"])
async def test_a_broker_that_never_answers_holds_a_wait_no_longer_than_its_timeout(
    stalls: str,
) -> None:
    """The timeout was checked between asks only: a broker that took connections and answered
    nothing held every read with a token for as long as the client's own request timeout (40 s).
    """
    never = asyncio.Event()

    async def committed() -> Mapping[tuple[str, int], int]:
        if stalls == "committed":
            await never.wait()
        return {("memory-writes", 0): 10}  # the token's writes are applied

    async def end_offsets(role: str) -> Mapping[int, int]:
        await never.wait()
        return {0: 10}

    applied = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=0.1)
    with pytest.raises(NotAppliedError):  # not the test's own guard below
        await asyncio.wait_for(applied.wait(Token({"memory-writes": {0: 5}})), 10)


def test_a_token_round_trips_through_its_text() -> None:
    token = Token({"memory-writes": {0: 5, 3: 2**63 - 1}, "access-events": {2**31 - 1: 0}})
    assert Token.decode(token.encode()) == token


@pytest.mark.parametrize(
    "offsets",
    [
        {"bogus-role": {"0": 1}},
        {"memory-keys": {"0": 1}},  # a topic the service reads, never a token's
        {"memory-writes": {str(2**31): 1}},
        {"memory-writes": {str(2**70): 1}},
        {"memory-writes": {"-1": 1}},
        {"access-events": {"0": 2**63}},
        {"access-events": {"0": -1}},
    ],
    ids=[
        "unknown role",
        "keys role",
        "partition 2**31",
        "partition 2**70",
        "partition -1",
        "offset 2**63",
        "offset -1",
    ],
)
def test_a_token_the_service_never_issues_is_refused_as_a_malformed_one(offsets: object) -> None:
    """Such a token would decode, then wait the whole timeout and answer a retriable 503: it is
    refused at once, with the error (and field) a malformed token gets."""
    with pytest.raises(InvalidField) as malformed:
        Token.decode("v1.!!!")
    with pytest.raises(InvalidField) as err:
        Token.decode(_token(offsets))
    assert (err.value.field, err.value.value) == ("after", _token(offsets))
    assert str(err.value.reason).startswith(malformed.value.reason), err.value.reason
    with pytest.raises(InvalidField) as among:
        Token.merged([_token({"memory-writes": {"0": 1}}), _token(offsets)])
    assert among.value.field == "after[1]"


@pytest.mark.parametrize(
    ("offsets", "why"),
    [
        ({0: 500}, "memory-writes partition 0 ends at offset 100, before 500"),
        ({3: 5}, "memory-writes has no partition 3"),
    ],
)
async def test_a_token_no_worker_will_ever_apply_is_refused_once_the_wait_runs_long(
    monkeypatch: pytest.MonkeyPatch, offsets: dict[int, int], why: str
) -> None:
    """Such a token (forged, or a client's from before the topics were made anew) waited out the
    whole timeout on every read, then was told to retry, holding an in-flight slot each time.
    """
    monkeypatch.setattr("ranker.applied.ISSUED_CHECK_S", 0.05)

    async def committed() -> Mapping[tuple[str, int], int]:
        return {("memory-writes", 0): 60}  # the worker lags: offsets 60-99 not applied yet

    async def end_offsets(role: str) -> Mapping[int, int]:
        return {0: 100, 1: 100}

    applied = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=30)
    with pytest.raises(InvalidField) as refused:
        await applied.wait(Token({"memory-writes": offsets}), derived_role="none")
    assert refused.value.field == "after"
    assert why in str(refused.value)
    # among several given, the one at fault is named: a client's session drops only that one
    # (it dropped its own write's token with a caller's stale one, and stopped waiting for it)
    issued = Token({"memory-writes": {0: 50}}).encode()
    stale = Token({"memory-writes": offsets}).encode()
    merged = Token.merged([issued, stale])
    assert merged is not None
    with pytest.raises(InvalidField) as among:
        await applied.wait(merged, derived_role="none")
    assert (among.value.field, among.value.value) == ("after[1]", stale)
    lagging = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=0.2)
    with pytest.raises(NotAppliedError):  # issued, not applied yet: retry later, as before
        await lagging.wait(Token({"memory-writes": {0: 99}}), derived_role="none")
