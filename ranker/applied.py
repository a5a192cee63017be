"""Read-your-writes: a token naming what a response produced, and a wait until the worker applied it.

A write or access response carries a :class:`Token` (sealed for its tenant, :mod:`ranker.tokens`):
for each topic role, the highest offset the request produced per partition. ``recall`` and
``get`` accept it as ``after``; they wait until the stream worker's consumer group has committed
past every offset in it (the worker commits a batch only once it is in the tables and in
Milvus), then until it has also caught up with what was on ``memory-writes`` at that moment:
decisions the worker derived from those writes (a supersession) are applied too. Under
``python -m server`` the worker in the process also says what it has applied and what each batch
derived (``local``): the wait then ends without its commit, and the second step waits for what
the token's batches derived alone. The wait is bounded; past it, :class:`NotAppliedError` says to
retry later.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from memcore import InvalidField
from ranker.cached import Cached
from ranker.errors import Unavailable, kafka_error
from storage.kafka import KafkaConnection
from storage.pulse import Pulse

ROLES = frozenset({"memory-writes", "access-events"})
"""The topic roles a token names: those the service produces to (writes and decisions, accesses)."""
MAX_PARTITION = 2**31 - 1
"""Kafka numbers partitions with signed 32-bit integers."""
MAX_OFFSET = 2**63 - 1
"""Kafka numbers offsets with signed 64-bit integers."""


def _offset(value: object) -> int:
    """A token's offset as it was written: a JSON integer (not 1.5, ``true`` or ``"7"``)."""
    if type(value) is not int:
        raise TypeError(value)
    return value


@dataclass(frozen=True)
class Token:
    """Offsets a response produced: ``{role: {partition: highest offset}}``. Clients never see
    it in the clear: :mod:`ranker.tokens` seals it for the tenant it is issued to. ``given``: the
    text a client sent, when it came from one; ``parts``: the tokens a request gave, when it gave
    several (:meth:`union`), so that a refusal names the one at fault (``after[i]``) as it was sent.
    """

    offsets: Mapping[str, Mapping[int, int]]
    parts: tuple[Token, ...] = field(default=(), compare=False, repr=False)
    given: str = field(default="", compare=False, repr=False)

    def plain(self) -> bytes:
        """The offsets as JSON: what :mod:`ranker.tokens` seals (never sent as it is)."""
        return orjson.dumps(
            {role: {str(p): o for p, o in parts.items()} for role, parts in self.offsets.items()}
        )

    @classmethod
    def from_plain(cls, plain: bytes, given: str, field: str = "after") -> Token:
        """Inverse of :meth:`plain`, for the client's text ``given``. Anything else raises
        :class:`InvalidField` naming ``field``: JSON that is not offsets, a role not in
        :data:`ROLES`, a partition outside [0, :data:`MAX_PARTITION`] or an offset outside
        [0, :data:`MAX_OFFSET`] (no wait could ever see those applied).
        """
        try:
            raw = orjson.loads(plain)
            offsets = {
                str(role): {int(p): _offset(o) for p, o in parts.items()}
                for role, parts in raw.items()
            }
        except (ValueError, TypeError, AttributeError, orjson.JSONDecodeError):
            raise InvalidField(field, given, REFUSED) from None
        _check_offsets(field, given, offsets)
        return cls(offsets, given=given)

    @classmethod
    def union(cls, tokens: Sequence[Token]) -> Token | None:
        """One token covering every given one (None for none): the highest offset per role and
        partition. Its parts are those a client sent (:attr:`given`; the service's own, a
        barrier's ends, are never named by a refusal): several are kept as parts (``after[i]``
        in their order), one is named as it was sent (``after``).
        """
        if not tokens:
            return None
        if len(tokens) == 1:
            return tokens[0]
        offsets: dict[str, dict[int, int]] = {}
        for token in tokens:
            for role, parts in token.offsets.items():
                mine = offsets.setdefault(role, {})
                for p, o in parts.items():
                    mine[p] = max(mine.get(p, -1), o)
        flat = tuple(p for token in tokens for p in (token.parts or (token,)) if p.given)
        if len(flat) == 1:
            return cls(offsets, given=flat[0].given)
        return cls(offsets, flat)

    def named(self, role: str, partition: int, field: str = "after") -> tuple[str, str]:
        """The field and text of the given token that holds this token's offset on ``role``'s
        ``partition``: ``after[i]`` among several given (:attr:`parts`), else ``after``.
        """
        offset = self.offsets[role][partition]
        for i, part in enumerate(self.parts):
            if part.offsets.get(role, {}).get(partition) == offset:
                return f"{field}[{i}]", part.given
        return field, self.given

    @classmethod
    def of(cls, deliveries: list[tuple[str, Any]]) -> Token:
        """From ``(role, RecordMetadata)`` pairs of produced messages."""
        offsets: dict[str, dict[int, int]] = {}
        for role, meta in deliveries:
            parts = offsets.setdefault(role, {})
            parts[meta.partition] = max(parts.get(meta.partition, -1), meta.offset)
        return cls(offsets)


REFUSED = "not a token returned by this service"
ISSUED_CHECK_S = 1.0
"""Seconds a wait goes on before its token is checked against the topics' end offsets."""


def _check_offsets(field: str, text: str, offsets: Mapping[str, Mapping[int, int]]) -> None:
    """Raise InvalidField naming ``field`` (``text``, the token as sent) unless every role is one
    the service produces to and every partition and offset is one Kafka can have.
    """
    for role, parts in offsets.items():
        if role not in ROLES:
            raise InvalidField(field, text, f"{REFUSED} (no topic role {role!r})")
        for partition, offset in parts.items():
            if not 0 <= partition <= MAX_PARTITION or not 0 <= offset <= MAX_OFFSET:
                where = f"{role} partition {partition} offset {offset}"
                raise InvalidField(field, text, f"{REFUSED} ({where} out of range)")


class NotAppliedError(Exception):
    """The worker has not applied a token's messages within the wait; retriable."""

    retriable = True

    def __init__(self, waited_s: float) -> None:
        super().__init__(f"the worker has not applied these writes after {waited_s:.1f} s")
        self.retry_after_s = 1.0


Committed = Callable[[], Awaitable[Mapping[tuple[str, int], int]]]
"""The worker group's committed offsets, ``{(topic role, partition): next offset to apply}``."""
EndOffsets = Callable[[str], Awaitable[Mapping[int, int]]]
"""``{partition: end offset}`` of one topic role."""
Refresh = Callable[[], Awaitable[None]]
"""Makes the next :data:`EndOffsets` call see the topics' partitions as the cluster has them now
(a partition added since is otherwise unknown to it for up to its metadata's age, 5 minutes);
raises :class:`~ranker.errors.Unavailable` when no broker answers."""


class LocalWorker(Protocol):
    """The stream worker in this process, as a wait sees it (``streams.applied.AppliedMarks``
    under ``python -m server``).
    """

    def snapshot(self) -> Mapping[tuple[str, int], int]:
        """Offsets the worker has applied (committed or not), ``{(role, partition): next offset
        not applied}``; only partitions it applied a batch of since it started.
        """

    def derived(self, role: str, offsets: Mapping[int, int]) -> Mapping[int, int] | None:
        """``(role, {partition: offset})`` -> ``{partition: highest offset}`` of what the
        batches that applied those offsets produced to ``memory-writes``, or None when unknown.
        """

    def on_change(self, listener: Callable[[], None]) -> None:
        """Have ``listener`` called each time a batch's marks are published (:meth:`snapshot`
        may have changed).
        """


class AppliedOffsets:
    """Waits on the stream worker's committed offsets, raised to the marks of the worker in this
    process when there is one (``local``). Constructors do no I/O: ``committed`` and
    ``end_offsets`` are the Kafka calls, made only while waiting.
    """

    def __init__(
        self,
        committed: Committed,
        end_offsets: EndOffsets,
        *,
        poll_s: float = 0.05,
        timeout_s: float = 10.0,
        view_caught_up: Callable[[float], Awaitable[bool]] | None = None,
        local: LocalWorker | None = None,
        refresh: Refresh | None = None,
    ) -> None:
        """``view_caught_up(timeout_s)``: after the worker applied a token, wait for the state
        view to have read the worker's changelog as it is then (``StateView.caught_up``);
        ``refresh``: asked before a token naming a partition ``end_offsets`` lacks is refused
        (the partition may have been added since the list was read);
        ``local``: the worker in this process. Its marks end a wait without its commit (and
        without asking Kafka when they cover the token), a change of them wakes waiters at once,
        and what a token's batches derived is waited for instead of all of ``memory-writes``.
        """
        self.local = local
        self._first_ends: dict[str, dict[int, int]] = {}  # role -> last offsets at the first ask
        self.committed = committed
        self.end_offsets = end_offsets
        self.refresh = refresh
        self.view_caught_up = view_caught_up
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        # the worker group's committed offsets, asked of Kafka at most once per ``poll_s`` however
        # many requests wait (one OffsetFetch per waiter and poll made the broker the bottleneck
        # under load); an older answer only makes a waiter wait longer: commits never go back
        self._committed = Cached(committed, poll_s)
        # every waiter looks again at each round's end: a published local mark, or ``poll_s``
        self._pulse = Pulse(poll_s)
        if local is not None:
            local.on_change(self._pulse.fire)

    async def wait(self, token: Token, derived_role: str = "memory-writes") -> None:
        """Return once every offset in ``token`` is applied, then what those batches derived on
        ``derived_role`` (when unknown: all it held at that moment), then once the state view
        holds the result; raise :class:`NotAppliedError` after ``timeout_s``, Kafka's answers
        included (a broker that takes connections and answers nothing holds no read longer).
        """
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._until(token.offsets, started, issued=token)
                if derived_role in token.offsets:
                    derived = await self._derived(derived_role, token.offsets[derived_role])
                    if derived:
                        await self._until({derived_role: derived}, started)
                if self.view_caught_up is not None:
                    left = self.timeout_s - (time.monotonic() - started)
                    if left <= 0 or not await self.view_caught_up(left):
                        raise NotAppliedError(time.monotonic() - started)
        except TimeoutError:
            raise NotAppliedError(time.monotonic() - started) from None

    async def _derived(self, role: str, offsets: Mapping[int, int]) -> dict[int, int]:
        """``{partition: highest offset}`` of ``role`` to be applied after ``offsets``: what
        their batches derived (``local``) plus what the topic held when this ranker first
        asked (derived by an earlier process); when not known, everything the topic holds now.
        """
        here = self.local.derived(role, offsets) if self.local is not None else None
        if here is None:
            return _last(await self.end_offsets(role))
        if role not in self._first_ends:
            self._first_ends[role] = _last(await self.end_offsets(role))
        found = dict(self._first_ends[role])
        for partition, offset in here.items():
            found[partition] = max(found.get(partition, -1), offset)
        return found

    async def _until(
        self, wanted: Mapping[str, Mapping[int, int]], started: float, issued: Token | None = None
    ) -> None:
        """Return once the local marks, or the commits raised to them (the commits of an earlier
        process, another worker's partitions), are past every offset in ``wanted``. ``issued``:
        the token ``wanted`` comes from, checked against the topics once the wait is past
        :data:`ISSUED_CHECK_S` (:meth:`_check_issued`).
        """
        check_at = ISSUED_CHECK_S if issued is not None else float("inf")
        while True:
            beat = self._pulse.next()  # before looking: a mark published meanwhile ends it
            here = self.local.snapshot() if self.local is not None else {}
            if _past(here, wanted):
                return
            done = dict(await self._committed())
            for key, offset in here.items():
                done[key] = max(done.get(key, 0), offset)
            if _past(done, wanted):
                return
            waited = time.monotonic() - started
            if waited >= self.timeout_s:
                raise NotAppliedError(waited)
            if waited >= check_at and issued is not None:
                check_at = float("inf")
                await self._check_issued(issued)
            await Pulse.wait(beat)

    async def _check_issued(self, token: Token) -> None:
        """Raise InvalidField (``after``) when an offset of ``token`` is at or past the end of its
        partition, or names a partition its topic lacks: no worker will ever apply it, and every
        read carrying it would wait out ``timeout_s`` and be told to retry, holding an in-flight
        slot each time (a client's token from before the topics were made anew). Asked of
        Kafka only for a wait past :data:`ISSUED_CHECK_S`: a token is issued once its records
        are acknowledged by all in-sync replicas, so its offsets lie below the end by then. The
        reason names no offset: where a shared partition ends tells of other tenants' traffic.
        """
        for role, parts in token.offsets.items():
            ends = await self.end_offsets(role)
            if self.refresh is not None and not ends.keys() >= parts.keys():
                await self.refresh()
                ends = await self.end_offsets(role)
            for partition, offset in parts.items():
                end = ends.get(partition)
                if end is None or offset >= end:
                    name, given = token.named(role, partition)
                    why = "its topics were made anew since it was issued"
                    raise InvalidField(name, given, f"{REFUSED} ({why})")


def _past(done: Mapping[tuple[str, int], int], wanted: Mapping[str, Mapping[int, int]]) -> bool:
    """True when ``done`` (next offsets to apply) lies past every offset in ``wanted``."""
    return all(
        done.get((role, p), 0) > offset
        for role, parts in wanted.items()
        for p, offset in parts.items()
    )


def _last(ends: Mapping[int, int]) -> dict[int, int]:
    """``{partition: last offset}`` from end offsets (empty partitions left out)."""
    return {p: e - 1 for p, e in ends.items() if e > 0}


class KafkaOffsets:
    """The two Kafka reads :class:`AppliedOffsets` needs: the worker group's committed offsets
    (admin API) and end offsets (a consumer outside any group). ``start()`` connects.
    """

    def __init__(
        self, kafka: KafkaConnection | str, group_id: str, topics: Mapping[str, str]
    ) -> None:
        """``topics``: topic role -> full topic name."""
        self.kafka = KafkaConnection.of(kafka)
        self.group_id = group_id
        self.topics = dict(topics)
        self._roles = {name: role for role, name in self.topics.items()}
        self._admin: Any = None
        self._consumer: Any = None

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer  # noqa: PLC0415 - only a process that serves needs it
        from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415

        self._admin = AIOKafkaAdminClient(**self.kafka.client())
        await self._admin.start()
        self._consumer = AIOKafkaConsumer(**self.kafka.client(), enable_auto_commit=False)
        await self._consumer.start()

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()
        self._admin = self._consumer = None

    async def committed(self) -> Mapping[tuple[str, int], int]:
        """The group's committed offsets by (role, partition); none while the broker says to
        retry (e.g. its group coordinator is not available yet): the caller's wait goes on.
        Another Kafka error raises :func:`~ranker.errors.kafka_error`'s (503, or 500 for a refusal).
        """
        from aiokafka.errors import KafkaError  # noqa: PLC0415

        try:
            found = await self._admin.list_consumer_group_offsets(self.group_id)
        except KafkaError as exc:
            if getattr(exc, "retriable", False):
                return {}
            raise kafka_error("committed offsets", exc) from exc
        return {
            (self._roles[tp.topic], tp.partition): meta.offset
            for tp, meta in found.items()
            if tp.topic in self._roles and meta is not None and meta.offset >= 0
        }

    async def refresh(self) -> None:
        """Read the cluster's topics and partitions again (:data:`Refresh`): a failure leaves
        the list as it was, so it is a retriable error, not a list to judge a token by.
        """
        if not await self._consumer._client.force_metadata_update():  # no public call does it
            raise Unavailable("kafka", "metadata", "no broker answered")

    async def end_offsets(self, role: str) -> Mapping[int, int]:
        from aiokafka import TopicPartition  # noqa: PLC0415
        from aiokafka.errors import KafkaError  # noqa: PLC0415

        topic = self.topics[role]
        partitions = self._consumer.partitions_for_topic(topic) or set()
        if not partitions:
            await self.refresh()
            partitions = self._consumer.partitions_for_topic(topic) or set()
        try:
            ends = await self._consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        except KafkaError as exc:
            raise kafka_error("end offsets", exc) from exc
        return {tp.partition: offset for tp, offset in ends.items()}
