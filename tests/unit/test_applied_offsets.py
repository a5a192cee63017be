"""Read-your-writes waits share the worker's committed offsets: Kafka is asked once per poll,
not once per waiting request.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from memcore import InvalidField
from ranker.__main__ import build
from ranker.applied import AppliedOffsets, KafkaOffsets, NotAppliedError, Token
from ranker.errors import Unavailable
from ranker.service import RecallService
from ranker.settings import RankerSettings
from ranker.tokens import TokenSeal
from storage.embedding import Hashing

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
        {"access-events": {"0": 1.5}},
        {"access-events": {"0": True}},
        {"access-events": {"0": "7"}},
        ["memory-writes"],
    ],
    ids=[
        "unknown role",
        "keys role",
        "partition 2**31",
        "partition 2**70",
        "partition -1",
        "offset 2**63",
        "offset -1",
        "offset 1.5",
        "offset true",
        "offset text",
        "a list",
    ],
)
def test_offsets_the_service_never_issues_are_refused_as_a_malformed_token(offsets: object) -> None:
    """Such a token would open, then wait the whole timeout and answer a retriable 503: it is
    refused at once, with the error (and field) a malformed token gets."""
    with pytest.raises(InvalidField) as err:
        Token.from_plain(orjson.dumps(offsets), "v2.given", "after[1]")
    assert (err.value.field, err.value.value) == ("after[1]", "v2.given")
    assert str(err.value.reason).startswith("not a token returned by this service")


@pytest.mark.parametrize(
    "offsets",
    [{0: 500}, {3: 5}],  # past the end of its partition; a partition the topic lacks
)
async def test_a_token_no_worker_will_ever_apply_is_refused_once_the_wait_runs_long(
    monkeypatch: pytest.MonkeyPatch, offsets: dict[int, int]
) -> None:
    """Such a token (a client's from before the topics were made anew) waited out the whole
    timeout on every read, then was told to retry, holding an in-flight slot each time. The
    refusal names no offset: where a shared partition ends tells of other tenants' traffic.
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
    assert "made anew" in refused.value.reason
    assert not re.search(r"\d", refused.value.reason), refused.value.reason
    # among several given, the one at fault is named: a client's session drops only that one
    # (it dropped its own write's token with a caller's stale one, and stopped waiting for it)
    seal = TokenSeal()
    issued = await seal.seal(Token({"memory-writes": {0: 50}}), "acme")
    stale = await seal.seal(Token({"memory-writes": offsets}), "acme")
    merged = await seal.read([issued, stale], "acme")
    assert merged is not None
    with pytest.raises(InvalidField) as among:
        await applied.wait(merged, derived_role="none")
    assert (among.value.field, among.value.value) == ("after[1]", stale)
    lagging = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=0.2)
    with pytest.raises(NotAppliedError):  # issued, not applied yet: retry later, as before
        await lagging.wait(Token({"memory-writes": {0: 99}}), derived_role="none")


class Cluster:
    """Four partitions known to the end-offsets client; ``added`` more in the cluster itself."""

    def __init__(self, added: dict[int, int]) -> None:
        self.known = {0: 10, 1: 10, 2: 10, 3: 10}
        self.added = added
        self.refreshed = 0
        self.asked = 0

    async def committed(self) -> Mapping[tuple[str, int], int]:
        self.asked += 1  # the worker applies partition 5's write at the 20th ask (0.2 s)
        return {("memory-writes", 5): 4 if self.asked >= 20 else 0}

    async def end_offsets(self, role: str) -> Mapping[int, int]:
        return dict(self.known)

    async def refresh(self) -> None:
        self.refreshed += 1
        self.known.update(self.added)


async def test_a_token_on_a_partition_added_since_the_list_was_read_is_waited_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The end-offsets client kept the partitions it had read for up to 5 minutes, so a token
    of a write on a partition an operator had just added was refused as "not one this service
    returned" after a second of waiting. The list is read again before a token is refused.
    """
    monkeypatch.setattr("ranker.applied.ISSUED_CHECK_S", 0.02)
    token = Token({"memory-writes": {5: 3}})
    grown = Cluster(added={4: 10, 5: 10})
    applied = AppliedOffsets(
        grown.committed, grown.end_offsets, poll_s=0.01, timeout_s=30, refresh=grown.refresh
    )
    await applied.wait(token, derived_role="none")
    assert grown.refreshed == 1
    same = Cluster(added={})  # still no partition 5 after reading the list again: refused
    refused = AppliedOffsets(
        same.committed, same.end_offsets, poll_s=0.01, timeout_s=30, refresh=same.refresh
    )
    with pytest.raises(InvalidField) as refusal:
        await refused.wait(token, derived_role="none")
    assert refusal.value.field == "after"
    assert same.refreshed == 1


def test_the_ranker_reads_the_partitions_again_before_refusing_a_token() -> None:
    """The wiring of the refresh above: the service ``python -m ranker`` builds (no I/O yet)."""
    settings = RankerSettings()
    app = build(settings, store=cast(Any, object()), embedder=Hashing(settings.embedding_dim))
    applied = app.state.service.applied
    assert applied.refresh is not None
    assert applied.refresh.__self__ is applied.end_offsets.__self__  # the same Kafka client


class Metadata:
    """The end-offsets client's metadata: a refresh answered or not, counted."""

    def __init__(self, *, answers: bool) -> None:
        self.answers = answers
        self.asked = 0

    async def force_metadata_update(self) -> bool:
        self.asked += 1
        return self.answers


async def test_a_refresh_no_broker_answers_is_retriable_not_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiokafka answers False when no broker answered a metadata request, leaving the list as
    it was: the token was refused (422) by a list the refresh never updated.
    """
    monkeypatch.setattr("ranker.applied.ISSUED_CHECK_S", 0.02)
    offsets = KafkaOffsets("unused:1", "group", {"memory-writes": "t.memory-writes"})
    offsets._consumer = SimpleNamespace(_client=Metadata(answers=False))
    grown = Cluster(added={4: 10, 5: 10})
    applied = AppliedOffsets(
        grown.committed, grown.end_offsets, poll_s=0.01, timeout_s=30, refresh=offsets.refresh
    )
    with pytest.raises(Unavailable) as failed:
        await applied.wait(Token({"memory-writes": {5: 3}}), derived_role="none")
    assert failed.value.retriable
    offsets._consumer = SimpleNamespace(_client=Metadata(answers=True))
    await offsets.refresh()  # answered: no error


async def test_a_tenants_erase_waits_for_writes_on_partitions_added_since_the_list_was_read() -> (
    None
):
    """The erase's barrier took the end offsets of the partitions the client knew: a write on a
    partition added since was not waited for, and its memory could escape the erase.
    """
    grown = Cluster(added={4: 10, 5: 10})
    waited: list[Token] = []
    applied = AppliedOffsets(grown.committed, grown.end_offsets, refresh=grown.refresh)
    service = RecallService(cast(Any, object()), Hashing(4), cast(Any, _no_send), applied=applied)

    async def wait(token: Token | None) -> None:
        assert token is not None
        waited.append(token)

    service.wait = wait  # type: ignore[method-assign,assignment]
    await service.barrier()
    (token,) = waited
    assert set(token.offsets["memory-writes"]) == {0, 1, 2, 3, 4, 5}


async def _no_send(*_: object) -> None:
    raise AssertionError("nothing is produced")
