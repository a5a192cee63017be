"""The Milvus adapter: one collection, every call scoped to one tenant, vendor errors translated.

Works unchanged against Milvus Lite (a file path URI, embedded) and a Milvus server
(``http://host:port``). Synchronous: async callers run it in a thread. The constructor does no I/O;
:meth:`MilvusStore.connect` opens the client and creates the collection when it is missing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from memcore import MAX_RELATIONS, MAX_SUMMARY_SOURCES, MAX_TAGS
from memcore.ids import check_id
from memcore.keyword import keyword_text
from storage.errors import StorageError
from storage.rows import CURRENT, MAX_CONTENT_BYTES, ROW_FIELDS, MemoryRow

SLIM_FIELDS = tuple(f for f in ROW_FIELDS if f not in ("vector", "metadata"))
"""The fields :meth:`MilvusStore.get_slim` reads."""

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_TAG_CHARS = 128
# the capacity of the array fields: memcore's (MAX_TAGS, MAX_RELATIONS, MAX_SUMMARY_SOURCES),
# within which the reducer and consolidation keep a memory however often it is rewritten
_ID_CHARS = 128
_SPARSE = "content_bm25"
"""The BM25 sparse vector Milvus derives from ``search_text`` (never read or written by us)."""


@dataclass(frozen=True)
class MilvusConfig:
    """Where and how memories are stored.

    Attributes:
        uri: a file path (Milvus Lite, embedded, one process per file) or ``http://host:port``.
        collection: collection name.
        dim: vector dimension; a collection with another dimension is an error.
        partition_key: use ``tenant_id`` as the partition key. Turn off for Milvus 2.3 servers, where
            an upsert into a partition-key collection drops the row from filtered reads (seen on 2.3.5).
        num_partitions: partitions behind the partition key.
        token: ``user:password`` or an API token for a server; empty for none.
        timeout_s: per-call timeout, seconds.
        full_text: keep a BM25 index of ``content`` (Milvus's own full-text search: Milvus Lite
            3.x and servers 2.5+). Off for a 2.3/2.4 server, which has none: keyword search is then
            unavailable and recall scores keywords over its vector candidates only.
    """

    uri: str
    collection: str = "memories"
    dim: int = 384
    partition_key: bool = True
    num_partitions: int = 64
    token: str = ""
    timeout_s: float = 30.0
    full_text: bool = True


@dataclass(frozen=True)
class Filters:
    """Scalar filters applied before ranking; each empty field means "any".

    Attributes:
        states: lifecycle states to include (recall: ``active`` and ``archived``).
        current_at_us: keep only memories valid at this time (µs): not superseded by then.
        created_to_inclusive_us: keep only memories created at or before this time (µs): an
            as-of view, where later writes do not exist yet.
        tiers: tiers to include.
        tags_any: include memories carrying at least one of these tags.
        session_id, agent_id, user_id: exact match (the memory's scope).
        created_from_us, created_to_us: creation time range, microseconds since the epoch,
            inclusive start, exclusive end.
        memory_ids: restrict to these ids.
        summary_of_any: keep only summaries made from at least one of these ids (``summary_of``).
        derived_from_any: keep only memories merged into, or superseded by, one of these ids
            (``merged_into``, ``superseded_by``): what an erasure checks for the same words.
    """

    states: tuple[str, ...] = ("active",)
    current_at_us: int | None = None
    created_to_inclusive_us: int | None = None
    tiers: tuple[str, ...] = ()
    tags_any: tuple[str, ...] = ()
    session_id: str | None = None
    agent_id: str | None = None
    user_id: str | None = None
    created_from_us: int | None = None
    created_to_us: int | None = None
    memory_ids: tuple[str, ...] = ()
    summary_of_any: tuple[str, ...] = ()
    derived_from_any: tuple[str, ...] = ()


ANY_STATE = Filters(states=())


@dataclass(frozen=True)
class Hit:
    """A search result: the row and its cosine similarity to the query in [-1, 1]."""

    row: MemoryRow
    similarity: float


@dataclass(frozen=True)
class KeywordHit:
    """A full-text result: the row and its BM25 score (>= 0; term statistics are the
    collection's, so scores compare within one query only).
    """

    row: MemoryRow
    score: float


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r"}


def _literal(value: str) -> str:
    """A Milvus string literal of ``value``: quotes, backslashes and line breaks escaped, every
    other character as it is (Milvus Lite's parser knows no unicode escapes, which JSON would write).
    """
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in value) + '"'


def _in(field: str, values: Iterable[str]) -> str:
    return f"{field} in [{', '.join(_literal(v) for v in values)}]"


KEYS_PER_QUERY = 4_096
"""Ids read by key in one query, at most."""


def keys_expression(tenant_id: str, memory_ids: Sequence[str]) -> str:
    """``key in [...]`` for one tenant's memory ids: a primary-key lookup. Milvus Lite answers
    exactly this form from its key index, also through its endpoint (any other expression, a
    tenant term added, is a pass over every row of the collection: ~75x slower at 10,000 rows);
    a server looks the keys up in every partition. The key holds the tenant, so the ids cannot
    name another tenant's rows; callers still check ``tenant_id`` on what comes back.
    """
    tenant = check_id("tenant_id", tenant_id)
    return f"key in [{', '.join(_literal(f'{tenant}/{m}') for m in memory_ids)}]"


def filter_expression(tenant_id: str, filters: Filters) -> str:
    """The boolean expression for ``filters`` within one tenant; values are quoted, never pasted."""
    parts = [f"tenant_id == {_literal(check_id('tenant_id', tenant_id))}"]
    if filters.states:
        parts.append(_in("state", filters.states))
    if filters.current_at_us is not None:
        at = int(filters.current_at_us)
        parts.append(f"(valid_to_us == {CURRENT} or valid_to_us > {at})")
    if filters.created_to_inclusive_us is not None:
        parts.append(f"created_at_us <= {int(filters.created_to_inclusive_us)}")
    if filters.tiers:
        parts.append(_in("tier", filters.tiers))
    if filters.tags_any:
        parts.append(f"array_contains_any(tags, [{', '.join(map(_literal, filters.tags_any))}])")
    if filters.session_id is not None:
        parts.append(f"session_id == {_literal(filters.session_id)}")
    if filters.agent_id is not None:
        parts.append(f"agent_id == {_literal(filters.agent_id)}")
    if filters.user_id is not None:
        parts.append(f"user_id == {_literal(filters.user_id)}")
    if filters.created_from_us is not None:
        parts.append(f"created_at_us >= {int(filters.created_from_us)}")
    if filters.created_to_us is not None:
        parts.append(f"created_at_us < {int(filters.created_to_us)}")
    if filters.memory_ids:
        parts.append(_in("memory_id", filters.memory_ids))
    return " and ".join(parts + _linked(filters))


def _linked(filters: Filters) -> list[str]:
    """The parts of :func:`filter_expression` that follow links between memories."""
    parts = []
    if filters.summary_of_any:
        sources = ", ".join(map(_literal, filters.summary_of_any))
        parts.append(f"array_contains_any(summary_of, [{sources}])")
    if filters.derived_from_any:
        # "" is no link ("not merged", "current"): never looked for, or it would find them all
        ids = [i for i in filters.derived_from_any if i]
        if not ids:
            parts.append('memory_id == ""')  # no memory has an empty id: nothing
        else:
            parts.append(f"({_in('merged_into', ids)} or {_in('superseded_by', ids)})")
    return parts


def _tell(
    listeners: Sequence[Callable[[Sequence[MemoryRow]], None]], rows: Sequence[MemoryRow]
) -> None:
    """Hand ``rows`` to each listener; one that raises is logged (its failure is its own: the
    upsert's outcome stands) and the next is still told.
    """
    for listener in listeners:
        try:
            listener(rows)
        except Exception:
            log.exception("a listener of upserted rows failed")


class MilvusStore:
    """Memory rows in one Milvus collection. Every read and delete names its tenant."""

    def __init__(self, config: MilvusConfig) -> None:
        self.config = config
        self._client: Any = None
        # told the rows of every upsert that succeeded, in the upserting thread, after Milvus
        # took them (a reader in this process, the ranker's hot cache, need not read them back);
        # a listener that raises is logged, never failing the upsert
        self.upserted: list[Callable[[Sequence[MemoryRow]], None]] = []
        # told the rows of every upsert that raised (Milvus may have taken them all the same)
        self.upsert_failed: list[Callable[[Sequence[MemoryRow]], None]] = []

    # -- lifecycle -----------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the client; create the collection if it does not exist; check its dimension."""
        from pymilvus import MilvusClient  # noqa: PLC0415 - heavy import, deferred to connect

        def open_client() -> Any:  # noqa: ANN401
            return MilvusClient(uri=self.config.uri, token=self.config.token)

        self._client = self._call("connect", open_client)
        if self._call("connect", lambda: self._client.has_collection(self.config.collection)):
            self._check_dimension()
            self._call("load", lambda: self.client.load_collection(self.config.collection))
        else:
            self._create()

    @property
    def embedded(self) -> bool:
        """True for a Milvus Lite file: embedded in this process, the only one that opens the
        file (others reach it only through :meth:`endpoint`).
        """
        return self.config.uri.endswith(".db")

    def endpoint(self) -> str:
        """Where another process reaches this collection's Milvus: the URI of a server as
        configured; for a Milvus Lite file, the local gRPC address (``http://127.0.0.1:<port>``)
        of the Lite server pymilvus runs for it in this process, reachable while this process
        lives (Lite allows one process per file: others share it through this address). Call
        between :meth:`connect` and :meth:`close`; raises StorageError when not connected or
        when the Lite server cannot run.
        """
        if not self.embedded:
            return self.config.uri
        from milvus_lite.server_manager import server_manager_instance  # noqa: PLC0415

        if self._client is None:
            raise StorageError("endpoint", "not connected", retriable=False)
        # the server pymilvus started at connect (keyed by the file's path: this starts none)
        found = server_manager_instance.start_and_get_uri(self.config.uri)
        if found is None:
            raise StorageError("endpoint", "the Milvus Lite server is not running", retriable=False)
        return str(found)

    def close(self) -> None:
        """Close the client; safe to call twice."""
        if self._client is not None:
            self._call("close", self._client.close)
            self._client = None

    def drop(self) -> None:
        """Drop the collection (tests and rebuilds)."""
        self._call("drop", lambda: self.client.drop_collection(self.config.collection))

    def compact(self) -> None:
        """Ask Milvus to compact the collection: a server rewrites the segments that have deleted
        rows without them (their old files go at its garbage collection, ``dataCoord.gc``);
        Milvus Lite does nothing (its files keep deleted rows until the collection is dropped:
        ``mnemo rebuild --drop``). Returns once asked, not once done.
        """
        self._call("compact", lambda: self.client.compact(self.config.collection))

    def reachable(self, timeout_s: float = 2.0) -> bool:
        """True when the collection answers now (a cheap call, for readiness checks)."""
        if self._client is None:
            return False
        try:
            self._client.has_collection(self.config.collection, timeout=timeout_s)
        except Exception:
            return False
        return True

    @property
    def client(self) -> Any:  # noqa: ANN401 - pymilvus is untyped
        if self._client is None:
            raise StorageError("call", "the store is not connected", retriable=False)
        return self._client

    # -- writes --------------------------------------------------------------------------------

    def upsert(self, rows: Sequence[MemoryRow]) -> int:
        """Insert or replace whole rows; returns how many. Idempotent. Sent in requests of at
        most about :data:`UPSERT_BYTES` (a server refuses a message over its gRPC limit, 64 MiB
        by default, and no retry of it can pass); a request that fails raises, the rows of those
        before it are upserted.
        """
        if not rows:
            return 0
        entities = [self._checked(row) for row in rows]
        count = done = 0
        for end in _request_ends(entities, UPSERT_BYTES):
            part = entities[done:end]
            try:
                result = self._call(
                    "upsert",
                    functools.partial(
                        self.client.upsert,
                        self.config.collection,
                        part,
                        timeout=self.config.timeout_s,
                    ),
                )
            except StorageError:
                if done:
                    _tell(self.upserted, rows[:done])
                _tell(self.upsert_failed, rows[done:])  # Milvus may hold the rows all the same
                raise
            count += int(result.get("upsert_count", len(part)))
            done = end
        _tell(self.upserted, rows)
        return count

    def delete(self, tenant_id: str, memory_ids: Sequence[str]) -> int:
        """Delete rows of one tenant by memory id; returns how many ids were asked."""
        if not memory_ids:
            return 0
        expression = filter_expression(tenant_id, Filters(states=(), memory_ids=tuple(memory_ids)))
        self._call(
            "delete",
            lambda: self.client.delete(
                self.config.collection, filter=expression, timeout=self.config.timeout_s
            ),
        )
        return len(memory_ids)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        """Rows of one tenant by memory id, any state, read with strong consistency; ids not
        found are absent. A primary-key lookup (:func:`keys_expression`).
        """
        found = self._by_key(tenant_id, memory_ids, list(ROW_FIELDS))
        rows = (MemoryRow.from_entity(entity) for entity in found)
        return {row.memory_id: row for row in rows if row.tenant_id == tenant_id}

    def get_slim(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        """:meth:`get` without each row's vector and metadata (read as empty: neither crosses
        the wire), for readers that compare words and links (an erasure).
        """
        found = self._by_key(tenant_id, memory_ids, list(SLIM_FIELDS))
        rows = (MemoryRow.from_entity({**e, "vector": (), "metadata": {}}) for e in found)
        return {row.memory_id: row for row in rows if row.tenant_id == tenant_id}

    def _by_key(
        self, tenant_id: str, memory_ids: Sequence[str], fields: list[str]
    ) -> list[dict[str, Any]]:
        """``fields`` of one tenant's rows by memory id (:func:`keys_expression`), in chunks of
        at most :data:`KEYS_PER_QUERY` ids (Milvus caps a query's limit at 16,384).
        """
        found: list[dict[str, Any]] = []
        ids = list(dict.fromkeys(memory_ids))
        for i in range(0, len(ids), KEYS_PER_QUERY):
            chunk = ids[i : i + KEYS_PER_QUERY]
            query = functools.partial(
                self.client.query,
                self.config.collection,
                filter=keys_expression(tenant_id, chunk),
                output_fields=fields,
                limit=len(chunk),
                consistency_level="Strong",
                timeout=self.config.timeout_s,
            )
            found.extend(self._call("get", query))
        return found

    def relations(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The ``relations`` of one tenant's memories by id, any state (only that field is read:
        no vectors cross the wire). Ids not found are absent.
        """
        found = self._by_key(tenant_id, memory_ids, ["tenant_id", "memory_id", "relations"])
        return {
            e["memory_id"]: tuple(e["relations"] or ())
            for e in found
            if e["tenant_id"] == tenant_id
        }

    def query(
        self, tenant_id: str, filters: Filters = ANY_STATE, limit: int = 16_384
    ) -> list[MemoryRow]:
        """Rows of one tenant matching ``filters`` (at most ``limit``), strong consistency."""
        expression = filter_expression(tenant_id, filters)
        found = self._call(
            "query",
            lambda: self.client.query(
                self.config.collection,
                filter=expression,
                output_fields=list(ROW_FIELDS),
                limit=limit,
                consistency_level="Strong",
                timeout=self.config.timeout_s,
            ),
        )
        return [MemoryRow.from_entity(entity) for entity in found]

    def every_row(
        self, tenant_id: str, filters: Filters = ANY_STATE, batch_size: int = 2_000
    ) -> list[MemoryRow]:
        """Every row of one tenant matching ``filters``, however many (:meth:`query` stops at its
        ``limit``), read ``batch_size`` at a time; strong consistency. For readers that must see
        them all: consolidation, a user's erasure.
        """
        expression = filter_expression(tenant_id, filters)
        pages = self._pages("query", expression, batch_size, consistency_level="Strong")
        return [row for page in pages for row in page]

    def every_id(
        self, tenant_id: str, filters: Filters = ANY_STATE, batch_size: int = 2_000
    ) -> list[str]:
        """The ids of every row of one tenant matching ``filters`` (:meth:`every_row` reading
        the id alone: no vector or words cross the wire); strong consistency.
        """
        expression = filter_expression(tenant_id, filters)
        pages = self._entities(
            "query", expression, batch_size, ["memory_id"], consistency_level="Strong"
        )
        return [str(e["memory_id"]) for page in pages for e in page]

    def scan(self, batch_size: int = 2_000) -> Generator[list[MemoryRow], None, None]:
        """Every row of the collection, every tenant and state, ``batch_size`` rows at a time (one
        pass, no order promised; rows written meanwhile may or may not appear). For a reader that
        serves all tenants (the ranker's hot cache): one pass costs what one tenant's query costs
        on Milvus Lite per tenant.
        """
        return self._pages("scan", "", batch_size)

    def _pages(
        self, operation: str, expression: str, batch_size: int, **options: str
    ) -> Generator[list[MemoryRow], None, None]:
        """The rows matching ``expression`` ("" for all), a page of ``batch_size`` at a time,
        through Milvus's query iterator; errors translated under ``operation``.
        """
        fields = list(ROW_FIELDS)
        for page in self._entities(operation, expression, batch_size, fields, **options):
            yield [MemoryRow.from_entity(entity) for entity in page]

    def _entities(
        self,
        operation: str,
        expression: str,
        batch_size: int,
        fields: list[str],
        **options: str,
    ) -> Generator[list[dict[str, Any]], None, None]:
        """``fields`` of the rows matching ``expression``, as :meth:`_pages` reads them."""
        it = self._call(
            operation,
            lambda: self.client.query_iterator(
                self.config.collection,
                batch_size=batch_size,
                filter=expression,
                output_fields=fields,
                timeout=self.config.timeout_s,
                **options,
            ),
        )
        try:
            while page := self._call(operation, it.next):
                yield page
        finally:
            it.close()

    def count(self, tenant_id: str, filters: Filters = ANY_STATE) -> int:
        """How many rows of one tenant match ``filters``."""
        return self._count(filter_expression(tenant_id, filters))

    def total(self) -> int:
        """How many rows the collection holds, every tenant and state (strong consistency)."""
        return self._count("")

    def _count(self, expression: str) -> int:
        found = self._call(
            "count",
            lambda: self.client.query(
                self.config.collection,
                filter=expression,
                output_fields=["count(*)"],
                consistency_level="Strong",
                timeout=self.config.timeout_s,
            ),
        )
        return int(found[0]["count(*)"])

    def search(
        self,
        tenant_id: str,
        vectors: Sequence[Sequence[float]],
        k: int,
        filters: Filters = Filters(),
    ) -> list[list[Hit]]:
        """The ``k`` nearest rows (cosine) of one tenant for each query vector, after filters."""
        if not vectors:
            return []
        for i, vector in enumerate(vectors):
            self._check_dim(f"vectors[{i}]", vector)
        data = [[float(x) for x in v] for v in vectors]
        found = self._search("search", tenant_id, data, k, filters, "vector", "COSINE")
        return [
            [Hit(MemoryRow.from_entity(hit["entity"]), float(hit["distance"])) for hit in hits]
            for hits in found
        ]

    def keyword_search(
        self, tenant_id: str, texts: Sequence[str], k: int, filters: Filters = Filters()
    ) -> list[list[KeywordHit]]:
        """The ``k`` best rows by BM25 over ``search_text`` (context and content) for each query
        text, of one tenant, after filters; queries are stemmed as ``search_text`` is
        (:func:`memcore.keyword.keyword_text`), and one with no word finds nothing. Raises a
        non-retriable :class:`StorageError` when the collection keeps no full-text index
        (``MilvusConfig.full_text`` off).
        """
        if not texts:
            return []
        if not self.config.full_text:
            msg = "this collection keeps no full-text index (full_text is off)"
            raise StorageError("keyword_search", msg, retriable=False)
        queries = [keyword_text(t) for t in texts]
        asked = [q for q in queries if q]
        found = iter(
            self._search("keyword_search", tenant_id, asked, k, filters, _SPARSE, "BM25")
            if asked
            else []
        )
        return [
            [
                KeywordHit(MemoryRow.from_entity(hit["entity"]), abs(float(hit["distance"])))
                for hit in next(found)
            ]
            if q
            else []
            for q in queries
        ]

    # -- internals -----------------------------------------------------------------------------

    def _search(
        self,
        operation: str,
        tenant_id: str,
        data: list[Any],
        k: int,
        filters: Filters,
        field: str,
        metric: str,
    ) -> Any:  # noqa: ANN401 - pymilvus's result
        """One search call of one tenant over ``field`` (whole rows, strong consistency)."""
        expression = filter_expression(tenant_id, filters)
        return self._call(
            operation,
            lambda: self.client.search(
                self.config.collection,
                data=data,
                anns_field=field,
                filter=expression,
                limit=k,
                output_fields=list(ROW_FIELDS),
                search_params={"metric_type": metric},
                consistency_level="Strong",
                timeout=self.config.timeout_s,
            ),
        )

    def _create(self) -> None:
        from pymilvus import DataType, Function, FunctionType  # noqa: PLC0415

        def create() -> None:
            client = self.client
            options: dict[str, Any] = {}
            if self.config.partition_key:
                options = {
                    "partition_key_field": "tenant_id",
                    "num_partitions": self.config.num_partitions,
                }
            schema = client.create_schema(auto_id=False, enable_dynamic_field=False, **options)
            varchar: Mapping[str, int] = {
                "key": 2 * _ID_CHARS + 1,
                "tenant_id": _ID_CHARS,
                "memory_id": _ID_CHARS,
                "content": MAX_CONTENT_BYTES,
                "search_text": MAX_CONTENT_BYTES,
                "tier": 16,
                "state": 16,
                "session_id": 256,
                "agent_id": 256,
                "user_id": 256,
                "merged_into": _ID_CHARS,
                "superseded_by": _ID_CHARS,
            }
            schema.add_field("key", DataType.VARCHAR, is_primary=True, max_length=varchar["key"])
            for name in ("tenant_id", "memory_id", "content", "tier", "state"):
                schema.add_field(name, DataType.VARCHAR, max_length=varchar[name])
            text: dict[str, Any] = {"enable_analyzer": True} if self.config.full_text else {}
            schema.add_field(
                "search_text", DataType.VARCHAR, max_length=varchar["search_text"], **text
            )
            schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.config.dim)
            for name in ("importance", "tau_hours", "retention"):
                schema.add_field(name, DataType.DOUBLE)
            for name in (
                "access_count",
                "recall_count",
                "write_count",
                "created_at_us",
                "last_access_us",
                "state_changed_at_us",
                "review_count",
                "next_review_us",
                "valid_to_us",
            ):
                schema.add_field(name, DataType.INT64)
            for name in ("session_id", "agent_id", "user_id", "merged_into", "superseded_by"):
                schema.add_field(name, DataType.VARCHAR, max_length=varchar[name])
            for name, capacity, length in (
                ("tags", MAX_TAGS, MAX_TAG_CHARS),
                ("relations", MAX_RELATIONS, _ID_CHARS),
                ("summary_of", MAX_SUMMARY_SOURCES, _ID_CHARS),
            ):
                schema.add_field(
                    name,
                    DataType.ARRAY,
                    element_type=DataType.VARCHAR,
                    max_capacity=capacity,
                    max_length=length,
                )
            schema.add_field("metadata", DataType.JSON)
            index = client.prepare_index_params()
            index.add_index("vector", index_type="FLAT", metric_type="COSINE")
            if self.config.full_text:
                schema.add_field(_SPARSE, DataType.SPARSE_FLOAT_VECTOR)
                schema.add_function(
                    Function(
                        name="content_bm25",
                        function_type=FunctionType.BM25,
                        input_field_names=["search_text"],
                        output_field_names=[_SPARSE],
                    )
                )
                index.add_index(_SPARSE, index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
            client.create_collection(
                self.config.collection,
                schema=schema,
                index_params=index,
                consistency_level="Strong",
            )

        self._call("create_collection", create)

    def _check_dimension(self) -> None:
        """An existing collection must have every row field and the configured dimension."""
        info = self._call(
            "describe_collection", lambda: self.client.describe_collection(self.config.collection)
        )
        names = {f.get("name") for f in info.get("fields", [])}
        wanted = (*ROW_FIELDS, _SPARSE) if self.config.full_text else ROW_FIELDS
        missing = [f for f in wanted if f not in names]
        if missing:
            raise StorageError("connect", self._older_schema(missing), retriable=False)
        for field in info.get("fields", []):
            if field.get("name") == "vector":
                dim = int(field.get("params", {}).get("dim", 0))
                if dim != self.config.dim:
                    msg = f"collection {self.config.collection!r} has dim {dim}, configured {self.config.dim}"
                    raise StorageError("connect", msg, retriable=False)

    def _older_schema(self, missing: Sequence[str]) -> str:
        """Why an existing collection without ``missing`` fields cannot be served, and the way out:
        Milvus adds no field to a collection, so its rows are rebuilt into a new one from the
        worker's tables (e.g. ``user_id``, the user scope, is absent from collections made before
        it).
        """
        name = self.config.collection
        return (
            f"collection {name!r} lacks fields {list(missing)}: it was made by an older version. "
            "Rebuild it into a new collection with `python -m streams rebuild --collection <new>` "
            "(`mnemo rebuild`; with Milvus Lite, while the server is stopped), then set "
            "MNEMO_MILVUS_COLLECTION=<new> for the worker and the ranker"
        )

    def _check_dim(self, name: str, vector: Sequence[float]) -> None:
        if len(vector) != self.config.dim:
            msg = f"{name} has {len(vector)} dimensions, the collection {self.config.dim}"
            raise StorageError("check", msg, retriable=False)

    def _checked(self, row: MemoryRow) -> dict[str, Any]:
        self._check_dim(f"row {row.key} vector", row.vector)
        for name in ("content", "search_text"):
            if len(getattr(row, name).encode("utf-8")) > MAX_CONTENT_BYTES:
                msg = f"row {row.key} {name} over {MAX_CONTENT_BYTES} bytes"
                raise StorageError("upsert", msg, retriable=False)
        return row.to_entity()

    def _call(self, operation: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except StorageError:
            raise
        except Exception as exc:
            raise translate(operation, exc) from exc


UPSERT_BYTES = 16 * 2**20
"""The size an upsert request stays under, about (bytes; :func:`_request_ends`)."""


def _request_ends(entities: Sequence[Mapping[str, Any]], limit: int) -> list[int]:
    """Where each request ends (exclusive indexes) so that each carries about ``limit`` bytes at
    most (at least one entity): texts as UTF-8, the vector as float32, metadata as JSON.
    """
    ends: list[int] = []
    size = 0
    for i, entity in enumerate(entities):
        weight = _entity_bytes(entity)
        if size and size + weight > limit:
            ends.append(i)
            size = 0
        size += weight
    ends.append(len(entities))
    return ends


def _entity_bytes(entity: Mapping[str, Any]) -> int:
    size = 256 + 64 * len(entity) + len(orjson.dumps(entity.get("metadata")))
    for value in entity.values():
        if isinstance(value, str):
            size += len(value.encode("utf-8", "surrogatepass"))
        elif isinstance(value, list):  # the vector's floats; tags, relations, sources as strings
            size += sum(
                len(x.encode("utf-8", "surrogatepass")) + 16 if isinstance(x, str) else 4
                for x in value
            )
    return size


# Milvus status codes that say "try again": 2 connect failed / server unavailable (pymilvus raises it
# when no server answers) and 8 rate limited. Not 1100-1102: the 2.3 server answers 1100 for an
# invalid parameter (a field over its length), which no retry can fix.
_RETRIABLE_CODES = frozenset({2, 8})


def translate(operation: str, exc: BaseException) -> StorageError:
    """Our error for a pymilvus/gRPC/OS error: retriable when the server may answer later."""
    from pymilvus.exceptions import MilvusException, MilvusUnavailableException  # noqa: PLC0415

    if isinstance(exc, MilvusUnavailableException | ConnectionError | TimeoutError):
        return StorageError(operation, f"{type(exc).__name__}: {exc}", retriable=True)
    if isinstance(exc, MilvusException):
        code = getattr(exc, "code", None)
        retriable = (
            code in _RETRIABLE_CODES
            or _retriable_grpc(code)  # pymilvus's "Retry timeout" carries the gRPC status
            or bool(getattr(exc, "retriable", False))
        ) and not (getattr(exc, "is_input_error", False) or _too_large(exc))
        return StorageError(operation, f"{type(exc).__name__}: {exc}", retriable=retriable)
    import grpc  # noqa: PLC0415 - pymilvus's dependency, loaded with it

    name = type(exc).__module__ + "." + type(exc).__name__
    if isinstance(exc, grpc.RpcError) or name.startswith("grpc"):
        status = getattr(exc, "code", None)
        code = status() if callable(status) else None
        # a denied or invalid call, or one over the size limit: never
        retriable = (code is None or _retriable_grpc(code)) and not _too_large(exc)
        return StorageError(operation, f"{name}: {exc}", retriable=retriable)
    return StorageError(operation, f"{name}: {exc}", retriable=False)


_RETRIABLE_GRPC = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED"})
"""gRPC statuses that say "try again" (not a permission, authentication or argument error; nor a
message over the server's size limit, :func:`_too_large`, which is RESOURCE_EXHAUSTED too)."""


def _too_large(exc: BaseException) -> bool:
    """The server refused a message over its gRPC size limit: the same call fails again."""
    details = getattr(exc, "details", None)
    text = f"{exc} {details() if callable(details) else ''}"
    return "larger than max" in text or "message too large" in text.lower()


def _retriable_grpc(code: object) -> bool:
    """``code`` is a ``grpc.StatusCode`` of :data:`_RETRIABLE_GRPC`."""
    return type(code).__name__ == "StatusCode" and getattr(code, "name", None) in _RETRIABLE_GRPC
