"""Recall, write, access and get for one tenant at a time; the HTTP layer adds auth on top.

Recall (SPEC section 6): wait for the request's read-your-writes token when it has one; embed the
query (unless a vector is given); take the tenant's candidates, hybrid: the nearest memories by
vector and the best by BM25 over the tenant's whole corpus (Milvus full-text search), both under
the request's filters (active and archived memories, current versions as of ``at`` unless history
is asked); count graph hops over relations when the policy uses graph proximity; score them in the
shared micro-batch (one torch pass for many requests, exact similarity by FAISS); produce one
recall access event per returned memory unless ``track`` is off. Nothing is hidden at recall time
because it has faded (rule zero): decay only reorders.
Writes and accesses are produced to Kafka; the stream worker applies them. Each returns a
:class:`~ranker.applied.Token` that a later read can wait for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from memcore import Lifecycle, Purge, RankParams, Retire, Scored, Tier, derive_memory_id
from memcore.consolidation import SessionMember, merged_duplicate, session_end, session_end_time
from memcore.graph import MAX_HOPS, recall_hops
from memcore.keyword import bm25_scores
from memcore.policy import DecayPolicy, RecallPolicy
from memcore.scoring import versions_by_fact
from ranker.applied import AppliedOffsets, Token
from ranker.batcher import Batcher, BatchStats, Overloaded
from ranker.errors import Unavailable
from ranker.hotcache import HotCache, HotHits, LiveColumns, live_passes, passes
from ranker.kernel import (
    OUT_OF_MEMORY,
    RankRequest,
    default_device,
    heavy,
    light,
    rank_many,
    set_threads,
)
from ranker.listing import Page, page
from ranker.metrics import Metrics
from ranker.view import StateView
from storage import Filters, MemoryRow, MilvusStore, from_us, to_us
from storage.compacted import CompactedLogError
from storage.embedding import Embedder
from storage.key_log import KeyLog
from storage.records import decision_value
from storage.rows import CURRENT, LIVE_FIELDS, row_live_values
from storage.sealing import seal_write

GRAPH_FETCH_MAX = 1_000
"""Memories beyond the candidates whose relations one recall reads, per hop, at most."""

SOURCES_PER_QUERY = 1_000
"""Erased ids one query for the summaries made from them names, at most."""

log = logging.getLogger(__name__)

SPARE = 16
"""Candidates searched beyond ``k`` when ``k`` reaches the configured number of candidates."""
VERSION_HOPS = 8
"""The most versions a history recall follows, in turn, to find which listed version
superseded a listed one (:meth:`RecallService._top_versions`): the rest stands alone."""
_SUPERSEDED_BY = LIVE_FIELDS.index("superseded_by")
Send = Callable[[str, bytes, bytes], Awaitable[Awaitable[object]]]
"""Enqueue one message (topic role, key, value), in call order; returns its delivery to await
(its result has the ``partition`` and ``offset`` the message got)."""


@dataclass(frozen=True)
class Erasure:
    """What an erasure did.

    Attributes:
        token: what a read can wait for (the deletes and purges applied).
        keys: data keys destroyed (0 for memories written in the clear by another producer:
            their words stay in the log).
        summaries: ids of the summaries made from the erased memories, erased with them.
        copies: ids of the memories holding an erased memory's words, erased with it: the
            duplicates consolidation merged into it, and its versions (older or newer, by
            ``PATCH``) with the same content.
    """

    token: Token
    keys: int
    summaries: tuple[str, ...] = ()
    copies: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecallQuery:
    """One recall request, already validated.

    Attributes:
        text: query text (embedded when ``vector`` is None; also the keyword query).
        vector: query vector, or None.
        k: results wanted.
        at: the time to score at (recency) and, with the filters, the as-of time; the event
            time of the emitted accesses.
        policy: the tenant's recall policy with the request's overrides applied.
        filters: scalar filters applied in Milvus before ranking (states, validity, as-of).
        track: emit a recall access event per returned memory.
        after: wait until the worker has applied this token's writes and accesses.
        decay: the rates recency is scored with, by each memory's tier
            (:func:`memcore.policy.recall_decay`); None: each memory's own τ.
        include_history: superseded versions are asked for (``filters`` then leaves them in):
            every candidate is scored, and the places a fact's versions hold go to them newest
            first (:meth:`RecallService._top_versions`).
    """

    text: str | None
    vector: tuple[float, ...] | None
    k: int
    at: datetime
    policy: RecallPolicy
    filters: Filters = field(default_factory=Filters)
    track: bool = True
    after: Token | None = None
    decay: DecayPolicy | None = None
    include_history: bool = False


@dataclass(frozen=True)
class Recalled:
    """A returned memory with its score breakdown."""

    row: MemoryRow
    score: Scored


@dataclass(frozen=True)
class Recall:
    """A recall's answer.

    Attributes:
        results: the top ``k``, best first.
        token: the recall access events it produced (``track``), acknowledged by the broker, for
            a later read's ``after``; None when it produced none (``track`` off, or no result).
    """

    results: list[Recalled]
    token: Token | None = None


@dataclass(frozen=True)
class Candidate:
    """A candidate row: its similarity as the vector search gave it (0 when only the keyword
    search found it: the kernel computes the exact cosine from the vectors), its BM25 score
    (None when keywords are scored over the candidates instead) and its vector when the row
    carries none (the hot cache's).
    """

    row: MemoryRow
    similarity: float
    keyword: float | None
    vector: npt.NDArray[np.float32] | None = None


class RecallService:
    """Constructors do no I/O; the store and the producer are started by the caller."""

    def __init__(
        self,
        store: MilvusStore,
        embedder: Embedder,
        send: Send,
        *,
        candidates: int = 100,
        batch_max: int = 64,
        batch_wait_s: float = 0.002,
        queue_max: int = 1024,
        kernel_thread: bool | None = None,
        scoring_threads: int = 1,
        metrics: Metrics | None = None,
        applied: AppliedOffsets | None = None,
        view: StateView | None = None,
        cache: HotCache | None = None,
        keys: KeyLog | None = None,
    ) -> None:
        """``keys``: where each write's data key is minted and erased (:mod:`storage.key_log`);
        None: writes are produced in the clear and nothing can be erased (unit tests).
        ``applied``: how reads wait for a token; None: tokens are not waited for (a service
        without a worker to wait on, e.g. unit tests). ``view``: the live state laid over the
        rows Milvus returns (counters, importance, decay clock); None: the rows as stored.
        ``cache``: vector candidates from the ranker's memory where it can answer (exact, like
        Milvus); None: every vector search goes to Milvus. ``kernel_thread``: score every batch
        in the kernel's own thread (True), or a light batch (:func:`ranker.kernel.light`: no MMR,
        a few thousand candidates) on the event loop and the others in that thread (False);
        None: True when torch runs on CUDA (a batch waits on the device), else False (on the CPU
        a light batch costs well under a millisecond a request, less than handing it to a
        thread and back under the GIL). ``scoring_threads``: torch's and FAISS's threads in the
        kernel's thread (FAISS's OpenMP setting holds per thread).
        """
        self.cache = cache
        self.keys = keys
        self.metrics = metrics or Metrics()
        if cache is not None:
            self.metrics.hot_rows.set_function(lambda: cache.rows)  # read at scrape time
            self.metrics.hot_loads.set_function(lambda: cache.loads)
        self.applied = applied
        self.view = view
        self.store = store
        self.embedder = embedder
        self.send = send
        self.candidates = candidates
        self.kernel_thread = (
            default_device().type == "cuda" if kernel_thread is None else kernel_thread
        )
        self.scoring_threads = scoring_threads
        self._kernel: ThreadPoolExecutor | None = None  # started by start()
        self._heavy: ThreadPoolExecutor | None = None  # likewise, for heavy requests alone
        self._orphans: set[asyncio.Future[object]] = set()  # deliveries of failed requests
        lane = functools.partial(
            Batcher[RankRequest, list[Scored]],
            max_batch=batch_max,
            max_wait_s=batch_wait_s,
            max_queue=queue_max,
            on_batch=self._on_batch,
        )
        self.batcher = lane(self._score)
        # heavy requests (:func:`ranker.kernel.heavy`) in a lane of their own: one tenant's
        # MMR over 1,000 candidates held every other tenant's recall for seconds behind it
        self.heavy_batcher = lane(self._score_heavy)

    def _on_batch(self, stats: BatchStats) -> None:
        """Either lane's batch: the queue depth is both lanes' together."""
        queued = self.batcher.queued + self.heavy_batcher.queued
        self.metrics.on_batch(dataclasses.replace(stats, queued=queued))

    @property
    def running(self) -> bool:
        """Both lanes' batchers run (the service can score)."""
        return self.batcher.running and self.heavy_batcher.running

    async def start(self) -> None:
        self._kernel, self._heavy = (
            ThreadPoolExecutor(1, name, initializer=set_threads, initargs=(self.scoring_threads,))
            for name in ("kernel", "kernel-heavy")
        )
        await self.batcher.start()
        await self.heavy_batcher.start()

    async def stop(self) -> None:
        await self.heavy_batcher.stop()
        await self.batcher.stop()
        for pool in (self._kernel, self._heavy):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self._kernel = self._heavy = None

    async def _submit(self, request: RankRequest) -> list[Scored]:
        """Score ``request`` in its lane's next batch (raises Overloaded when that lane is full)."""
        lane = self.heavy_batcher if heavy(request) else self.batcher
        return await lane.submit(request)

    async def recall(self, tenant_id: str, query: RecallQuery) -> Recall:
        """The top ``k`` memories of one tenant, best first, and the token of the accesses the
        recall recorded. Raises Overloaded when saturated, and Unavailable (retriable) when the
        device runs out of memory embedding, searching or scoring, or the process is stopping.
        """
        try:
            with self.metrics.latency.time():
                return await self._recall(tenant_id, query)
        except Overloaded:
            self.metrics.overloaded.inc()
            raise
        except OUT_OF_MEMORY as exc:
            log.warning("recall: the device ran out of memory: %s", exc)
            raise Unavailable("device", "recall", "out of memory; retry") from exc

    async def _recall(self, tenant_id: str, query: RecallQuery) -> Recall:
        await self.wait(query.after)
        vector = query.vector
        if vector is None:
            (vector,) = await asyncio.to_thread(self.embedder.embed, [query.text or ""])
        hits = None
        if self.cache is not None and self._in_memory(tenant_id, query):
            # ~1 ms of numpy with no per-candidate Python: not worth a thread hop. Reading
            # nothing (io=False): a worker thread may have evicted the tenant (or marked an id)
            # since ready(), and its load must not run on the loop; None: searched in a thread
            hits = self.cache.search(
                tenant_id, vector, self._wanted(query), query.filters, io=False
            )
        request: RankRequest | None = None
        # BM25 over the candidates' texts (no full-text index gives their scores) is Python
        # per word of each: 100 candidates of 16 KB held the event loop, every tenant's
        # requests and the probes, for most of a second
        off_loop = self._keywords_here(query)
        # an erased memory whose row awaits its purge is no candidate (k others are returned)
        candidates: list[Candidate] | None = None  # None: the hot hits as they are, as columns
        if hits is not None:
            self.metrics.vector_searches.labels("hot").inc()
            erased = await self._erased_among(tenant_id, hits.ids)
            if erased:  # rare: the hot hits less the erased, as candidates
                candidates = _candidates_of(hits)
        else:
            candidates = await asyncio.to_thread(self._candidates, tenant_id, vector, query)
            erased = await self._erased_among(tenant_id, [c.row.memory_id for c in candidates])
        rows: Sequence[MemoryRow]
        if candidates is None:
            assert hits is not None
            rows = hits.rows
            ranked = _scoring(query, len(rows))
            if hits:
                build = functools.partial(_hot_request, hits, vector, ranked)
                request = await asyncio.to_thread(build) if off_loop else build()
        else:
            candidates = [c for c in candidates if c.row.memory_id not in erased]
            rows = [c.row for c in candidates]
            ranked = _scoring(query, len(rows))
            if candidates:
                relations: Mapping[str, Sequence[str]] = {}
                if _uses_graph(query.policy):
                    relations = await self._relations(tenant_id, candidates)
                build = functools.partial(
                    _request, candidates, vector, ranked, relations, self._live_values
                )
                request = await asyncio.to_thread(build) if off_loop else build()
        results: list[Recalled] = []
        if request is not None:
            scored = await self._submit(request)
            at = request.ids.index  # k of ~100 candidates: a scan in C beats building a dict
            results = [Recalled(self._live(rows[at(s.memory_id)]), s) for s in scored]
            results = [r for r in results if self._still_passes(tenant_id, r.row, query.filters)]
            results = await self._top_versions(tenant_id, results, query)
        if not (query.track and results):
            return Recall(results)
        token = await self._produce_all(
            [
                ("access-events", _access(tenant_id, r.row.memory_id, query.at, "recall"))
                for r in results
            ]
        )
        return Recall(results, token)

    def _candidates(
        self, tenant_id: str, vector: Sequence[float], query: RecallQuery
    ) -> list[Candidate]:
        """The vector top-N and, where the store keeps a full-text index and the policy scores
        keywords, the BM25 top-N, merged by id (blocking: run in a thread).
        """
        n = self._wanted(query)
        cached = self.cache.search(tenant_id, vector, n, query.filters) if self.cache else None
        self.metrics.vector_searches.labels("hot" if cached is not None else "milvus").inc()
        if cached is not None:
            merged = {c.row.memory_id: c for c in _candidates_of(cached)}
        else:
            (hits,) = self.store.search(tenant_id, [vector], n, query.filters)
            merged = {
                h.row.memory_id: Candidate(h.row, h.similarity, None)
                for h in hits
                if self._passes(h.row, query.filters)
            }
        if not self._keyword_search(query):
            return list(merged.values())
        (found,) = self.store.keyword_search(tenant_id, [query.text or ""], n, query.filters)
        scores = {h.row.memory_id: h.score for h in found}
        out = [
            Candidate(c.row, c.similarity, scores.get(m, 0.0), c.vector) for m, c in merged.items()
        ]
        seen = set(merged)
        for h in found:
            if h.row.memory_id not in seen and self._passes(h.row, query.filters):
                seen.add(h.row.memory_id)
                out.append(Candidate(h.row, 0.0, h.score))
        return out

    def _passes(self, row: MemoryRow, filters: Filters) -> bool:
        """Whether a row Milvus found passes ``filters`` on the view's state: Milvus filtered by
        the state its row holds, and the worker writes its table (whose changelog feeds the view)
        before the row, so a memory deleted, forgotten or superseded by then is no candidate. The
        hot cache's rows were judged on the view's values already.
        """
        return live_passes(self._live_values(row), filters)

    def _still_passes(self, tenant_id: str, row: MemoryRow, filters: Filters) -> bool:
        """Whether a scored result (``row``: the view's values laid over it) still passes
        ``filters`` and is not erased: a change the view applied while the request waited for
        its batch (deleted, superseded, erased meanwhile) is left out, not shown as such.
        """
        return passes(row.state, row.tier, row.valid_to_us, filters) and not self._erased_now(
            tenant_id, row.memory_id
        )

    def _wanted(self, query: RecallQuery) -> int:
        """Vector candidates per recall: ``candidates``, or :data:`SPARE` more than ``k`` where
        that is more, so that the few left out after the search (erased, retired by the view
        since Milvus's row) still leave ``k``.
        """
        return max(self.candidates, query.k + SPARE)

    def _keywords_here(self, query: RecallQuery) -> bool:
        """The request's keyword scores are computed here, over its candidates (:func:`_assemble`)."""
        return bool(query.text) and query.policy.scores_keywords and not self.store.config.full_text

    def _keyword_search(self, query: RecallQuery) -> bool:
        """The request's keyword candidates come from the store's full-text index."""
        return bool(query.text) and query.policy.scores_keywords and self.store.config.full_text

    def _in_memory(self, tenant_id: str, query: RecallQuery) -> bool:
        """The candidates come from the hot cache alone, with no I/O (no keyword search, no
        relations to read) and no per-candidate Python (:func:`_hot_request`).
        """
        return (
            self.cache is not None
            and self.cache.ready(tenant_id, query.filters)
            and not self._keyword_search(query)
            and not _uses_graph(query.policy)
        )

    def _live_values(self, row: MemoryRow) -> Sequence[Any]:
        """The row's :data:`storage.rows.LIVE_FIELDS`: the view's when it has them."""
        found = self.view.values(row.tenant_id, row.memory_id) if self.view is not None else None
        return found if found is not None else row_live_values(row)

    def _live(self, row: MemoryRow) -> MemoryRow:
        return self.view.overlay(row) if self.view is not None else row

    async def wait(self, after: Token | None) -> None:
        """Return once the worker has applied ``after`` (at once without one)."""
        if after is not None and self.applied is not None:
            await self.applied.wait(after)

    async def _top_versions(
        self, tenant_id: str, results: list[Recalled], query: RecallQuery
    ) -> list[Recalled]:
        """A history recall's top k: the places a fact's versions hold given to them newest
        first (:func:`memcore.versions_by_fact`); any other's results as they are. A fact is
        followed through ``superseded_by`` past versions that are not among the results (cut
        by ``min_score``, or no candidate), :data:`VERSION_HOPS` at most: "Paris" superseded by
        a "Rome" left out, itself superseded by a listed "Berlin", is Berlin's fact. The links
        are the state view's; Milvus is read (by id) only for versions it does not hold; a
        version neither holds (purged) ends the fact there.
        """
        if not query.include_history:
            return results
        listed = {r.row.memory_id for r in results}
        successor = {r.row.memory_id: r.row.superseded_by for r in results}
        reached = {m: s for m, s in successor.items() if s and s not in listed}
        passed: dict[str, set[str]] = {m: set() for m in reached}  # a cycle ends where it closes
        for _ in range(VERSION_HOPS):
            wanted = {v for v in reached.values() if v and v not in listed}
            if not wanted:
                break
            await self._links(tenant_id, wanted, successor)
            for m, v in reached.items():
                if v and v not in listed:
                    passed[m].add(v)
                    after = successor.get(v) or ""
                    reached[m] = "" if after in passed[m] else after
        pairs: list[tuple[str, str | None]] = []
        for r in results:
            found = reached.get(r.row.memory_id, r.row.superseded_by)
            pairs.append((r.row.memory_id, found if found in listed else None))
        return [results[i] for i in versions_by_fact(pairs)][: query.k]

    async def _links(self, tenant_id: str, memory_ids: set[str], known: dict[str, str]) -> None:
        """Add to ``known`` the ``superseded_by`` of each of ``memory_ids`` it lacks ("" for
        none): the state view's, else its Milvus row's (absent: none).
        """
        unread = []
        for memory_id in sorted(memory_ids - known.keys()):
            values = self.view.values(tenant_id, memory_id) if self.view is not None else None
            if values is None:
                unread.append(memory_id)
            else:
                known[memory_id] = values[_SUPERSEDED_BY] or ""
        if unread:
            rows = await self.get_many(tenant_id, unread, slim=True)
            for memory_id in unread:
                known[memory_id] = rows[memory_id].superseded_by if memory_id in rows else ""

    async def _relations(
        self, tenant_id: str, hits: Sequence[Candidate]
    ) -> dict[str, Sequence[str]]:
        """The candidates' relations, and those of the memories a path of at most ``MAX_HOPS``
        from a candidate passes through (read from the store, this tenant only, a bounded number
        per hop). Links *into* a memory from outside the candidates are not followed.
        """
        relations: dict[str, Sequence[str]] = {h.row.memory_id: h.row.relations for h in hits}
        frontier = {t for targets in relations.values() for t in targets} - relations.keys()
        for _ in range(MAX_HOPS - 1):
            if not frontier:
                break
            wanted = sorted(frontier)[:GRAPH_FETCH_MAX]
            found = await asyncio.to_thread(self.store.relations, tenant_id, wanted)
            for memory_id in wanted:
                relations[memory_id] = found.get(memory_id, ())
            frontier = {t for targets in found.values() for t in targets} - relations.keys()
        return relations

    async def write(
        self, tenant_id: str, documents: Sequence[Mapping[str, Any]]
    ) -> tuple[list[str], Token]:
        """Produce memory writes, sealed under fresh data keys (:meth:`sealed`); their ids
        (derived from the content when absent) and the token a read can wait for.
        """
        ids = [
            str(
                d.get("memory_id")
                or derive_memory_id(
                    tenant_id,
                    d["content"],
                    d.get("agent_id"),
                    d.get("session_id"),
                    d.get("user_id"),
                )
            )
            for d in documents
        ]
        records = [
            {"v": 1, **d, "tenant_id": tenant_id, "memory_id": m}
            for d, m in zip(documents, ids, strict=True)
        ]
        token = await self._produce_all([("memory-writes", r) for r in await self.sealed(records)])
        return ids, token

    async def sealed(self, records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """``records`` (writes) with their words sealed under a key minted for each, once every
        key is on the keys topic (as they are without keys). Raises KeyLogError (503).
        """
        if self.keys is None:
            return list(records)
        keys = await self.keys.mint(
            [(r["tenant_id"], r["memory_id"], r.get("user_id")) for r in records]
        )
        return [seal_write(r, k) for r, k in zip(records, keys, strict=True)]

    async def forget(
        self,
        tenant_id: str,
        memory_id: str,
        at: datetime,
        *,
        purge: bool = False,
        erase: bool = False,
    ) -> Token:
        """Delete one memory: a ``retire`` decision to ``deleted`` (recall never returns it; get
        shows it deleted), then with ``purge`` a ``purge`` decision (its row leaves Milvus; the
        worker's table keeps a tombstone). With ``erase`` (implies ``purge``), its data keys are
        erased first (:meth:`erase`). Audited; the token a read can wait for.
        """
        if erase:
            return (await self.erase(tenant_id, [memory_id], at)).token
        return await self._produce_all(_forget(tenant_id, memory_id, at, purge=purge))

    async def erase(
        self,
        tenant_id: str,
        memory_ids: Sequence[str],
        at: datetime,
        *,
        summaries: bool = True,
        erased_before: Sequence[str] = (),
        users: bool = False,
    ) -> Erasure:
        """Erase memories for good: their data keys are tombstoned on the keys topic (from then
        on no process can open their words in any topic, table or replay; the broker drops the
        keys at its next compaction), then each is deleted and purged (its row leaves Milvus, its
        document leaves the worker's table). The summaries made from them (``summary_of``, as
        Milvus holds it then; summaries of those too, however many generations) quote their
        words and are erased the same way, after them: a summary the worker makes later is
        refused or erased there (``streams.processor.Processor.quotes_erased``); the other
        sources of each, archived into it, are active again (the worker sends them a
        ``restore`` as the summary is deleted: :func:`memcore.summary_gone`). Raises
        KeyLogError (503) when the keys topic does not answer (nothing is deleted then) and
        StorageError when Milvus does not answer the summaries' query (the memories are erased,
        the summaries not yet): the call can be repeated. ``summaries`` False: ``memory_ids``
        are every memory of the tenant (its erasure), and no summary is looked for.
        ``erased_before``: memories erased by an earlier call whose summaries are looked for
        again (that call may have failed on their search), not erased again themselves.
        ``users``: the erasure markers of ``memory_ids`` name their users until the summaries
        are searched (a user's erasure repeated after that search failed finds them:
        :meth:`erased_user_memories`), then no more.
        """
        known = await self._rows(tenant_id, memory_ids) if summaries else {}  # their words
        first = (
            await self._copies_before(tenant_id, [*memory_ids, *erased_before], known)
            if summaries
            else []
        )
        erased = [*memory_ids, *first]
        named = set(memory_ids)
        token, keys = await self._erase(
            tenant_id,
            erased,
            at,
            users=users,
            why=lambda i: ERASED if i in named else ERASED_COPY,
        )
        done = set(erased) | set(erased_before)
        closed = set(done)  # their copies are all in ``first`` already: not searched again
        sources, made_from, copies = [*erased, *erased_before], list[str](), list(first)
        while summaries and sources:  # each round erases new ids only: it ends
            made = sorted(await self._summaries_of(tenant_id, sources, known) - done)
            unsearched = [s for s in sources if s not in closed]
            same = sorted(await self._copies_of(tenant_id, unsearched, known) - done - set(made))
            if not made and not same:
                break
            more, more_keys = await self._erase(
                tenant_id, [*made, *same], at, why=_summary_or_copy(set(made))
            )
            token = Token.union([token, more]) or token
            keys += more_keys
            done.update(made, same)
            made_from.extend(made)
            copies.extend(same)
            sources = [*made, *same]
        if users and self.keys is not None:
            await self.keys.forget_users(tenant_id, [*erased, *erased_before])
        return Erasure(token, keys, tuple(made_from), tuple(copies))

    async def _copies_before(
        self, tenant_id: str, memory_ids: Sequence[str], known: dict[str, MemoryRow]
    ) -> list[str]:
        """Every copy of ``memory_ids`` (:meth:`_copies_of`, and copies of those), read before
        anything is erased: a failed read erases nothing, and a repeated call finds them as the
        first did (an erased memory's row and links leave Milvus with its purge).
        """
        seen, found, frontier = set(memory_ids), list[str](), list(memory_ids)
        while frontier:
            more = sorted(await self._copies_of(tenant_id, frontier, known) - seen)
            seen.update(more)
            found.extend(more)
            frontier = more
        return found

    async def _erase(
        self,
        tenant_id: str,
        memory_ids: Sequence[str],
        at: datetime,
        *,
        users: bool = False,
        why: Callable[[str], str] = lambda _: ERASED,
    ) -> tuple[Token, int]:
        """:meth:`erase` of ``memory_ids`` alone: the token and the data keys destroyed (0 for a
        memory written in the clear by another producer: its words stay in the log). ``why``:
        each memory's reason in its audit records.
        """
        if self.keys is None:
            raise Unavailable("kafka", "erase", "this ranker holds no keys topic")
        keys = await self.keys.erase(tenant_id, memory_ids, users=users)
        messages = [
            m for i in memory_ids for m in _forget(tenant_id, i, at, purge=True, why=why(i))
        ]
        token = await self._produce_all(messages)
        # a key minted elsewhere before the purge was produced, for a write that may land
        # before it: erased too (a key minted after this catch-up is a write after the purge),
        # and its memory deleted and purged again (its write, landing after the first purge,
        # made the memory anew, whose row no later sync would delete: it no longer opens)
        late = await self.keys.erase(tenant_id, memory_ids, users=users)
        again = [i for i in memory_ids if late.get(i)]
        if again:
            more = await self._produce_all(
                [m for i in again for m in _forget(tenant_id, i, at, purge=True, why=why(i))]
            )
            token = Token.union([token, more]) or token
        return token, sum(keys.values()) + sum(late.values())

    async def _rows(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        """The rows Milvus holds of ``memory_ids`` now (any state), by id, read without their
        vectors and metadata (:meth:`MilvusStore.get_slim`: an erasure compares words and links).
        """
        found: dict[str, MemoryRow] = {}
        ids = list(dict.fromkeys(memory_ids))
        for start in range(0, len(ids), SOURCES_PER_QUERY):
            part = ids[start : start + SOURCES_PER_QUERY]
            rows = await asyncio.to_thread(self.store.get_slim, tenant_id, part)
            found.update((m, r) for m, r in rows.items() if r.tenant_id == tenant_id)
        return found

    async def _copies_of(
        self, tenant_id: str, memory_ids: Sequence[str], known: dict[str, MemoryRow]
    ) -> set[str]:
        """Ids of the tenant's memories (any state) holding the words of one of ``memory_ids``:
        merged into it (a duplicate consolidation deleted into it; not a summary's source, which
        is archived into it), or a version of it (superseded by it, or superseding it) with the
        same content, as Milvus holds them; ``known``: the rows read so far, by id (those of
        ``memory_ids`` before their erasure, and the summaries found), to which the rows found
        are added.
        """
        found: set[str] = set()
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return found
        linked: list[MemoryRow] = []
        for start in range(0, len(ids), SOURCES_PER_QUERY):
            part = tuple(ids[start : start + SOURCES_PER_QUERY])
            filters = Filters(states=(), derived_from_any=part)
            rows = await asyncio.to_thread(self.store.every_row, tenant_id, filters)
            linked.extend(r for r in rows if r.tenant_id == tenant_id)
        wanted = set(ids)
        # a merged row's survivor read when not known (its summary_of tells a source from a
        # duplicate); one Milvus no longer holds leaves the row alone
        unknown = {r.merged_into for r in linked if r.merged_into in wanted} - known.keys()
        if unknown:
            known.update(await self._rows(tenant_id, sorted(unknown)))
        for row in linked:
            newer = known.get(row.superseded_by) if row.superseded_by in wanted else None
            same = newer is not None and newer.content == row.content
            if same or _duplicate_of(row, wanted, known):
                found.add(row.memory_id)
                known[row.memory_id] = _slim(row)
        successors: dict[str, list[MemoryRow]] = {}
        for m in ids:
            older = known.get(m)
            if older is not None and older.superseded_by:
                successors.setdefault(older.superseded_by, []).append(older)
        if successors:
            newer_rows = await self._rows(tenant_id, list(successors))
            for memory_id, row in newer_rows.items():
                if any(row.content == older.content for older in successors[memory_id]):
                    found.add(memory_id)
                    known[memory_id] = row
        return found

    async def _summaries_of(
        self,
        tenant_id: str,
        memory_ids: Sequence[str],
        known: dict[str, MemoryRow] | None = None,
    ) -> set[str]:
        """Ids of the tenant's summaries (any state) made from any of ``memory_ids``; their rows
        added to ``known``.
        """
        found: set[str] = set()
        ids = list(dict.fromkeys(memory_ids))
        for start in range(0, len(ids), SOURCES_PER_QUERY):
            part = tuple(ids[start : start + SOURCES_PER_QUERY])
            filters = Filters(states=(), summary_of_any=part)
            rows = await asyncio.to_thread(self.store.every_row, tenant_id, filters)
            mine = [r for r in rows if r.tenant_id == tenant_id]
            found |= {r.memory_id for r in mine}
            if known is not None:
                known.update((r.memory_id, _slim(r)) for r in mine)
        return found

    async def erased(self, tenant_id: str, memory_id: str) -> bool:
        """True when this memory was erased and not written again since (after catching up with
        the keys topic): the worker may not have purged its row yet.
        """
        if self.keys is None:
            return False
        await self.keys.catch_up()
        return self._erased_now(tenant_id, memory_id)

    async def _erased_among(self, tenant_id: str, memory_ids: Iterable[str]) -> set[str]:
        """The erased ones among ``memory_ids`` (not written again since), which every read
        leaves out: an erasure's words are never shown while its purge waits for the worker.
        When one looks erased, the keys topic is read first (a write since, made through
        another ranker, holds a key this one may not have read yet); when it cannot be read,
        those that look erased are left out.
        """
        if self.keys is None:
            return set()
        erased = {m for m in memory_ids if self._erased_now(tenant_id, m)}
        if erased:
            try:
                await self.keys.catch_up()
            except CompactedLogError:
                return erased
            erased = {m for m in erased if self._erased_now(tenant_id, m)}
        return erased

    def _erased_now(self, tenant_id: str, memory_id: str) -> bool:
        """:meth:`erased` as this process knows it now (no catch-up)."""
        if self.keys is None:
            return False
        return self.keys.erased_memory(tenant_id, memory_id)

    async def has_keys(self, tenant_id: str, memory_id: str) -> bool:
        """True when the keys topic holds a data key of this memory (after catching up)."""
        if self.keys is None:
            return False
        await self.keys.catch_up()
        return bool(self.keys.of_memory(tenant_id, memory_id))

    async def user_memories(self, tenant_id: str, user_id: str) -> list[str]:
        """Ids of every memory of ``user_id`` in this tenant, in any state: those whose keys name
        the user and those Milvus holds under the user (written in the clear, or summaries).
        """
        ids: set[str] = set()
        if self.keys is not None:
            await self.keys.catch_up()
            ids |= self.keys.memories(tenant_id, user_id)
        filters = Filters(states=(), user_id=user_id)
        ids.update(await asyncio.to_thread(self.store.every_id, tenant_id, filters))
        return sorted(ids)

    async def end_session(
        self,
        tenant_id: str,
        scope: Filters,
        at: datetime | None,
        now: datetime,
        latest: datetime,
        after: Token | None = None,
    ) -> tuple[list[str], datetime, Token]:
        """End a session (SPEC sections 5 and 7), after ``after`` is applied (a client's own
        accesses) and every write the topics held when it arrived (the end offsets of
        ``memory-writes``, read first: a session's last turn is among its memories, whichever
        client wrote it; ``after`` alone left out another client's writes not applied yet),
        in one wait. Every memory of this tenant in ``scope`` (its ``session_id``, and
        ``user_id``/``agent_id`` when given) that exists at ``at`` gets a ``promote`` decision
        to episodic naming the session when
        :func:`memcore.session_end` says so, judged on its state as the state view holds it;
        the worker's reducer checks each again as it applies it, and audits it. ``at`` None:
        the end's time is :func:`memcore.session_end_time` (``now``, or the session's last
        access when later); no decision is dated after ``latest``.
        Returns the ids sent a promotion (in id order), the end's time and the token a read
        waits for. Raises StorageError when Milvus does not answer (nothing is produced),
        NotAppliedError when the worker did not catch up in time, and the producer's errors.
        """
        assert scope.session_id is not None, "a session end names its session"
        heads = await self._heads(("memory-writes",))  # every write held when the end arrived
        await self.wait(Token.union([t for t in (after, heads) if t is not None]))
        wanted = dataclasses.replace(scope, states=())
        if at is not None:
            wanted = dataclasses.replace(wanted, created_to_inclusive_us=to_us(at))
        ids = await asyncio.to_thread(self.store.every_id, tenant_id, wanted)
        rows = await self.get_many(tenant_id, sorted(set(ids)), slim=True)  # live values
        members = [_member(r) for _, r in sorted(rows.items()) if r.state in _LIFECYCLES]
        at = session_end_time(members, now, latest) if at is None else at
        promotions = session_end(members, scope.session_id, at, latest)
        messages = [("memory-writes", decision_value(tenant_id, m, e)) for m, e in promotions]
        return [m for m, _ in promotions], at, await self._produce_all(messages)

    async def erased_user_memories(self, tenant_id: str, user_id: str) -> list[str]:
        """Ids of the memories of ``user_id`` in this tenant erased by a user's erasure whose
        search for summaries has not succeeded yet (their erasure markers still name the user;
        not written again since), after catching up with the keys topic.
        """
        if self.keys is None:
            return []
        await self.keys.catch_up()
        return sorted(self.keys.erased_of_user(tenant_id, user_id))

    async def update(
        self, tenant_id: str, memory_id: str, document: Mapping[str, Any], at: datetime
    ) -> Token | None:
        """Write ``document`` (a checked write with its own ``memory_id``) as the new version
        of ``memory_id``, which it supersedes from ``at`` on (its ``valid_to``; as-of recall
        before ``at`` still finds it): one write naming ``memory_id`` in ``supersedes``, whose
        ``supersede`` the worker sends once the version is applied (:func:`memcore.versioning`),
        so a version it dead-letters supersedes nothing. Both are audited; the token a read can
        wait for (it covers the ``supersede``, derived from the write: :mod:`ranker.applied`;
        not what that derives in turn: a summary ``memory_id`` was archived into leaves recall a
        moment later).
        A summary ``memory_id`` was archived into is deleted by the worker as the supersession
        applies (:func:`memcore.summary_outdated`). None when ``memory_id`` was erased while
        the version was made (an erase answered between the caller's check and now found no
        version to erase): the version, which carries its words, is erased too.
        """
        new_id = str(document["memory_id"])
        version = {"v": 1, **document, "tenant_id": tenant_id, "supersedes": memory_id}
        (record,) = await self.sealed([version])
        token = await self._produce_all([("memory-writes", record)])
        try:
            erased = await self.erased(tenant_id, memory_id)
        except CompactedLogError as exc:  # the version is written: its answer stands
            log.warning("update of %s: erasures not read again: %s", memory_id, exc)
            return token
        if erased:
            await self.erase(tenant_id, [new_id], at)
            return None
        return token

    async def list_page(
        self,
        tenant_id: str,
        filters: Filters,
        after_id: str | None,
        limit: int,
        after: Token | None = None,
        ordered: Sequence[str] | None = None,
    ) -> Page:
        """One page of this tenant's memories in id order (see :mod:`ranker.listing`), after
        ``after`` is applied; the rows carry their live state. ``ordered``: the tenant's ids from
        :meth:`memory_ids` when the caller pages through many (an export); else read now.
        """
        await self.wait(after)
        ids = ordered if ordered is not None else await self.memory_ids(tenant_id)

        keep = functools.partial(self._passes, filters=filters)  # the view's state decides

        def candidate(memory_id: str) -> bool:  # no Milvus query for what the view rules out
            values = self.view.values(tenant_id, memory_id) if self.view is not None else None
            return values is None or live_passes(values, filters)

        asked = filters
        if self.view is not None:  # a row Milvus holds may be older than the view: not asked
            asked = dataclasses.replace(filters, states=(), tiers=(), current_at_us=None)
        found = await asyncio.to_thread(
            page, self.store, tenant_id, ids, asked, after_id, limit, keep, candidate
        )
        erased = await self._erased_among(tenant_id, [r.memory_id for r in found.rows])
        rows = [self._live(r) for r in found.rows if r.memory_id not in erased]
        return Page(rows, found.cursor)  # a page may be short: by what was erased, too

    async def barrier(self, roles: Sequence[str] = ("memory-writes", "access-events")) -> None:
        """Return once the worker has applied every record on the ``roles`` topics now (writes
        and accesses by default), on every partition the cluster has (the list is read again
        first), at once without a worker to wait for; raises NotAppliedError as a read's
        ``after`` does (behind a backlog of any tenant's), Unavailable when no broker answers.
        """
        await self.wait(await self._heads(roles))

    async def _heads(self, roles: Sequence[str]) -> Token | None:
        """The token of every record on the ``roles`` topics now, on every partition the
        cluster has (the list is read again first); None without a worker to wait for.
        """
        if self.applied is None:
            return None
        if self.applied.refresh is not None:  # a partition added lately holds writes too
            await self.applied.refresh()
        ends = [await self.applied.end_offsets(role) for role in roles]
        last = {
            role: {p: e - 1 for p, e in end.items() if e > 0}
            for role, end in zip(roles, ends, strict=True)
        }
        return Token({role: parts for role, parts in last.items() if parts})

    async def tenant_memories(self, tenant_id: str) -> list[str]:
        """Ids of every memory of this tenant, in any state: the worker's table's (the state
        view's; Milvus's without one) and those whose data keys the keys topic holds.
        """
        ids = {*await self.memory_ids(tenant_id), *await self.keyed_memories(tenant_id)}
        return sorted(ids)

    async def keyed_memories(self, tenant_id: str) -> list[str]:
        """Ids of this tenant's memories with a live data key (after catching up with the keys
        topic), sorted; none without one.
        """
        if self.keys is None:
            return []
        await self.keys.catch_up()
        return sorted(self.keys.ring.memories(tenant_id))

    async def memory_ids(self, tenant_id: str) -> Sequence[str]:
        """Every memory id of this tenant, sorted (read-only use): the state view's (the
        table's; :meth:`StateView.sorted_ids`), or without a view (tests) the ids of the rows
        Milvus holds.
        """
        if self.view is not None:
            return await self.view.sorted_ids(tenant_id)
        return sorted(await asyncio.to_thread(self.store.every_id, tenant_id, Filters(states=())))

    def purged(self, tenant_id: str, memory_id: str) -> bool:
        """The memory was purged, as the state view tells (among its last purge marks; False
        without a view): a read by id finds nothing of it.
        """
        return self.view is not None and self.view.purged(tenant_id, memory_id)

    async def get_many(
        self,
        tenant_id: str,
        memory_ids: Sequence[str],
        after: Token | None = None,
        *,
        slim: bool = False,
    ) -> dict[str, MemoryRow]:
        """This tenant's memories among ``memory_ids`` (any state) by id, after ``after`` is
        applied; ids it has none of are absent, as are memories erased (their rows may await
        their purge), and purged ones whose rows await the worker's delete. ``slim``: without
        their vectors and metadata (:meth:`storage.MilvusStore.get_slim`).
        """
        await self.wait(after)
        read = self.store.get_slim if slim else self.store.get
        found = await asyncio.to_thread(read, tenant_id, list(memory_ids))
        erased = await self._erased_among(tenant_id, found)
        view = self.view
        return {
            m: self._live(row)
            for m, row in found.items()
            if m not in erased and (view is None or not view.purged(tenant_id, m))
        }

    async def access(
        self, tenant_id: str, memory_ids: Sequence[str], at: datetime, kind: str
    ) -> Token:
        """Produce one access event per id; the token a read can wait for."""
        return await self._produce_all(
            [("access-events", _access(tenant_id, m, at, kind)) for m in memory_ids]
        )

    async def _produce_all(self, messages: Sequence[tuple[str, Mapping[str, Any]]]) -> Token:
        """Enqueue ``(topic role, value)`` in order (a memory's events keep their order), then
        wait for all deliveries at once: one round trip per call, not one per message. When one
        cannot be enqueued, those enqueued before it are still awaited, in the background (their
        failures logged, not left unretrieved), and the error is raised.
        """
        deliveries: list[Awaitable[object]] = []
        try:
            for role, v in messages:
                key = f"{v['tenant_id']}/{v['memory_id']}".encode()
                deliveries.append(await self.send(role, key, orjson.dumps(v)))
        except BaseException:
            for delivery in deliveries:
                task = asyncio.ensure_future(delivery)
                self._orphans.add(task)
                task.add_done_callback(self._orphan_done)
            raise
        done = await asyncio.gather(*deliveries)
        return Token.of([(role, meta) for (role, _), meta in zip(messages, done, strict=True)])

    def _orphan_done(self, task: asyncio.Future[object]) -> None:
        self._orphans.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("an event of a request answered with an error: %s", task.exception())

    async def get(
        self, tenant_id: str, memory_id: str, after: Token | None = None
    ) -> MemoryRow | None:
        """One memory of this tenant (any state), or None (also when it was erased and its row
        awaits its purge); after ``after`` is applied.
        """
        return (await self.get_many(tenant_id, [memory_id], after)).get(memory_id)

    async def _score(self, requests: Sequence[RankRequest]) -> list[list[Scored]]:
        if not self.kernel_thread and light(requests):
            return rank_many(requests)
        assert self._kernel is not None, "RecallService.start() first"
        return await asyncio.get_running_loop().run_in_executor(self._kernel, rank_many, requests)

    async def _score_heavy(self, requests: Sequence[RankRequest]) -> list[list[Scored]]:
        assert self._heavy is not None, "RecallService.start() first"
        return await asyncio.get_running_loop().run_in_executor(self._heavy, rank_many, requests)


def _slim(row: MemoryRow) -> MemoryRow:
    """``row`` without its vector and metadata: what an erasure holds of each row it reads
    (a user's 100,000 memories held whole cost ~1.7 GB).
    """
    return dataclasses.replace(row, vector=(), metadata={})


def _duplicate_of(
    row: MemoryRow, survivors: Collection[str], known: Mapping[str, MemoryRow]
) -> bool:
    """``row`` is merged into one of ``survivors`` as a duplicate
    (:func:`memcore.consolidation.merged_duplicate`, judged on the survivor's row if read).
    """
    if row.merged_into not in survivors:
        return False
    survivor = known.get(row.merged_into)
    summary_of = survivor.summary_of if survivor is not None else None
    return merged_duplicate(row.memory_id, row.state, row.merged_into, summary_of)


ERASED = "erased through the API"
"""The audit reason of a memory an erasure named (its delete and its purge)."""
ERASED_SUMMARY = "erased: a summary of an erased memory"
"""The audit reason of a summary erased because it quotes an erased memory."""
ERASED_COPY = "erased: a copy of an erased memory's words"
"""The audit reason of a duplicate merged into (or holding the words of) an erased memory."""


def _summary_or_copy(summaries: Collection[str]) -> Callable[[str], str]:
    """The audit reason of each memory an erasure found quoting an erased one."""
    return lambda memory_id: ERASED_SUMMARY if memory_id in summaries else ERASED_COPY


_LIFECYCLES = frozenset(state.value for state in Lifecycle)
"""A row's states that are a memory's (a purge's tombstone, ``purged``, is none)."""


def _member(row: MemoryRow) -> SessionMember:
    """A session's memory as :func:`memcore.session_end` judges it (a row with live values)."""
    return SessionMember(
        row.memory_id,
        Tier(row.tier),
        Lifecycle(row.state),
        from_us(row.last_access_us),
        superseded=row.valid_to_us != CURRENT or bool(row.superseded_by),
    )


def _forget(
    tenant_id: str, memory_id: str, at: datetime, *, purge: bool, why: str | None = None
) -> list[tuple[str, Mapping[str, Any]]]:
    """The decisions that delete (and with ``purge`` purge) one memory; ``why``: an erasure's
    reason for both (default: a delete's and a purge's through the API).
    """
    deleted = why or "deleted through the API"
    events: list[Retire | Purge] = [Retire(at, Lifecycle.DELETED, deleted)]
    if purge:
        events.append(Purge(at, why or "purged through the API"))
    return [("memory-writes", decision_value(tenant_id, memory_id, e)) for e in events]


def _access(tenant_id: str, memory_id: str, at: datetime, kind: str) -> dict[str, Any]:
    return {
        "v": 1,
        "tenant_id": tenant_id,
        "memory_id": memory_id,
        "at": at.isoformat(),
        "kind": kind,
    }


def _uses_graph(policy: RecallPolicy) -> bool:
    """The policy scores graph proximity (the candidates' relations are read)."""
    return policy.graphrag or policy.weights.graph > 0


def _candidates_of(hits: HotHits) -> list[Candidate]:
    """The hot cache's hits as candidates (their vectors kept: exact similarity, MMR)."""
    return [
        Candidate(r, s, None, v)
        for r, s, v in zip(hits.rows, hits.similarity.tolist(), hits.vectors, strict=True)
    ]


def _request(
    candidates: Sequence[Candidate],
    vector: Sequence[float],
    query: RecallQuery,
    relations: Mapping[str, Sequence[str]],
    live: Callable[[MemoryRow], Sequence[Any]] | None = None,
) -> RankRequest:
    """The kernel's columns: the candidates' live values (``live``: the state view's, else the
    row's, in :data:`storage.rows.LIVE_FIELDS` order), created time and vectors from the rows,
    graph hops over ``relations``.

    Keyword scores are the store's BM25 where it gave them, else BM25 over the candidates.
    """
    rows = [c.row for c in candidates]
    keywords = None
    if any(c.keyword is not None for c in candidates):
        keywords = np.asarray([c.keyword or 0.0 for c in candidates], dtype=np.float64)
    hops: dict[str, int] = {}
    if relations:
        hops = recall_hops({c.row.memory_id: c.similarity for c in candidates}, relations)
    n = len(rows)
    return _assemble(
        rows,
        ids=tuple([r.memory_id for r in rows]),
        similarity=np.fromiter((c.similarity for c in candidates), np.float64, n),
        live=LiveColumns.of([(live or row_live_values)(r) for r in rows]),
        created_at_us=np.fromiter((r.created_at_us for r in rows), np.int64, n),
        vectors=np.stack(
            [
                c.vector if c.vector is not None else np.asarray(c.row.vector, dtype=np.float32)
                for c in candidates
            ]
        ),
        query=query,
        vector=vector,
        keywords=keywords,
        graph_hops=np.fromiter((hops.get(r.memory_id, -1) for r in rows), np.int64, n),
    )


def _scoring(query: RecallQuery, candidates: int) -> RecallQuery:
    """The query the kernel scores ``candidates`` of: a history recall's asks for every one of
    them, ordered by fact before its top k (:meth:`RecallService._top_versions`).
    """
    if not query.include_history:
        return query
    return dataclasses.replace(query, k=max(query.k, candidates))


def _hot_request(hits: HotHits, vector: Sequence[float], query: RecallQuery) -> RankRequest:
    """The kernel's columns straight from the hot cache's (no graph: see :func:`_uses_graph`)."""
    return _assemble(
        hits.rows,
        ids=hits.ids,
        similarity=hits.similarity,
        live=hits.live,
        created_at_us=hits.created_at_us,
        vectors=hits.vectors,
        query=query,
        vector=vector,
        keywords=None,
        graph_hops=np.full(len(hits), -1, dtype=np.int64),
    )


def _assemble(
    rows: Sequence[MemoryRow],
    *,
    ids: tuple[str, ...],
    similarity: npt.NDArray[np.float64],
    live: LiveColumns,
    created_at_us: npt.NDArray[np.int64],
    vectors: npt.NDArray[np.float32],
    query: RecallQuery,
    vector: Sequence[float],
    keywords: npt.NDArray[np.float64] | None,
    graph_hops: npt.NDArray[np.int64],
) -> RankRequest:
    """One request of the kernel; ``keywords`` None: BM25 over the candidates when the query has
    text and the policy scores keywords, else zeros. The default policy scores what a full-text
    index reads, each row's ``search_text`` (context and content, stemmed); the named presets
    their sources' plain content.
    """
    policy = query.policy
    if keywords is None:
        if query.text and policy.scores_keywords:
            if policy.stems_keywords:
                texts = [r.search_text for r in rows]
                scores = bm25_scores(query.text, texts, indexed=True)
            else:
                scores = bm25_scores(query.text, [r.content for r in rows])
            keywords = np.asarray(scores, dtype=np.float64)
        else:
            keywords = np.zeros(len(rows), dtype=np.float64)
    return RankRequest(
        ids=ids,
        at_us=to_us(query.at),
        params=RankParams(k=query.k, policy=policy, decay=query.decay),
        similarity=similarity,
        keyword=keywords,
        importance=live.importance,
        last_access_us=live.last_access_us,
        created_at_us=created_at_us,
        tau_hours=live.tau_hours,
        graph_hops=graph_hops,
        tier=live.tier,
        accessed=live.accessed,
        archived=live.archived,
        vectors=vectors,
        query=np.asarray(vector, dtype=np.float32),
    )
