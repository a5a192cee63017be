"""The Faust app: topics, tables and the two agents (writes, access).

Agents are thin: take a batch, let :class:`~streams.processor.Processor` decode and reduce it into
the tables, compute what it needs (embeddings, LLM importance), sync the touched memories to Milvus,
produce audit and dead-letter records, and only then ask for the next batch (which acknowledges
this one). Before it commits offsets the worker waits until the broker has acknowledged every
record its batches produced so far, table changelogs included (:mod:`streams.flush`), so a crash
redelivers events that the reducer then skips by offset: counts stay exact.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import faust
import orjson
from aiokafka.errors import KafkaError
from faust.streams import _current_event
from faust.types import TP

from memcore import (
    SUPERSEDABLE,
    ImportanceDecision,
    Lifecycle,
    MemoryState,
    Purge,
    Retire,
    SupersessionPolicy,
    Version,
    decide,
    fact_of,
    fact_stem,
    llm_candidates,
    llm_prompt,
    newer_says_new,
    resolve_importance,
    superseding,
)
from memcore.vectors import cosine
from storage import Document, Filters, Hit, MemoryRow, MilvusStore, StorageError, from_us
from storage.embedding import Embedder
from storage.kafka import PRODUCER_BATCH_BYTES, KafkaConnection
from storage.key_log import KeyLogError
from storage.milvus import ANY_STATE
from storage.records import (
    ConsolidationRequest,
    Limits,
    RecordError,
    WriteRecord,
    decode_consolidation,
)
from storage.rows import live_values, to_us, with_live
from storage.sealing import seal_write
from storage.tenant_log import TenantLogError
from storage.tenants import TenantRegistry, Tenants
from streams import topics
from streams.applied import AppliedMarks, offset_ranges
from streams.consolidation import decision_records, plan_tenant, report
from streams.flush import ExactFlush, exact_flush
from streams.llm import LlmImportance
from streams.metrics import WorkerMetrics
from streams.processor import (
    Batch,
    Inbound,
    Outbound,
    Processor,
    Statement,
    contained,
    dead_letter,
    decision_record,
    unchecked,
)
from streams.rebuild import ResyncMarker, resync_on_failure
from streams.settings import WorkerSettings

log = logging.getLogger(__name__)

KEYS_RETRY_S = 1.0
"""Seconds between tries of a key erasure the worker must not give up (:meth:`erase_keys`)."""
T = TypeVar("T")


class Neighbours(Protocol):
    """``MilvusStore.search``'s answer for one tenant (the ``n`` nearest rows under ``filters``
    for each vector, best first), or None when this source cannot answer it exactly. Blocking;
    may raise ``StorageError``.
    """

    def __call__(
        self, tenant_id: str, vectors: Sequence[Sequence[float]], n: int, filters: Filters
    ) -> list[list[Hit]] | None: ...


class TenantRows(Protocol):
    """``MilvusStore.query``'s answer for one tenant under ``ANY_STATE`` (every row, any state),
    or None when this source cannot answer it exactly. Blocking; may raise ``StorageError``.
    """

    def __call__(self, tenant_id: str) -> list[MemoryRow] | None: ...


@dataclass
class Services:
    """What the agents use besides Kafka. Started before the app runs (metrics need no start;
    serving them is the caller's choice).
    """

    store: MilvusStore
    embedder: Embedder
    llm: LlmImportance | None = None
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    # where the supersession check looks for a tenant's nearest memories before asking
    # ``store`` (``python -m server``: its ranker's hot cache); None: ``store.search`` alone
    neighbours: Neighbours | None = None
    # where consolidation reads a tenant's rows before asking ``store`` (``python -m server``:
    # its ranker's hot cache); None: ``store.query`` alone
    tenant_rows: TenantRows | None = None
    # the tenants read at start-up (``MNEMO_TENANTS`` or ``MNEMO_TENANTS_FILE``), under the
    # tenants topic's records; default: none (the topic's alone)
    registry: TenantRegistry = field(default_factory=lambda: TenantRegistry({}))


def nearest(
    services: Services,
    tenant_id: str,
    vectors: Sequence[Sequence[float]],
    n: int,
    filters: Filters,
) -> list[list[Hit]]:
    """The nearest memories for the supersession check: from :attr:`Services.neighbours` where
    it answers (on Milvus Lite a search is a pass over the whole collection, once per batch),
    else from Milvus; counted by source. Blocking; raises ``StorageError``.
    """
    found = None
    if services.neighbours is not None:
        found = services.neighbours(tenant_id, vectors, n, filters)
    services.metrics.supersession_searches.labels("milvus" if found is None else "hot").inc()
    if found is None:
        found = services.store.search(tenant_id, vectors, n, filters)
    return found


def stored_rows(services: Services, tenant_id: str) -> list[MemoryRow]:
    """A tenant's rows for consolidation: from :attr:`Services.tenant_rows` where it answers (on
    Milvus Lite a tenant's query is a pass over the whole collection, once per tenant per
    consolidation), else from Milvus; counted by source. Blocking; raises ``StorageError``.
    """
    found = None
    if services.tenant_rows is not None:
        found = services.tenant_rows(tenant_id)
    services.metrics.consolidation_reads.labels("milvus" if found is None else "hot").inc()
    if found is None:
        found = services.store.every_row(tenant_id, ANY_STATE)
    return found


def consolidatable(
    stored: Sequence[MemoryRow], state_of: Callable[[str], MemoryState | None]
) -> list[MemoryRow]:
    """``stored`` rows with the live fields of their table state (a row whose memory has none
    here, another worker's partition, is kept as stored), without the memories the table holds
    as purged: their Milvus rows are deleted, or are at their batch's sync, and a cache may hold
    them a while longer (the view sends a purge as a state change, not a removal).
    """
    rows = []
    for row in stored:
        state = state_of(row.key)
        if state is None:
            rows.append(row)
        elif not state.purged:
            rows.append(with_live(row, live_values(state)))
    return rows


def scope_of(state: MemoryState) -> tuple[str, str]:
    """A memory's scope for supersession (:attr:`memcore.Version.scope`): its ``(agent_id,
    user_id)``, "" for none, as its row holds them; the session is no part of it.
    """
    return (state.agent_id or "", state.user_id or "")


def stem_hits(
    vector: Sequence[float], at: datetime, content: str, hits: Sequence[Hit]
) -> list[Hit]:
    """The hits of a statement's fact's stem (``content`` said at ``at``) whose pair with it
    :func:`memcore.newer_says_new` keeps (a hit dated by its creation, as
    :meth:`StreamWorker.compared` dates a neighbour), :func:`rescored` to the statement's
    ``vector``: an older value written after its newer one (an import, two partitions applied
    out of order) finds it as the newer would have found the older.
    """
    return rescored(
        vector,
        [
            h
            for h in hits
            if newer_says_new(at, content, from_us(h.row.created_at_us), h.row.content)
        ],
    )


def rescored(vector: Sequence[float], hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` of another query with their cosine to ``vector`` (a statement's, for hits of its
    fact's stem), from the rows' vectors; a row without a vector of that length is left out.
    """
    return [
        Hit(h.row, cosine(vector, h.row.vector)) for h in hits if len(h.row.vector) == len(vector)
    ]


def supersedable(
    hits: Sequence[Hit], state_of: Callable[[str], MemoryState | None], at: datetime
) -> list[Hit]:
    """The hits a memory stated at ``at`` may supersede: those whose state in the worker's
    tables (the source of truth, ``state_of(row.key)``) is in :data:`memcore.SUPERSEDABLE` and
    still current at ``at`` (an older version is superseded already: a decision for it would
    only be passed along its chain, :func:`memcore.relink`). A search can lag the tables (the
    hot cache takes a memory's state from the changelog, which trails them by the producer's
    backlog), so a memory forgotten, deleted or superseded meanwhile can still be a hit. A
    memory the tables do not hold (another worker's partition, or purged) is left as the
    search found it.
    """
    kept = []
    for hit in hits:
        state = state_of(hit.row.key)
        if state is None or (
            state.state in SUPERSEDABLE and (state.valid_to is None or state.valid_to > at)
        ):
            kept.append(hit)
    return kept


def credentials(kafka: KafkaConnection) -> faust.types.auth.CredentialsT | None:
    """Faust's form of the connection's TLS and SASL (None: PLAINTEXT)."""
    if kafka.sasl:
        return faust.SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.sasl_password,
            ssl_context=kafka.ssl_context(),
            mechanism=kafka.sasl_mechanism,
        )
    context = kafka.ssl_context()
    return faust.SSLCredentials(context) if context is not None else None


def create_app(
    settings: WorkerSettings, services: Services, applied: AppliedMarks | None = None
) -> faust.App:
    """The Faust app for ``settings``; nothing connects until it is started. ``applied``: marks
    each applied batch gets (``python -m server`` gives them to its ranker).
    """
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{b.strip()}" for b in settings.kafka_bootstrap.split(",")],
        broker_credentials=credentials(settings.kafka()),
        store="rocksdb://" if settings.store == "rocksdb" else "memory://",
        datadir=str(settings.data_dir),
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.kafka_replication,
        topic_disable_leader=True,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 4),
        broker_commit_interval=settings.commit_interval_s,
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        producer_acks=-1,
        producer_max_batch_size=PRODUCER_BATCH_BYTES,  # the changelogs carry 9 KB documents
        web_enabled=False,
        stream_buffer_maxsize=max(4 * settings.access_batch_size, 4096),
        broker_max_poll_records=settings.access_batch_size,
    )
    metrics = services.metrics
    deliveries = exact_flush(app, metrics.flushed)  # before any record is buffered
    worker = StreamWorker(app, settings, services, applied)
    worker.deliveries = deliveries
    consumed = {
        role: settings.topic(role) for role in (topics.WRITES, topics.ACCESS, topics.CONSOLIDATION)
    }

    @app.agent(worker.topics[topics.WRITES], name=f"{settings.app_id}-writes")
    async def writes(stream: Any) -> AsyncIterator[None]:  # noqa: ANN401 - faust stream
        size, wait = settings.write_batch_size, settings.write_batch_wait_s
        async for events in stream.take_events(size, within=wait):
            with (
                metrics.batch("writes", consumed[topics.WRITES], len(events)),
                resync_on_failure(worker.marker),
            ):
                await applied_again(functools.partial(worker.on_writes, events), "writes")
            yield None

    @app.agent(worker.topics[topics.ACCESS], name=f"{settings.app_id}-access")
    async def access(stream: Any) -> AsyncIterator[None]:  # noqa: ANN401
        size, wait = settings.access_batch_size, settings.access_batch_wait_s
        async for events in stream.take_events(size, within=wait):
            with (
                metrics.batch("access", consumed[topics.ACCESS], len(events)),
                resync_on_failure(worker.marker),
            ):
                await applied_again(functools.partial(worker.on_access, events), "access")
            yield None

    @app.agent(worker.topics[topics.CONSOLIDATION], name=f"{settings.app_id}-consolidation")
    async def consolidation(stream: Any) -> AsyncIterator[None]:  # noqa: ANN401
        async for event in stream.events():
            with (
                metrics.batch("consolidation", consumed[topics.CONSOLIDATION], 1),
                resync_on_failure(worker.marker),
            ):
                await worker.on_consolidation(_inbound(event))
            yield None

    @app.timer(  # type: ignore[untyped-decorator]
        interval=settings.consolidation_interval_s, on_leader=True
    )
    async def scheduled_consolidation() -> None:
        if worker.replay:
            return
        # the edge reads the clock; the request carries the time the rules will use
        requests = consolidation_requests(worker.processor.limits.registry, datetime.now(UTC))
        for key, value in requests:
            await worker.topics[topics.CONSOLIDATION].send(key=key, value=value)

    @app.on_rebalance_complete.connect  # type: ignore[arg-type]  # mode's handler union
    async def hold_streams_until_sought(sender: faust.App, **_: object) -> None:
        hold_streams(sender)

    @app.task  # type: ignore[untyped-decorator]
    async def follow_tenants() -> None:
        await worker.tenants.start()  # a record of a tenant not known yet also starts it

    @app.task  # type: ignore[untyped-decorator]
    async def follow_keys() -> None:
        await worker.keys.start()  # a sealed record with a key not seen yet also starts it

    @app.on_before_shutdown.connect  # type: ignore[arg-type]  # mode's handler union
    async def stop_logs(_sender: faust.App, **_: object) -> None:
        try:
            await worker.tenants.stop()
        finally:
            await worker.keys.stop()
            if applied is not None:
                await applied.stop()

    @app.task  # type: ignore[untyped-decorator]
    async def announce() -> None:
        # Faust holds every stream while more than ProducerBuffer.max_messages (100) table
        # writes wait to be produced; one access batch writes two per event (state and counters).
        app.producer.buffer.max_messages = 4 * settings.access_batch_size
        metrics.watch(app.consumer, consumed.values())
        if services.llm is not None:
            await services.llm.start()
        log.info(
            "mnemostream worker ready: app %s on %s", settings.app_id, settings.kafka_bootstrap
        )

    return app


def hold_streams(app: faust.App) -> None:
    """Keep stream events from the agents until Faust has sought the stream partitions to their
    committed offsets; Faust resumes both flows itself right after that seek.

    Faust 0.15.3 resumes the flow at the start of a table restore (to read the changelogs) and,
    once restored, resumes the stream partitions and seeks them while that flow is still open:
    events fetched during the seek went into the agents' queues, which the final resume then
    cleared, after the consumer's position had passed them. They were never applied, and their
    partition's offset was never committed again (after a kill -9 or a rebalance with a restore).
    Connected to ``on_rebalance_complete``, which Faust sends just before that resume and seek.
    """
    app.flow_control.suspend()
    app.consumer.stop_flow()


class StreamWorker:
    """The agents' bodies: one per app, holding its topics, tables and services."""

    replay = False
    """``MNEMO_REPLAY``: apply the log, produce nothing (:attr:`WorkerSettings.replay`)."""

    def __init__(
        self,
        app: faust.App,
        settings: WorkerSettings,
        services: Services,
        applied: AppliedMarks | None = None,
    ) -> None:
        self.app = app
        self.applied = applied
        self.settings = settings
        self.replay = settings.replay
        self.services = services
        self.topics = {
            role: app.topic(settings.topic(role), key_serializer="raw", value_serializer="raw")
            for role in topics.ROLES
        }
        memories, documents, counters, pending = (
            app.Table(
                name,
                default=None,
                partitions=settings.partitions,
                key_type=bytes,
                value_type=bytes,
                schema=faust.Schema(key_serializer="raw", value_serializer="raw"),
                extra_topic_configs=topics.changelog_config(settings),
            )
            for name in topics.TABLES
        )
        self.tenants = settings.tenant_log(services.registry)
        self.keys = settings.key_log()
        limits = Limits(
            settings.embedding_dim,
            settings.max_content_bytes,
            self.tenants,
            timedelta(seconds=settings.max_future_skew_s),
            self.keys,
        )
        self.processor = Processor(memories, documents, counters, pending, limits)
        # with applied marks: every delivery (changelog, emitted) since the last batch's mark
        self.produced: list[Awaitable[Any]] = []
        self.deliveries: ExactFlush | None = None  # what the commit flush waits for
        if applied is not None:
            for table in (memories, documents, counters, pending):
                _keep_changelog_deliveries(table, self.produced)
        self.write_done: dict[int, int] = {}  # writes partition -> next offset not yet applied
        self.compacted_at = float("-inf")  # monotonic seconds of the last compaction asked
        self.compaction: asyncio.Task[None] | None = None  # one asked for when an interval ends
        self.syncing = asyncio.Lock()  # one Milvus sync at a time over the agents (see sync)
        self.keys_read = False  # the keys topic read to its end once since start-up
        self.tenants_read = False  # the tenants topic, likewise
        self.marker = ResyncMarker.of(settings)  # set when Milvus may lack rows of changes
        # audit records of failed tries, not sent: their events are skipped by offset when
        # applied again, so they are sent first by the next emit (:meth:`owing`)
        self.owed: list[Outbound] = []

    async def know_tenants(self, values: Iterable[bytes]) -> None:
        """Before the first batch, read the tenants topic to its end (retrying while it cannot be
        read: the batch waits, unacked): a tenant of the file whose policy changed or that was
        deleted on the topic was otherwise served by the file's settings until the follow caught
        up. Later, when a record names a tenant this worker does not know, read it to its end
        first (once per batch): a tenant created just before its first write is never
        dead-lettered as unknown. A topic that cannot be read in time then is logged; the
        records of tenants still unknown go to dead-letter.
        """
        if not self.tenants_read:
            await self.tenants.read_through()
            self.tenants_read = True
            return
        if not unknown_tenants(values, self.tenants):
            return
        try:
            await self.tenants.catch_up()
        except TenantLogError as exc:
            log.warning("records name unknown tenants and %s", exc)

    async def keys_ready(self) -> None:
        """Before the first batch: read the keys topic to its end, so that the documents restored
        with the tables open (retrying while the topic cannot be read: the batch waits, unacked).
        """
        if not self.keys_read:
            await self.keys.read_through()
            self.keys_read = True

    async def on_writes(self, events: Sequence[Any]) -> None:
        """Decode, embed what has no vector, score importance, reduce, sync, emit; each memory's
        state and document are read and opened once for all of these steps.
        """
        with self.processor.remembering():
            await self.apply_writes(events)

    async def apply_writes(self, events: Sequence[Any]) -> None:
        batch = Batch()
        with self.owing(batch), self.processor.releasing(batch):
            await self._apply_writes(events, batch)

    @contextmanager
    def owing(self, batch: Batch) -> Iterator[None]:
        """When the batch fails, keep the audit records it made and did not send: applied
        again (:func:`applied_again`), its events already applied are skipped by offset and
        make none, and their changes would be missing from history. The next :meth:`emit` of
        any agent sends them first, in order. Kept in memory, at most :data:`OWED_MAX` (the
        oldest dropped, logged): a kill -9 before that emit loses them, as a replay
        (``MNEMO_REPLAY``, which produces nothing) has none to owe.
        """
        try:
            yield
        except Exception:
            if not batch.emitting:  # else emit kept them
                # a state not written yet is applied again, its records made again
                self._owe([o for o in batch.out if _owed(o, batch)], first=False)
            raise

    def _owe(self, records: list[Outbound], *, first: bool) -> None:
        """Keep ``records`` to send with the next emit: before those owed already when they
        are older (an emit that failed had taken those), else after them.
        """
        if not records or self.replay:
            return
        kept = [*records, *self.owed] if first else [*self.owed, *records]
        if len(kept) > OWED_MAX:
            log.error("%d audit records of failed batches dropped", len(kept) - OWED_MAX)
        self.owed = kept[-OWED_MAX:]

    async def _apply_writes(self, events: Sequence[Any], batch: Batch) -> None:
        await self.keys_ready()
        pairs = [(_inbound(e), e) for e in events]
        await self.know_tenants(message.value for message, _ in pairs)
        await self.keys.know(message.value for message, _ in pairs)
        if any(self.processor.purged(message.key) for message, _ in pairs):
            # a write to a purged memory may be sealed under a key erased since it was minted
            # (an erase racing it): read the erasures first, or the write made it anew
            await self.keys.read_through()
        event_for = {id(message): event for message, event in pairs}
        accepted = self.processor.decode_writes([message for message, _ in pairs], batch)
        writes = [r for _, r in accepted if isinstance(r, WriteRecord)]
        if any(r.summary_of for r in writes):
            # a summary quoting a memory erased since its plan is refused: read the erasures
            await self.keys.read_through()
        todo = self.processor.to_embed([r for _, r in accepted])
        vectors = await self.embed(todo)  # a write it could not embed goes to dead-letter
        importance = dict(
            zip(map(id, writes), await _importances(writes, self.services.llm), strict=True)
        )
        for message, record in accepted:
            with processing(event_for[id(message)]), contained(message, batch):
                if isinstance(record, WriteRecord):
                    vector = record.embedding or vectors.get(record.indexed_text)
                    decided = importance[id(record)]
                    if isinstance(decided, Exception):
                        raise decided
                    self.processor.write(message, record, vector, decided, batch)
                else:
                    self.processor.decision(message, record, batch)
        ranges = offset_ranges(message for message, _ in pairs)
        for partition, (_, after) in ranges.items():
            self.write_done[partition] = max(self.write_done.get(partition, 0), after)
        if batch.erased:
            log.info("%d writes of memories erased since were skipped", batch.erased)
        await self.erase_dropped(batch)
        await self.expire_parked(batch, events)
        await self.sync(batch)
        await self.recheck_summaries(batch)
        await self.supersede(batch)
        derived = await self.emit(batch)
        await self.erase_unwritten(batch, derived)
        await self.drop_released(batch, events)
        self.mark(topics.WRITES, ranges, derived)

    def mark(
        self, role: str, ranges: Mapping[int, tuple[int, int]], derived: Sequence[Awaitable[Any]]
    ) -> None:
        """The batch is applied: hand its offsets and every delivery since the last mark (its
        changelog, its emitted records) to the applied marks, when this process keeps them
        (consolidation passes no offsets: its deliveries and decisions only).
        """
        if self.applied is not None:
            produced = list(self.produced)
            self.produced.clear()
            self.applied.note(role, ranges, produced, derived)

    async def supersede(self, batch: Batch) -> None:
        """Compare each stated memory with the nearest memories of its tenant, user and agent (in
        any session; now synced, this batch's included) and add a ``supersede`` decision for
        every older version (SPEC section 6): the LLM decides when the worker has one and it
        answers, else the rule (which only looks at memories that state a fact). Decisions go
        through ``memory-writes`` keyed by the older memory, so they apply on its partition. A
        redelivered write (skipped by offset) whose memory is current with its content is
        checked again: its first delivery may have died before its decisions were sent, and a
        decision already applied is ignored.

        Each tenant is checked in isolation: an exception (a bug, a search Milvus refuses) is
        logged with its traceback, what the tenant's check had added is dropped and each of its
        stated writes, applied all the same, goes to dead-letter (``internal error in the
        supersession check``); the other tenants and the batch's emit go on.
        """
        if self.replay:  # its decisions are on the log, after the write: nothing to derive
            return
        by_tenant: dict[str, dict[str, Statement]] = {}
        for key, statement in batch.stated.items():
            by_tenant.setdefault(key.partition("/")[0], {})[key] = statement
        checks: list[tuple[str, Mapping[str, Statement], SupersessionPolicy, list[Compared]]] = []
        if by_tenant and self.services.llm is not None:
            # the LLM's questions quote neighbours: none erased since (:meth:`compared`)
            await self.keys.read_through()
        stems = await self._stem_vectors(self._stems(by_tenant))  # by statement key
        for tenant_id, stated in by_tenant.items():
            try:
                found = await self.compared(tenant_id, stated, stems)
            except Exception as exc:
                self._unchecked(tenant_id, stated, batch, exc)
                continue
            if found is not None:
                checks.append((tenant_id, stated, *found))
        # every tenant's questions at once: an LLM that is slow or hangs costs the batch one
        # timeout, not one a tenant in turn, nor one per 100 questions (``hung``)
        hung = asyncio.Event()
        answers = await asyncio.gather(
            *(
                _llm_answers(self.services.llm, compared, rules, hung)
                for _, _, rules, compared in checks
            ),
            return_exceptions=True,
        )
        for (tenant_id, statements, rules, compared), said in zip(checks, answers, strict=True):
            mark = len(batch.out)
            try:
                if isinstance(said, BaseException):
                    raise said
                for (new, neighbours), answer in zip(compared, said, strict=True):
                    for supersession in decide(new, neighbours, rules, answer):
                        batch.supersede(tenant_id, supersession.older, superseding(supersession))
            except Exception as exc:
                del batch.out[mark:]
                self._unchecked(tenant_id, statements, batch, exc)

    @staticmethod
    def _unchecked(
        tenant_id: str, stated: Mapping[str, Statement], batch: Batch, exc: Exception
    ) -> None:
        log.error(
            "supersession check of %d memories of %s failed; sent to dead-letter",
            len(stated),
            tenant_id,
            exc_info=exc,
        )
        batch.out.extend(unchecked(s.message, exc) for s in stated.values())

    async def compared(
        self,
        tenant_id: str,
        statements: Mapping[str, Statement],
        stems: Mapping[str, Sequence[float]] | None = None,
    ) -> tuple[SupersessionPolicy, list[Compared]] | None:
        """The tenant's rules and each stated memory (by key) with its older neighbours (of its
        scope: the same ``user_id`` and ``agent_id``, searched once per scope), for
        :meth:`supersede`; None when its rules are off or none of them is to be compared. The new
        version is dated by its statement (a rewrite that reasserts a superseded memory is newer
        than the memory that superseded it); a neighbour by its creation (one stated again since
        is dated too early, and the reducer turns a decision that supersedes the restatement
        around: the restatement supersedes the newer statement from its own time).

        A statement :meth:`_stems` chose is also searched by its fact's stem (``stems``: their
        vectors by statement key, embedded once a batch; the same search call): its other
        versions can be far from its own vector among many memories of one user. Their cosine
        to the statement is computed from the rows' vectors, and :func:`stem_hits` keeps those
        the marker rule may supersede. A stem not in ``stems`` (the
        embedder failed), or of another length than the statement's vector, is left out: the
        statement's own search still runs.
        """
        stems = stems or {}
        llm = self.services.llm
        rules = self.processor.policy(tenant_id).supersession
        if not rules.enabled:
            return None
        stated: list[tuple[MemoryState, Document, datetime]] = []
        stem_vectors: dict[int, Sequence[float]] = {}  # index in ``stated``: its stem's vector
        for key, said in statements.items():
            found = self.processor.load(key)
            if found is None:
                continue
            statement = fact_of(found[1].content, rules.max_words, generic=True)
            stem = stems.get(key)
            if stem is not None and len(stem) == len(found[1].vector):
                stem_vectors[len(stated)] = stem
            if statement is not None or llm is not None:
                stated.append((*found, said.at))
        if not stated:
            return None
        # one search per scope: a statement supersedes memories of its own user and agent only
        # (any session), and the nearest of the tenant's other users would crowd those out
        by_scope: dict[tuple[str, str], list[int]] = {}
        for i, (state, _, _) in enumerate(stated):
            by_scope.setdefault(scope_of(state), []).append(i)

        def search() -> list[list[Hit]]:
            each_hits: list[list[Hit]] = [[] for _ in stated]
            for (agent_id, user_id), members in by_scope.items():
                by_stem = [i for i in members if i in stem_vectors]
                hits = nearest(
                    self.services,
                    tenant_id,
                    [stated[i][1].vector for i in members] + [stem_vectors[i] for i in by_stem],
                    rules.searched,
                    # "" matches the unscoped rows only (a row holds "" for no user or agent);
                    # versions superseded before every statement here are no neighbours
                    Filters(
                        states=SUPERSEDABLE,
                        current_at_us=to_us(min(stated[i][2] for i in members)),
                        agent_id=agent_id,
                        user_id=user_id,
                    ),
                )
                for i, of_one in zip(members, hits[: len(members)], strict=True):
                    each_hits[i] = of_one
                for i, of_stem in zip(by_stem, hits[len(members) :], strict=True):
                    _, doc, at = stated[i]
                    kept = stem_hits(doc.vector, at, doc.content, of_stem)
                    each_hits[i] = each_hits[i] + kept
            return each_hits

        compared: list[Compared] = [
            (
                Version(
                    state.memory_id,
                    doc.content,
                    at,
                    scope=scope_of(state),
                    session=state.session_id or "",
                ),
                [
                    Version(
                        h.row.memory_id,
                        h.row.content,
                        from_us(h.row.created_at_us),
                        h.similarity,
                        (h.row.agent_id, h.row.user_id),  # a row holds "" for none
                        h.row.session_id,
                    )
                    for h in supersedable(hits, self.processor.state, at)
                    # an erased row may await its purge: its words go to no LLM, nor is it
                    # superseded (the erasure's 200 came before this worker applied its purge)
                    if not self.keys.erased_memory(tenant_id, h.row.memory_id)
                ],
            )
            for (state, doc, at), hits in zip(
                stated, await _retrying("search", search), strict=True
            )
        ]
        return rules, compared

    def _stems(self, by_tenant: Mapping[str, Mapping[str, Statement]]) -> dict[str, str]:
        """The stem (:func:`memcore.fact_stem`) each statement :meth:`compared` also searches
        by, by key (every tenant's, to be embedded in one call): one of a fact whose vector the
        service embedded (:attr:`Statement.embedded`: a stem is embedded by the service's model,
        and a given vector may be of another). A tenant whose
        statements cannot be read here gives none: :meth:`compared` meets the same failure and
        dead-letters them.
        """
        stems: dict[str, str] = {}
        for tenant_id, statements in by_tenant.items():
            try:
                rules = self.processor.policy(tenant_id).supersession
                for key, said in statements.items():
                    found = self.processor.load(key) if rules.enabled else None
                    if found is None or not said.embedded:
                        continue
                    fact = fact_of(found[1].content, rules.max_words, generic=True)
                    if fact is not None:
                        stems[key] = fact_stem(fact)
            except Exception:  # compared() meets it again, logs it and dead-letters them
                log.debug("stems of %s left out", tenant_id, exc_info=True)
        return stems

    async def _stem_vectors(self, stems: Mapping[str, str]) -> dict[str, Sequence[float]]:
        """``stems`` (by key) embedded, each text once, in one call; none when the embedder
        fails or answers with another number of vectors (logged): the statements are searched
        by their own.
        """
        if not stems:
            return {}
        texts = sorted(set(stems.values()))
        try:
            vectors = await asyncio.to_thread(self.services.embedder.embed, texts)
            by_text = dict(zip(texts, vectors, strict=True))
        except Exception:
            log.exception("embedding %d fact stems failed; searched by statements only", len(texts))
            return {}
        return {key: by_text[stem] for key, stem in stems.items()}

    async def on_access(self, events: Sequence[Any]) -> None:
        """Reduce each access; one that overtook its write is parked until the write is applied."""
        batch = Batch()
        with self.owing(batch), self.processor.releasing(batch):
            await self._on_access(events, batch)

    async def _on_access(self, events: Sequence[Any], batch: Batch) -> None:
        await self.keys_ready()
        started = time.perf_counter()
        await self.know_tenants(_value(e.message) for e in events)
        by_key = {e.message.key: e for e in events}
        by_partition = {e.message.partition: e for e in events}
        batch.buffered = True  # its states are written by the flush below, key by key
        with self.processor.buffered() as (memories, counters, pending):
            for event in events:
                message = _inbound(event)
                with processing(event), contained(message, batch):
                    self.processor.access(message, batch)
        # one table write per memory and per tenant counter row, not one per event
        memories.flush(lambda key: _noted(batch.flushed, key, processing(by_key[key])))
        batch.buffered = False  # all written: what it writes from here goes to the table at once
        counters.flush(lambda key: processing(by_partition[_counter_partition(key)]))
        pending.flush(lambda key: processing(by_key[key]))  # parked here: keyed by its event
        await self.expire_parked(batch, events)
        reduced = time.perf_counter()
        await self.sync(batch)  # one upsert per touched memory, however many events it had
        synced = time.perf_counter()
        derived = await self.emit(batch)
        await self.drop_released(batch, events)
        self.mark(topics.ACCESS, offset_ranges(e.message for e in events), derived)
        log.debug(
            "access batch: %d events, %d memories; reduce %.3f s, sync %.3f s, emit %.3f s",
            len(events),
            len(batch.touched),
            reduced - started,
            synced - reduced,
            time.perf_counter() - synced,
        )

    async def embed(self, records: Sequence[WriteRecord]) -> dict[str, tuple[float, ...]]:
        """Vectors of ``records`` by their text (:attr:`WriteRecord.indexed_text`: a batch may
        write one memory twice, with other words each time), each text computed once, in one
        call, tried again after each wait of :data:`EMBED_RETRIES_S` (a model or an embedding
        service failing for a moment dead-lettered every write of the batch); when it still
        fails, one call per text, and a text whose own call fails has no vector (its write goes
        to dead-letter, naming ``embedding``).
        """
        first: dict[str, str] = {}  # text -> key of the first record with it (for the log)
        for record in records:
            first.setdefault(record.indexed_text, record.key)
        if not first:
            return {}
        texts = list(first)
        embed = self.services.embedder.embed
        for wait in (*EMBED_RETRIES_S, None):
            try:
                computed = await asyncio.to_thread(embed, texts)
                return dict(zip(texts, computed, strict=True))
            except Exception:
                if wait is None:
                    log.exception("embedding a batch of %d failed; one by one", len(texts))
                    break
                log.warning("embedding a batch of %d failed; again in %g s", len(texts), wait)
                await asyncio.sleep(wait)
        vectors: dict[str, tuple[float, ...]] = {}
        for text, key in first.items():
            try:
                (vectors[text],) = await asyncio.to_thread(embed, [text])
            except Exception:
                log.exception("embedding %s failed", key)
        return vectors

    async def expire_parked(self, batch: Batch, events: Sequence[Any]) -> None:
        """Dead-letter parked accesses of partitions whose writes are all applied: their memory
        was never written. Runs for the partitions this batch parked in or wrote to.
        """
        partitions = batch.parked | (
            {e.message.partition for e in events} if self.processor.has_pending() else set()
        )
        last_event = {e.message.partition: e for e in events}
        for partition in sorted(partitions & last_event.keys()):
            # before the end offset is asked for: the accesses agent may park one meanwhile whose
            # write the end offset does not cover
            with processing(last_event[partition]):
                parked = self.processor.parked_in(partition)
            if parked and await self.writes_caught_up(partition):
                with processing(last_event[partition]):
                    self.processor.expire_pending(partition, batch, parked)

    async def drop_released(self, batch: Batch, events: Sequence[Any]) -> None:
        """Drop the parked accesses ``batch`` applied (or dead-lettered) from the pending table
        once the broker acknowledged what it wrote and sent: the states they changed, on another
        changelog topic than the pending table's. A crash before then finds them still parked,
        and the redelivered write applies them again (what was applied is skipped by offset); a
        crash after leaves them parked, applied already, until the memory's next access or write.
        Raises StorageError when a record failed (the batch is then applied again).
        """
        if not batch.released:
            return
        if self.deliveries is not None:
            await self.deliveries.flush()
        last_event = {e.message.partition: e for e in events}
        for partition in sorted({part for part, _ in batch.released.values()}):
            if partition in last_event:  # its changelog partition (else left parked, as above)
                with processing(last_event[partition]):
                    self.processor.drop_released(batch, partition)

    async def writes_caught_up(self, partition: int) -> bool:
        """True when the writes agent has applied every write produced so far to ``partition``
        (asks the broker for the end offset: a cached one could be older than the access). False
        when the broker cannot say (the parked accesses wait for a later batch).
        """
        tp = TP(self.settings.topic(topics.WRITES), partition)
        try:
            end = (await self.app.consumer.highwaters(tp))[tp]
        except (KafkaError, TimeoutError) as exc:  # a broker failing over: ask again next batch
            log.warning(
                "end offset of %s/%d unknown (%s): parked accesses wait", tp.topic, partition, exc
            )
            return False
        # offsets committed before this process started were applied by an earlier one
        committed = getattr(self.app.consumer, "_committed_offset", {}).get(tp) or 0
        return max(self.write_done.get(partition, 0), committed) >= end

    async def on_consolidation(self, message: Inbound) -> None:
        """Plan each requested tenant from its stored rows; emit decisions (unless a dry run) and a
        report. A malformed request goes to dead-letter.
        """
        batch = Batch(owes=False)  # its report, sent without its decisions, would mislead
        if self.replay:  # the live worker's decisions are in the log, applied from there
            self.mark(topics.CONSOLIDATION, {}, await self.emit(batch))
            return
        await self.keys_ready()
        await self.know_tenants([message.value])
        try:
            request = decode_consolidation(message.value, self.processor.limits)
            self.processor.check_time(message, request.at)
        except RecordError as error:
            batch.out.append(dead_letter(message, error))
            self.mark(topics.CONSOLIDATION, {}, await self.emit(batch))
            return
        # erasures not read yet (rows awaiting their purge) are left out of every plan; one
        # read for the request: the worker refuses a summary of a memory erased after it
        await self.keys.read_through()
        for tenant_id in request.tenant_ids:  # one tenant's failure costs its decisions only
            mark, deferred = len(batch.out), len(batch.deferred)
            try:
                await self.plan(tenant_id, request, batch)
            except Exception as exc:
                log.exception("consolidation of %s failed; sent to dead-letter", tenant_id)
                del batch.out[mark:]
                del batch.deferred[deferred:]
                why = f"internal error planning its consolidation: {type(exc).__name__}: {exc}"
                batch.out.append(dead_letter(message, RecordError("tenant_id", tenant_id, why)))
        derived = await self.emit(batch)
        if batch.deferred:  # the summaries, once their sources' archiving is on the log
            await asyncio.gather(*derived)
            derived = [*derived, *await self.emit(Batch(out=batch.deferred, owes=False))]
        self.mark(topics.CONSOLIDATION, {}, derived)  # no token names it

    async def plan(self, tenant_id: str, request: ConsolidationRequest, batch: Batch) -> None:
        """Add the decisions (unless a dry run) and the report of one requested tenant.

        Rows come from Milvus (or the hot cache in this process: :func:`stored_rows`) with their
        counters, importance and clock taken from the tables (an access rewrites no row); a
        memory of a partition another worker serves keeps its row's values, which may be older.
        """
        tenant = self.processor.limits.registry.get(tenant_id)
        if tenant is None:  # deleted since the request was decoded
            return
        stored = await _retrying("query", functools.partial(stored_rows, self.services, tenant_id))
        with processing(None):  # the tenant's keys live in every partition
            rows = consolidatable(stored, self.processor.state)
        # an erased row may still await its purge: never planned (erasures read by the caller)
        rows = [r for r in rows if not self.keys.erased_memory(tenant_id, r.memory_id)]
        decisions = await asyncio.to_thread(plan_tenant, tenant_id, rows, request, tenant.policy)
        if not request.dry_run:
            out = decision_records(
                tenant_id, decisions, rows, request.at, request.request_id, self._key_of(tenant_id)
            )
            for record, summary in await self.sealed(out):
                (batch.deferred if summary else batch.out).append(record)
        batch.out.append(report(tenant_id, request, decisions))
        log.info(
            "consolidation of %s: %d decisions%s",
            tenant_id,
            len(decisions),
            " (dry run)" if request.dry_run else "",
        )

    def _key_of(self, tenant_id: str) -> Callable[[str], str | None]:
        """A live data key id of one of the tenant's memories, as the keys topic was read (the
        newest: an erasure tombstones every key a memory has), or None for none.
        """

        def key_of(memory_id: str) -> str | None:
            keys = self.keys.of_memory(tenant_id, memory_id)
            return keys[-1].key_id if keys else None

        return key_of

    async def erase_dropped(self, batch: Batch) -> None:
        """Erase the keys of the documents of the merged duplicates this batch purged
        (:class:`memcore.Purge`'s ``erase``, :meth:`streams.processor.Processor.decision`)
        right after its records are applied, before any later step of the batch can fail: a
        batch applied again, or redelivered, meets the purge as done, its document gone, and
        would erase nothing (only a crash between the two leaves the key live). Retried while
        the keys topic cannot be written (:meth:`erase_keys`). Not in a replay (the live
        worker's erasures are on the keys topic already).
        """
        if self.replay or not batch.dropped_keys:
            return
        await self.erase_keys(list(batch.dropped_keys), only=batch.dropped_keys)

    async def erase_unwritten(self, batch: Batch, decided: Sequence[Awaitable[Any]]) -> None:
        """Erase the keys of the summaries this batch refused or erased for quoting an erased
        memory (:meth:`streams.processor.Processor.quotes_erased`, :meth:`recheck_summaries`):
        their sealed writes stay in the log, and no process may open them. Only once the
        batch's decisions (``decided``: the restores of their sources, their deletes and
        purges) are acknowledged: a batch applied again or redelivered finds their writes
        still open, and decides the same again. Not in a replay (it produces nothing: the live
        worker's erasures are on the keys topic already).
        """
        if self.replay or not batch.unwritten:
            return
        await asyncio.gather(*decided)
        await self.erase_keys(batch.unwritten)

    async def recheck_summaries(self, batch: Batch) -> None:
        """The summaries this batch made or met again, checked once their rows are in Milvus: a
        source erased meanwhile (its erasure looked for the summaries Milvus held before this
        row was there; it wrote its markers before it looked, and this reads them after the
        row) has the summary erased here: a delete and a purge, emitted with the batch (its
        sources get their ``restore`` as the delete is applied), then its keys
        (:meth:`erase_unwritten`). Not in a replay (the live worker's decisions are in the log).
        """
        if not batch.made or self.replay:
            return
        await self.keys.read_through()
        for record in batch.made:
            if not self.processor.quotes_erased(record):
                continue
            why = "a summary of a memory erased as it was written"
            for event in (Retire(record.at, Lifecycle.DELETED, why), Purge(record.at, why)):
                batch.out.append(decision_record(record.tenant_id, record.memory_id, event))
            batch.unwritten.append((record.tenant_id, record.memory_id))

    async def erase_keys(
        self,
        memories: Sequence[tuple[str, str]],
        only: Mapping[tuple[str, str], Collection[str]] | None = None,
    ) -> None:
        """Erase the keys of ``(tenant, memory)`` pairs (``only``: just these key ids of each),
        retried every second while the keys topic cannot be written (logged; the
        batch waits, unacknowledged): a batch applied again skips what its first try applied,
        so a failure here would leave the keys live for good.
        """
        by_tenant: dict[str, list[str]] = {}
        for tenant_id, memory_id in memories:
            by_tenant.setdefault(tenant_id, []).append(memory_id)
        for tenant_id, memory_ids in by_tenant.items():
            picked = None if only is None else {m: only[tenant_id, m] for m in memory_ids}
            while True:
                try:
                    await self.keys.erase(tenant_id, memory_ids, only=picked)
                    break
                except KeyLogError as exc:
                    log.warning("erasing the keys of %s: %s", memory_ids, exc)
                    await asyncio.sleep(KEYS_RETRY_S)
            log.info("keys of %s of %s erased", memory_ids, tenant_id)

    async def sealed(self, out: Sequence[Outbound]) -> list[tuple[Outbound, bool]]:
        """``out`` with every write among it (a summary) sealed under a key minted for it: a
        summary's words are as erasable as its sources'; each with whether it is a summary.
        """
        writes = [
            (i, v)
            for i, v in ((i, orjson.loads(m.value)) for i, m in enumerate(out))
            if out[i].role == topics.WRITES and v.get("kind", "write") == "write"
        ]
        sealed = [(record, False) for record in out]
        if not writes:
            return sealed
        keys = await self.keys.mint(
            [(v["tenant_id"], v["memory_id"], v.get("user_id")) for _, v in writes]
        )
        for (i, value), key in zip(writes, keys, strict=True):
            record = Outbound(out[i].role, out[i].key, orjson.dumps(seal_write(value, key)))
            sealed[i] = (record, True)
        return sealed

    async def sync(self, batch: Batch) -> None:
        """Upsert the whole current row of every touched memory (delete purged ones). One sync
        at a time over the writes and access agents, each building its rows from the tables
        once it holds the turn: the last to land is built from the tables' newest state (an
        access batch's row built before a rewrite or a purge, and retried while Milvus was down,
        landed after it: the old words back in Milvus, or an erased memory's).

        The rows are written only once the broker has acknowledged every changelog record put
        before they were built (the states they are built from): a worker starting beside this
        one rewrites the rows of a snapshot of the changelogs and then the rows of memories
        whose changelog moved on since (:func:`streams.rebuild.settle`), which relies on a
        change's row landing after its changelog record. A row written first could be
        overwritten by the snapshot's older version (a purged or erased memory back in Milvus)
        with no changelog record yet for the catch-up to see. Raises StorageError (retriable)
        when a record failed, with nothing of the batch in Milvus: the commit flush fails too,
        and the events are redelivered to a worker that starts again.
        """
        async with self.syncing:
            await self._sync(batch)

    async def _sync(self, batch: Batch) -> None:
        upserts, deletes = self.processor.rows(batch.touched)
        if not upserts and not deletes:
            return
        if self.deliveries is not None:
            await self.deliveries.flush()
        store = self.services.store
        with self.services.metrics.milvus_sync(len(upserts), len(deletes)):
            if upserts:
                await self.upsert(upserts)
            for tenant_id, memory_id in deletes:
                await _retrying("delete", functools.partial(store.delete, tenant_id, [memory_id]))
        if deletes:
            await self.compact_soon()

    async def compact_soon(self) -> None:
        """Ask Milvus to compact once rows were deleted, at most every
        ``milvus_compact_interval_s``: a deleted (purged, erased) memory's words then leave a
        Milvus server's segments too. Deletes within the interval of the last ask are compacted
        when it ends (they waited for a later delete, which might never come, and their words
        stayed), and a failed ask is made again an interval later; a failure is logged, never
        blocking the agent.
        """
        every = self.settings.milvus_compact_interval_s
        if not every:
            return
        wait = self.compacted_at + every - time.monotonic()
        if wait <= 0:
            await self._compact(every)
        elif self.compaction is None or self.compaction.done():
            self.compaction = asyncio.create_task(self._compact(every, after_s=wait))

    async def _compact(self, every: float, after_s: float = 0.0) -> None:
        if after_s:
            await asyncio.sleep(after_s)
        self.compacted_at = time.monotonic()
        try:
            await asyncio.to_thread(self.services.store.compact)
        except StorageError as exc:
            log.warning("asking Milvus to compact failed (asked again in %g s): %s", every, exc)
            running = self.compaction
            if running is None or running.done() or running is asyncio.current_task():
                self.compaction = asyncio.create_task(self._compact(every, after_s=every))

    async def upsert(self, rows: Sequence[MemoryRow]) -> None:
        """Upsert ``rows`` (retrying while Milvus is unavailable). When the store refuses the
        batch, each row alone: a row it still refuses is logged and left out (its table state is
        kept, and validation at the boundary should have made it storable), never blocking the rest.
        """
        store = self.services.store
        try:
            await _retrying("upsert", functools.partial(store.upsert, rows))
        except StorageError:
            if len(rows) == 1:
                log.exception("Milvus refused the row of %s; left out", rows[0].key)
                self.marker.ask(f"Milvus refused the row of {rows[0].key}")
                return
            log.exception("Milvus refused a batch of %d rows; upserting one by one", len(rows))
            for row in rows:
                await self.upsert([row])

    async def emit(self, batch: Batch) -> list[Awaitable[Any]]:
        """Produce the batch's audit, dead-letter and derived records; returns the deliveries
        (futures of their ``RecordMetadata``) of those sent to ``memory-writes``. A replay
        produces none: the live worker's are in the log already.
        """
        derived: list[Awaitable[Any]] = []
        if self.replay:
            return derived
        if self.owed:  # a failed batch's audit records (:meth:`owing`), before this one's
            batch.out[:0], self.owed, batch.taken = self.owed, [], len(self.owed)
        batch.emitting = True
        try:
            for message in batch.out:  # in order; acknowledged before the offsets commit
                topic = self.topics[message.role]
                sending = await topic.send(key=message.key, value=message.value)
                batch.sent += 1
                sent = asyncio.ensure_future(sending)  # Faust's is a future already: itself
                if self.deliveries is not None:
                    self.deliveries.track(sent)
                if self.applied is not None:
                    self.produced.append(sent)
                if message.role == topics.WRITES:
                    derived.append(sent)
        except Exception:  # what was not sent of the audit, owed's included, is owed again
            unsent = enumerate(batch.out[batch.sent :], start=batch.sent)
            again = [
                o
                for i, o in unsent
                if (i < batch.taken and o.role == topics.AUDIT)
                or (i >= batch.taken and _owed(o, batch))
            ]
            self._owe(again, first=True)
            raise
        self.services.metrics.emitted(batch.out)
        return derived


def _keep_changelog_deliveries(table: Any, into: list[Awaitable[Any]]) -> None:  # noqa: ANN401
    """Append each changelog record ``table`` produces (its ``FutureMessage``, done once the
    broker acknowledged it) to ``into``: Faust's own flush can return with records in flight.
    """
    send = table.send_changelog

    def send_changelog(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - Faust's signature
        delivery = send(*args, **kwargs)
        into.append(delivery)
        return delivery

    table.send_changelog = send_changelog


EMBED_RETRIES_S = (0.5, 1.0, 2.0)
"""Seconds waited before each new try of a batch's embedding call that failed."""


def unknown_tenants(values: Iterable[bytes], tenants: Tenants) -> set[str]:
    """The tenant ids that records (JSON values) name and ``tenants`` does not know (``*``, a
    consolidation of every tenant, and values that are not records are left to the decoder).
    """
    unknown = set()
    for value in values:
        try:
            tenant_id = orjson.loads(value).get("tenant_id")
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            continue
        if isinstance(tenant_id, str) and tenant_id != "*" and tenants.get(tenant_id) is None:
            unknown.add(tenant_id)
    return unknown


def consolidation_requests(registry: Tenants, at: datetime) -> list[tuple[bytes, bytes]]:
    """The scheduled consolidation: one request per tenant, keyed by the tenant, so that the
    tenants spread over the consolidation topic's partitions and so over the workers (one
    ``*`` request would put every tenant on one worker). Only the group's leader sends them.
    """
    return [
        (tenant_id.encode(), orjson.dumps({"v": 1, "tenant_id": tenant_id, "at": at.isoformat()}))
        for tenant_id in sorted(registry.tenants)
    ]


@contextmanager
def processing(event: Any) -> Iterator[None]:  # noqa: ANN401 - faust.EventT
    """Make ``event`` Faust's current event while its table writes happen.

    ``take_events`` hands over a batch without setting the current event, but a table assignment
    needs it: its changelog partition and RocksDB partition are the event's. This sets the same
    context variable that Faust's own stream iteration sets. ``None``: no current event, so that
    a read finds a key in any of this worker's partitions (a read under an event looks only in
    the event's partition).
    """
    token = _current_event.set(weakref.ref(event) if event is not None else None)
    try:
        yield
    finally:
        _current_event.reset(token)


def _counter_partition(key: bytes) -> int:
    """The partition in a tenant-counter key ``tenant@partition``."""
    return int(key.rsplit(b"@", 1)[1])


def _inbound(event: Any) -> Inbound:  # noqa: ANN401 - faust.EventT is untyped
    message = event.message
    return Inbound(
        message.topic,
        message.partition,
        message.offset,
        message.key,
        _value(message),
        received_at(message.timestamp, datetime.now(UTC)),
    )


def _value(message: Any) -> bytes:  # noqa: ANN401 - faust's message is untyped
    """A consumed record's value; none (a tombstone, another producer's null) reads as empty
    bytes, which every decoder refuses as not JSON: the record goes to dead-letter like any
    malformed one, and its batch goes on.
    """
    value = message.value
    return value if isinstance(value, bytes) else b""


def received_at(timestamp: float | None, now: datetime) -> datetime:
    """When a record reached the log: its Kafka timestamp (seconds), but never later than ``now``
    (the worker's clock; a producer may set any timestamp). A replay meets the same timestamps,
    so an event time judged against it is judged the same way again.
    """
    if timestamp is None or not timestamp > 0:
        return now
    try:
        return min(datetime.fromtimestamp(timestamp, UTC), now)
    except (OverflowError, OSError, ValueError):
        return now


async def _importances(
    records: Sequence[WriteRecord], llm: LlmImportance | None
) -> list[ImportanceDecision | Exception]:
    """Each record's importance, or the exception resolving it raised (that record's alone)."""
    answers: dict[int, str | None] = {}
    if llm is not None:
        needs_llm = [r for r in records if r.importance is None]
        replies = await llm.answers([r.content for r in needs_llm])
        answers = {id(r): a for r, a in zip(needs_llm, replies, strict=True)}
    decided: list[ImportanceDecision | Exception] = []
    for r in records:
        try:
            decided.append(
                resolve_importance(
                    r.content,
                    explicit=r.importance,
                    llm_answer=answers.get(id(r)),
                    metadata=r.metadata,
                    tags=r.tags,
                )
            )
        except Exception as exc:  # raised again in the record's own apply
            decided.append(exc)
    return decided


Compared = tuple[Version, Sequence[Version]]
"""A stated memory's new version and its older neighbours (:meth:`StreamWorker.compared`)."""


async def _llm_answers(
    llm: LlmImportance | None,
    compared: Sequence[Compared],
    rules: SupersessionPolicy,
    hung: asyncio.Event | None = None,
) -> list[str | None]:
    """The LLM's answer for each new memory that has older close neighbours (concurrently, each
    within the LLM timeout); None where there is no LLM, nothing to ask, or no answer in time.
    ``hung``: shared by the questions of one batch (:meth:`LlmImportance.ask`): once one timed
    out, those still waiting for a turn are not asked (the rule decides them).
    """
    if llm is None:
        return [None] * len(compared)

    async def one(new: Version, neighbours: Sequence[Version]) -> str | None:
        candidates = llm_candidates(new, neighbours, rules)
        return await llm.ask(llm_prompt(new, candidates), hung) if candidates else None

    return list(await asyncio.gather(*(one(new, ns) for new, ns in compared)))


def _owed(record: Outbound, batch: Batch) -> bool:
    """``record``, one of ``batch``'s own, is an audit record to keep when the batch fails: its
    memory's state is written (its event is skipped when applied again, and makes it no more)
    and the batch owes its records.
    """
    return batch.owes and record.role == topics.AUDIT and batch.written(record.key)


@contextmanager
def _noted(
    written: set[bytes], key: bytes, inner: AbstractContextManager[object]
) -> Iterator[None]:
    """``inner``, and ``key`` added to ``written`` when the block inside it ends without error."""
    with inner:
        yield
    written.add(key)


OWED_MAX = 100_000
"""How many audit records of failed batches a worker keeps to send (:meth:`StreamWorker.owing`)."""

BATCH_ATTEMPTS = 5
"""How many times an agent applies one batch before it gives up on it (:func:`applied_again`)."""


async def applied_again(
    apply: Callable[[], Awaitable[None]],
    what: str,
    attempts: int = BATCH_ATTEMPTS,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Apply one batch; when it raises, apply it again after a capped backoff (0.5 s, doubling),
    ``attempts`` times in all, then raise the last failure. Faust acknowledges a batch's events
    even when its agent raises (``take_events`` acknowledges in a ``finally``), so a batch given
    up is never redelivered: its rows wait for the next start's resync and its derived records
    (supersessions, dead letters) are lost. Applied again, the events its first try applied are
    skipped by offset and their rows and derived records are made again (a redelivery's path);
    their audit records, made by the first try, are kept and sent by the next emit
    (:meth:`StreamWorker.owing`). A cancellation is never retried.
    """
    delay = 0.5
    for attempt in range(1, attempts + 1):
        try:
            await apply()
            return
        except Exception:
            if attempt == attempts:
                raise
            log.exception(
                "the %s batch failed (try %d of %d); again in %.1f s",
                what,
                attempt,
                attempts,
                delay,
            )
            await sleep(delay)
            delay = min(delay * 2, 10.0)


async def _retrying(operation: str, call: Callable[[], T]) -> T:
    """Run a blocking storage call in a thread; retry retriable errors with capped backoff.

    Blocking the agent while Milvus is down is the back-pressure: its batch stays unacknowledged.
    A non-retriable error is raised (a bug or a configuration error, not input).
    """
    delay = 0.2
    while True:
        try:
            return await asyncio.to_thread(call)
        except StorageError as exc:
            if not exc.retriable:
                raise
            log.warning("%s failed, retrying in %.1f s: %s", operation, delay, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
