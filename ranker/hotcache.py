"""The hot cache: exact vector candidates per tenant from the ranker's own memory (issue 12).

Milvus keeps every memory version; a recall's vector stage costs a Milvus search (O(collection)
on Milvus Lite, a network round trip and a time tick on a server). For a tenant of at most
``tenant_max`` memories the ranker instead keeps the tenant's rows (vectors in one float32 block,
L2-normalised, so a dot product is the cosine Milvus computes) and answers the vector top-N by
one matrix product over the rows that pass the request's filters: exact, like Milvus's FLAT
index, and with no I/O.

Freshness: the state view (:class:`ranker.view.StateView`, fed from the worker's changelog) tells
the cache about every change of a memory's state. A change of what a search filters by (state,
tier, validity) is applied in place; a new memory, a new version (``write_count``), a deletion
or a tombstone marks the id dirty (stamped with its latest such change), and the next search of
that tenant first re-reads the dirty rows from Milvus (the worker writes the row before it
commits or marks the offsets a read-your-writes token waits for). A deleted memory's row is read
back until Milvus holds it deleted, or holds none: a purged or erased memory's slot is then
emptied (its words and vector leave the block) and taken again by a new memory. With the
worker in this process (``python -m server``) its rows come straight in
(:meth:`HotCache.upserted`) and a dirty id is left ``writer_grace_s`` for them before a search
reads it back (at once for a row it wrote during a preload's pass for a tenant not held then:
it hands over no such row). When that worker is the collection's only writer (Milvus
Lite embedded in the process: ``sole_writer``) and the preload read the whole collection, a
tenant the cache does not hold had no rows then, so the rows the worker writes for it start its
block: a new tenant's first recall reads nothing from Milvus. An access changes only counters,
importance and the decay clock: the block's scoring columns (what :class:`HotHits` hands the
kernel) take them in place, nothing is re-read.

At start-up the cache is filled from the rows the worker's tables hold, read from their changelogs
(:meth:`HotCache.fill`: in ``python -m server`` the rows its worker's start-up check read,
``streams.rebuild.catch_up``; in ``python -m ranker`` a read of its own, :mod:`ranker.warmup`),
or preloaded in one pass over the collection. A tenant it does not hold is loaded on
its first search (one Milvus query); a tenant over ``tenant_max`` rows, a filter the cache does
not evaluate (``tags_any``, ``memory_ids``) or a cache over its total row budget (least recently
searched tenants are dropped) answers None: the caller searches Milvus.
Both limits also hold as rows come in after the load (written by the worker in this process or
read back): a tenant that grows past ``tenant_max`` leaves the cache for Milvus.

Device: numpy on the CPU, or, with ``device`` (``MNEMO_HOT_CACHE_DEVICE=cuda``), each held tenant's
vectors also on the GPU, brought up to date slot by slot before a search, the product and the top
N computed there (:meth:`HotCache.search_many` answers several queries of a tenant by one product
on either). On an H200 one query a search was slower there than numpy (a launch, copies and a
synchronisation per search) and many queries of a large tenant faster (docs/benchmarks.md).

Thread-safety: searches run in worker threads or, when nothing is to be read from Milvus, in the
event loop (:meth:`HotCache.ready`); :meth:`HotCache.on_change` runs in the event loop,
:meth:`HotCache.upserted` in the worker's upsert thread; each tenant's block has a lock.
Memory: ``dim × 4`` bytes per row for the vector, ~80 bytes of numpy columns (up to twice that
with the blocks' growth slack), plus the row's other fields (no Python floats per vector
component): at least ~2 KB a row at 384 dimensions with short content (docs/benchmarks.md,
976,000 rows). With ``device``, the vectors' bytes again on the GPU (1.4 GB for 867,000 rows).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt
import torch

from memcore import Lifecycle, Tier
from memcore.errors import InvalidField
from storage import Filters, Hit, MemoryRow, MilvusStore, StorageError
from storage.codec import PURGED
from storage.milvus import ANY_STATE
from storage.rows import LIVE_FIELDS, row_live_values

log = logging.getLogger(__name__)

STATES = tuple(s.value for s in Lifecycle)
"""State names with a code each (an unknown name gets code -2)."""
TIERS = tuple(t.value for t in Tier)
DELETED = Lifecycle.DELETED.value
ABSENT = -1
"""State code of a slot whose memory is gone (deleted or never loaded)."""
LAY_CHUNK = 256
"""Rows a tenant's load lays per hold of its block's lock."""

DIRTY_GIVE_UP_S = 30.0
"""A dirty id Milvus still does not have after this long is no longer re-read at every search:
dropped when the state view no longer holds it live, else re-read every :data:`LATE_RETRY_S`."""
LATE_RETRY_S = 30.0
"""How often a memory the state view holds live, whose row Milvus still lacks past
:data:`DIRTY_GIVE_UP_S` (a worker stopped between its table write and its upsert), is looked for
again (seconds): once the row lands the cache takes it, with no change of the memory needed."""
LOCAL_WRITER_GRACE_S = 5.0
"""With a worker in this process (:meth:`HotCache.upserted`), how long a dirty id waits for that
worker's row before a search re-reads it from Milvus (seconds): re-reading a row the worker has
not written yet finds nothing, and on Milvus Lite each read scans the whole collection."""

GONE_CHECK_S = 1.0
"""How long after a deleted memory is told changed again (a purge, which the state view tells as a
change of a deleted memory; or an event the reducer ignored) its row is first looked for: gone
from Milvus, its slot is emptied."""
GONE_GIVE_UP_S = 300.0
"""How long such a memory is looked for again (every :data:`LATE_RETRY_S`) while Milvus still
has its row (a worker stopped before its delete; or nothing was purged): then its slot is kept."""
_LATE = -math.inf
"""What :meth:`HotCache._due` gives a late id (a dirty id's value is when it was marked)."""
_STATE = LIVE_FIELDS.index("state")
_TIER = LIVE_FIELDS.index("tier")
_WRITES = LIVE_FIELDS.index("write_count")
_VALID_TO = LIVE_FIELDS.index("valid_to_us")
_SUPERSEDED_BY = LIVE_FIELDS.index("superseded_by")
_IMPORTANCE = LIVE_FIELDS.index("importance")
_LAST_ACCESS = LIVE_FIELDS.index("last_access_us")
_TAU = LIVE_FIELDS.index("tau_hours")
_ACCESSES = LIVE_FIELDS.index("access_count")
_ARCHIVED = STATES.index("archived")
_DELETED = STATES.index(DELETED)

Vector = npt.NDArray[np.float32]


def _code(names: Sequence[str], value: str) -> int:
    return names.index(value) if value in names else -2


def _any_of(
    column: npt.NDArray[np.int8], names: Sequence[str], wanted: Sequence[str]
) -> npt.NDArray[np.bool_]:
    """Rows whose code is one of the wanted names' (an unknown name matches no row); a loop of
    comparisons: a filter names one to four values, where ``np.isin`` costs far more.
    """
    out = np.zeros(len(column), dtype=np.bool_)
    for value in wanted:
        if value in names:
            out |= column == names.index(value)
    return out


def live_passes(values: Sequence[Any], filters: Filters) -> bool:
    """Whether a memory with these :data:`storage.rows.LIVE_FIELDS` passes what ``filters`` ask
    of them (state, tier, validity), as :meth:`_Block.mask` evaluates them on the view's values:
    a candidate Milvus found under an older state (the worker writes its table, whose changelog
    feeds the view, before the row) is judged as the hot cache judges it.
    """
    return passes(str(values[_STATE]), str(values[_TIER]), int(values[_VALID_TO]), filters)


def passes(state: str, tier: str, valid_to_us: int, filters: Filters) -> bool:
    """Whether a memory in ``state`` and ``tier``, current until ``valid_to_us`` (0: still
    current), passes what ``filters`` ask of them (:func:`live_passes`).
    """
    if filters.states and state not in filters.states:
        return False
    if filters.tiers and tier not in filters.tiers:
        return False
    return filters.current_at_us is None or valid_to_us == 0 or valid_to_us > filters.current_at_us


def search_device(name: str) -> torch.device | None:
    """Where a hot cache set to ``name`` (``MNEMO_HOT_CACHE_DEVICE``) searches: None for numpy on
    the CPU (``cpu``), CUDA for ``cuda``. Raises :class:`InvalidField` for ``cuda`` when torch
    sees no GPU (at start-up, not at the first recall).
    """
    if name == "cpu":
        return None
    if name != "cuda":
        raise InvalidField("hot_cache_device", name, "expected cpu or cuda")
    if not torch.cuda.is_available():
        raise InvalidField("hot_cache_device", name, "torch sees no CUDA device")
    return torch.device("cuda")


def _unit_rows(queries: Vector) -> Vector:
    """Each row scaled to length 1 (a zero row left as it is)."""
    norms = np.linalg.norm(queries, axis=1, keepdims=True)
    out = queries.copy()
    np.divide(queries, norms, out=out, where=norms > 0)
    return out


Top = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]
"""One query's passing slots, best first, and their cosines."""


def _tops(products: Vector, keep: npt.NDArray[np.bool_], n: int) -> list[Top]:
    """Per query (a column of ``products``: rows × queries), the ``n`` best slots that ``keep``
    lets through; a non-finite product (none expected: vectors are checked) never outranks a row.
    """
    out = []
    for column in products.T:
        passing = keep & np.isfinite(column)
        m = min(n, int(np.count_nonzero(passing)))
        scores = np.where(passing, column, -np.inf)
        top = np.argpartition(-scores, m - 1)[:m] if len(scores) > m > 0 else np.arange(m)
        top = top[np.argsort(-scores[top], kind="stable")]
        out.append((top, scores[top].astype(np.float64)))
    return out


def _device_tops(
    vectors: torch.Tensor, queries: Vector, keep: npt.NDArray[np.bool_], n: int
) -> list[Top]:
    """:func:`_tops` with the product and the top ``n`` computed where ``vectors`` (the used
    rows) are; only ``queries`` × ``n`` indices and cosines come back.
    """
    device = vectors.device
    products = torch.from_numpy(queries).to(device) @ vectors.T  # queries × rows
    passing = torch.from_numpy(keep).to(device) & torch.isfinite(products)
    scores = products.masked_fill(~passing, -math.inf)
    values, index = torch.topk(scores, min(n, vectors.shape[0]), dim=1)
    found = values.cpu().numpy(), index.cpu().numpy()
    out = []
    for value, slot in zip(*found, strict=True):
        met = value > -np.inf
        out.append((slot[met].astype(np.int64), value[met].astype(np.float64)))
    return out


@dataclass(frozen=True)
class LiveColumns:
    """What scoring reads of each candidate's live state (the state view's values when it has
    them, else the row's), one entry per candidate.

    Attributes:
        importance: [0, 1].
        last_access_us: µs since the epoch.
        tau_hours: decay constant, hours.
        accessed: ever accessed (``access_count`` > 0).
        tier: the tier's place in :data:`TIERS` (-2: a name it lacks).
        archived: lifecycle state ``archived``.
    """

    importance: npt.NDArray[np.float64]
    last_access_us: npt.NDArray[np.int64]
    tau_hours: npt.NDArray[np.float64]
    accessed: npt.NDArray[np.bool_]
    tier: npt.NDArray[np.int8]
    archived: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, values: Sequence[Sequence[Any]]) -> LiveColumns:
        """Columns from :data:`storage.rows.LIVE_FIELDS` tuples, one per candidate."""
        n = len(values)
        return cls(
            importance=np.fromiter((v[_IMPORTANCE] for v in values), np.float64, n),
            last_access_us=np.fromiter((v[_LAST_ACCESS] for v in values), np.int64, n),
            tau_hours=np.fromiter((v[_TAU] for v in values), np.float64, n),
            accessed=np.fromiter((v[_ACCESSES] > 0 for v in values), np.bool_, n),
            tier=np.fromiter((_code(TIERS, str(v[_TIER])) for v in values), np.int8, n),
            archived=np.fromiter((v[_STATE] == "archived" for v in values), np.bool_, n),
        )


@dataclass(frozen=True)
class HotHits:
    """A search's vector candidates as columns, best first: what the scoring kernel takes, with
    no Python object per candidate but its row.

    Attributes:
        ids: the memory ids.
        rows: the rows (their ``vector`` left empty; state, tier and validity follow the view,
            the other live fields are as loaded: lay the state view over them before showing).
        similarity: cosine to the query, [n].
        vectors: unit vectors, [n, dim] (a copy).
        created_at_us: µs since the epoch, [n].
        live: the live values scoring reads, as of the search.
    """

    ids: tuple[str, ...]
    rows: list[MemoryRow]
    similarity: npt.NDArray[np.float64]
    vectors: Vector
    created_at_us: npt.NDArray[np.int64]
    live: LiveColumns

    def __len__(self) -> int:
        return len(self.rows)


class _Block:
    """One tenant's rows: parallel columns of capacity ``len(vectors)``, the first ``n`` used,
    of which the ``free`` slots (memories removed: purged, erased, dropped) hold nothing and are
    taken again by the next new memories.
    """

    def __init__(self, dim: int) -> None:
        self.lock = threading.Lock()
        self.n = 0
        self.free: list[int] = []
        """Used slots whose memory was removed: emptied (no row, a zero vector, state
        :data:`ABSENT`), no longer counted (:attr:`held`), taken again by :meth:`put`."""
        self.rows: list[MemoryRow | None] = []
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        self.vectors = np.zeros((16, dim), dtype=np.float32)
        self.state = np.full(16, ABSENT, dtype=np.int8)
        self.tier = np.zeros(16, dtype=np.int8)
        self.created = np.zeros(16, dtype=np.int64)
        self.valid_to = np.zeros(16, dtype=np.int64)
        self.writes = np.zeros(16, dtype=np.int64)
        self.importance = np.zeros(16, dtype=np.float64)
        self.last_access = np.zeros(16, dtype=np.int64)
        self.tau = np.zeros(16, dtype=np.float64)
        self.accessed = np.zeros(16, dtype=np.bool_)
        self.session = np.empty(16, dtype=object)
        self.agent = np.empty(16, dtype=object)
        self.user = np.empty(16, dtype=object)
        self.dirty: dict[str, float] = {}  # memory id -> monotonic time of its latest change
        self.marked: dict[str, tuple[int, str]] = {}
        """Memory id -> (write count, state) the view told when the id was last marked dirty
        ((-1, ""): a removal), so a mere access to an awaited memory does not restamp it."""
        self.gone: dict[str, float] = {}
        """Ids told deleted again while held deleted (a purge, which the view tells as a state
        change; or an event the reducer ignored: the view's values are the same) -> when first
        told: looked for on the late cadence (:data:`GONE_CHECK_S`, then every
        :data:`LATE_RETRY_S`) until Milvus no longer has their row, or :data:`GONE_GIVE_UP_S`."""
        self.late: dict[str, float] = {}
        """Memory id -> when to look for its row again (:data:`LATE_RETRY_S`)."""
        self.mirror: torch.Tensor | None = None
        """``vectors`` on the search device (None: not copied yet); copied again whole when its
        capacity is no longer the block's (:meth:`on_device`)."""
        self.moved: set[int] = set()
        """Slots whose vector changed since the mirror was brought up to date."""

    def put(self, row: MemoryRow) -> None:
        """Insert or replace ``row`` (its vector is copied, normalised, into the block)."""
        slot = self.index.get(row.memory_id)
        if slot is None:
            if self.free:
                slot = self.free.pop()
                self.ids[slot] = row.memory_id
            else:
                slot = self.n
                if slot == len(self.state):
                    self._grow()
                self.n += 1
                self.rows.append(None)
                self.ids.append(row.memory_id)
            self.index[row.memory_id] = slot
        vector = np.asarray(row.vector, dtype=np.float32)
        norm = float(np.linalg.norm(vector))
        self.vectors[slot] = vector / norm if norm > 0 else vector
        self.moved.add(slot)
        self.rows[slot] = dataclasses.replace(row, vector=())
        self.state[slot] = _code(STATES, row.state)
        self.tier[slot] = _code(TIERS, row.tier)
        self.created[slot] = row.created_at_us
        self.valid_to[slot] = row.valid_to_us
        self.writes[slot] = row.write_count
        self._score_values(slot, row_live_values(row))
        self.session[slot] = row.session_id
        self.agent[slot] = row.agent_id
        self.user[slot] = row.user_id

    def newer(self, row: MemoryRow) -> bool:
        """The block holds a later version of the same memory as ``row`` (same creation time,
        a higher ``write_count``). A rewrite after a delete starts a new memory (its creation
        time is the rewrite's, which a client may set; its count started again in states
        written before memcore kept it going): never ordered against the old one here.
        """
        slot = self.index.get(row.memory_id)
        if slot is None or self.state[slot] == ABSENT:
            return False
        return int(self.created[slot]) == row.created_at_us and int(self.writes[slot]) > (
            row.write_count
        )

    def _score_values(self, slot: int, values: Sequence[Any]) -> None:
        self.importance[slot] = float(values[_IMPORTANCE])
        self.last_access[slot] = int(values[_LAST_ACCESS])
        self.tau[slot] = float(values[_TAU])
        self.accessed[slot] = int(values[_ACCESSES]) > 0

    def holds(self, memory_id: str) -> bool:
        """The memory has a row here (not removed)."""
        slot = self.index.get(memory_id)
        return slot is not None and self.state[slot] != ABSENT

    def clean(self, memory_id: str) -> None:
        """Nothing is awaited of the memory any more: no longer dirty, late or gone."""
        self.dirty.pop(memory_id, None)
        self.marked.pop(memory_id, None)
        self.late.pop(memory_id, None)
        self.gone.pop(memory_id, None)

    @property
    def held(self) -> int:
        """Memories held (used slots less the free ones): what the row limits count."""
        return self.n - len(self.free)

    def remove(self, memory_id: str) -> None:
        """Empty the memory's slot (its row, words and vector leave the block) and free it."""
        slot = self.index.pop(memory_id, None)
        if slot is None:
            return
        self.state[slot] = ABSENT
        self.rows[slot] = None
        self.ids[slot] = ""
        self.vectors[slot] = 0.0
        self.moved.add(slot)
        self.session[slot] = self.agent[slot] = self.user[slot] = None
        self.free.append(slot)

    def live(self, memory_id: str, values: Sequence[Any]) -> bool:
        """Apply a memory's live values in place (an access's counters, importance and clock; a
        state change): the view is their source of truth, also while a newer version's row is
        awaited. True when the row must be re-read (a new memory or a newer version than the
        block's: what is embedded, scoped or linked may have changed).
        """
        slot = self.index.get(memory_id)
        if slot is None or self.state[slot] == ABSENT:
            return True
        if self.state[slot] == _DELETED and str(values[_STATE]) != DELETED:
            # only a write takes a memory out of ``deleted``, and it starts a new memory (whose
            # count started again before memcore kept it going, so the count cannot tell): the
            # row held is of a memory that is no more, never to be served as the new one's
            self.remove(memory_id)
            return True
        if int(values[_WRITES]) < int(self.writes[slot]):
            # the view is behind the row held (the local worker hands its row over as soon as
            # it is written, the view reads the changelog): its values are of an older version,
            # a deleted one's included; the row's own stand until the view catches up
            return False
        self._score_values(slot, values)
        self.state[slot] = _code(STATES, str(values[_STATE]))
        self.tier[slot] = _code(TIERS, str(values[_TIER]))
        self.valid_to[slot] = int(values[_VALID_TO])
        row = self.rows[slot]
        shown = (
            str(values[_STATE]),
            str(values[_TIER]),
            int(values[_VALID_TO]),
            str(values[_SUPERSEDED_BY]),
        )
        if row is not None and shown != (row.state, row.tier, row.valid_to_us, row.superseded_by):
            state, tier, valid_to_us, superseded_by = shown  # an access changes none of these
            self.rows[slot] = dataclasses.replace(
                row, state=state, tier=tier, valid_to_us=valid_to_us, superseded_by=superseded_by
            )
        return int(values[_WRITES]) > int(self.writes[slot])

    def mask(self, filters: Filters) -> npt.NDArray[np.bool_]:
        """The used slots that pass ``filters`` (as :func:`storage.milvus.filter_expression`)."""
        n = self.n
        keep = self.state[:n] != ABSENT
        if filters.states:
            keep &= _any_of(self.state[:n], STATES, filters.states)
        if filters.current_at_us is not None:
            valid_to = self.valid_to[:n]
            keep &= (valid_to == 0) | (valid_to > filters.current_at_us)
        created = self.created[:n]
        if filters.created_to_inclusive_us is not None:
            keep &= created <= filters.created_to_inclusive_us
        if filters.created_from_us is not None:
            keep &= created >= filters.created_from_us
        if filters.created_to_us is not None:
            keep &= created < filters.created_to_us
        if filters.tiers:
            keep &= _any_of(self.tier[:n], TIERS, filters.tiers)
        if filters.session_id is not None:
            keep &= np.asarray(self.session[:n] == filters.session_id, dtype=np.bool_)
        if filters.agent_id is not None:
            keep &= np.asarray(self.agent[:n] == filters.agent_id, dtype=np.bool_)
        if filters.user_id is not None:
            keep &= np.asarray(self.user[:n] == filters.user_id, dtype=np.bool_)
        return np.asarray(keep, dtype=np.bool_)

    def _grow(self) -> None:
        cap = 2 * len(self.state)
        for name in (
            "vectors",
            "state",
            "tier",
            "created",
            "valid_to",
            "writes",
            "importance",
            "last_access",
            "tau",
            "accessed",
            "session",
            "agent",
            "user",
        ):
            old = getattr(self, name)
            new = (
                np.full((cap, *old.shape[1:]), ABSENT, dtype=old.dtype)
                if name == "state"
                else np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            )
            new[: len(old)] = old
            setattr(self, name, new)

    def on_device(self, device: torch.device) -> torch.Tensor:
        """``vectors`` on ``device`` (a copy, also on the CPU), brought up to date first: copied
        whole when the block grew since, else only the slots put since. Call under ``lock``.
        """
        if self.mirror is None or self.mirror.shape[0] != len(self.vectors):
            self.mirror = torch.from_numpy(self.vectors).to(device, copy=True)
        elif self.moved:
            slots = np.fromiter(self.moved, dtype=np.int64, count=len(self.moved))
            index = torch.from_numpy(slots).to(device)
            self.mirror[index] = torch.from_numpy(self.vectors[slots]).to(device)
        self.moved.clear()
        return self.mirror

    def hits(self, top: npt.NDArray[np.int64], similarity: npt.NDArray[np.float64]) -> HotHits:
        """The slots ``top`` (best first) with their cosines, as columns. Call under ``lock``."""
        rows, ids, slots = self.rows, self.ids, top.tolist()
        return HotHits(
            ids=tuple([ids[slot] for slot in slots]),
            rows=[rows[slot] for slot in slots],
            similarity=similarity,
            vectors=self.vectors[top],
            created_at_us=self.created[top],
            live=LiveColumns(
                importance=self.importance[top],
                last_access_us=self.last_access[top],
                tau_hours=self.tau[top],
                accessed=self.accessed[top],
                tier=self.tier[top],
                archived=self.state[top] == _ARCHIVED,
            ),
        )


class PreloadStoppedError(Exception):
    """A preload ended early by :meth:`HotCache.stop_preload`; the tenants it had begun are not
    held (they load at their first search).
    """


class HotCache:
    """Exact per-tenant vector candidates (see the module doc). The constructor does no I/O.

    ``tenant_max``: the largest tenant (rows, any state) kept; larger tenants use Milvus.
    ``total_max``: rows kept over all tenants; beyond it, least recently searched tenants go.
    ``live_of``: a memory's live values as the state view holds them (None: none known), laid
    over rows read from Milvus, which may be older. ``ids_of``: the ids the state view holds for
    a tenant (a load awaits those Milvus has no row for yet). ``clock``: monotonic seconds (for
    tests).
    """

    def __init__(
        self,
        store: MilvusStore,
        live_of: Callable[[str, str], Sequence[Any] | None] = lambda _t, _m: None,
        *,
        ids_of: Callable[[str], Iterable[str]] = lambda _t: (),
        purged_writes: Callable[[str, str], int | None] = lambda _t, _m: None,
        tenant_max: int = 16_384,
        total_max: int = 2_000_000,
        recheck_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        writer_grace_s: float = 0.0,
        sole_writer: bool = False,
        device: torch.device | None = None,
    ) -> None:
        """``writer_grace_s``: a worker sharing ``store`` hands the cache its rows
        (:meth:`upserted`); a dirty id younger than this is left for it (0: no such worker).
        ``sole_writer``: that worker writes every row the collection gets (Milvus Lite in this
        process: others reach it only through its endpoint, and only rankers, which do not write,
        do), so after a complete preload its rows start the blocks of tenants not held.
        ``purged_writes``: a purged memory's writes until its purge
        (:meth:`ranker.view.StateView.purged_writes`), None for one not purged.
        ``device``: where searches compute (:func:`search_device`; None: numpy on the CPU); each
        held tenant's vectors have a copy there (``dim × 4`` bytes a row, with the blocks'
        growth slack).
        """
        self.store = store
        self.device = device
        self.writer_grace_s = writer_grace_s
        self.sole_writer = sole_writer
        self._complete = False  # a preload read every row of the collection
        self._partial: set[str] = set()  # tenants that may have rows the cache never met
        # (tenant, id) -> write count of rows the local worker wrote while a pass ran, for
        # tenants not held: no hand-over comes for them (:meth:`upserted`), so they are read
        # back at once, at the pass's end and, those the view has not told of yet, when it does
        # (its change would stamp a grace anew): :meth:`_owed_nothing`
        self._skipped: dict[tuple[str, str], int] = {}
        self._unowed: dict[tuple[str, str], int] = {}
        self.live_of = live_of
        self.ids_of = ids_of
        self.purged_writes = purged_writes
        self.tenant_max = tenant_max
        self.total_max = total_max
        self.recheck_s = recheck_s
        self.clock = clock
        self._blocks: OrderedDict[str, _Block] = OrderedDict()
        self._loading: dict[str, threading.Lock] = {}
        self._cold: dict[str, float] = {}  # tenant -> when it was found too large
        self._guard = threading.Lock()
        self._preloading = False
        self._stop_preload = threading.Event()
        self.preload_ended = threading.Event()
        """Set once a :meth:`preload` has returned or raised (``GET /readyz`` waits for it: until
        then recalls search Milvus)."""
        self.loads = 0

    @property
    def rows(self) -> int:
        """Rows held over all tenants."""
        return sum(b.held for b in list(self._blocks.values()))

    def held(self) -> tuple[int, int]:
        """(rows, tenants) held."""
        return self.rows, len(self._blocks)

    def forget(self) -> None:
        """Drop every block and what a fill or a preload established (the cache is no longer
        complete): the next :meth:`preload` reads the collection. For start-up, before searches.
        """
        with self._guard:
            self._blocks.clear()
            self._complete = False
            self._partial.clear()
            self._cold.clear()
            self._skipped.clear()
            self._unowed.clear()

    # -- changes (event loop) -------------------------------------------------------------------

    def on_change(self, tenant_id: str, memory_id: str, values: Sequence[Any] | None) -> None:
        """A memory's new live values (:func:`storage.rows.live_values`), or None when its state
        was deleted. Tenants not loaded are ignored (they load fresh).
        """
        block = self._blocks.get(tenant_id)
        loading = self._loading.get(tenant_id)
        if block is None and loading is None:
            return
        whole = block is not None and self._whole(tenant_id)
        if block is None:  # a load in flight: re-read the id once it is in
            block = self._pending(tenant_id, while_loading=True)
            if block is None:  # the load ended meanwhile (done, failed, or the tenant cold)
                return
        self._told(block, memory_id, values, whole=whole)
        owed = self._unowed.get((tenant_id, memory_id))
        if owed is not None and (values is None or int(values[_WRITES]) >= owed):
            self._unowed.pop((tenant_id, memory_id), None)  # told of a row written in a pass
            with block.lock:
                if memory_id in block.dirty:
                    block.dirty[memory_id] = self.clock() - self.writer_grace_s
        if len(block.dirty) > self.tenant_max:
            # a bulk load into a held tenant: more changed ids than the block may hold, each
            # to be read back with its vector at the next search (all at once, before the
            # block's bound): Milvus answers the tenant instead, counted again later
            with self._guard:
                if self._blocks.get(tenant_id) is block and tenant_id not in self._loading:
                    self._go_cold(tenant_id)

    def _told(
        self, block: _Block, memory_id: str, values: Sequence[Any] | None, *, whole: bool
    ) -> None:
        """:meth:`on_change` for a block of the tenant (``whole``: it holds every row)."""
        with block.lock:
            if values is None:  # the worker deletes the row too; re-read in case it did not
                if whole and memory_id not in block.index and memory_id not in block.dirty:
                    return  # purged long since (the view's replay meets every one): no row
                block.remove(memory_id)
                block.gone.pop(memory_id, None)
                self._mark(block, memory_id, (-1, ""))
                return
            slot = block.index.get(memory_id)
            was = ABSENT if slot is None else int(block.state[slot])
            deleted = str(values[_STATE]) == DELETED
            if deleted and was == ABSENT and whole:
                return  # purged or erased: no row to read back (the view's replay meets many)
            if not deleted:
                block.gone.pop(memory_id, None)
            elif was == _DELETED:
                # purged, likely (or an event the reducer ignored: a repeated delete, an access):
                # looked for a few times, not at every search, until its row leaves Milvus
                self._gone(block, memory_id)
            # a memory deleted now is read back too: when Milvus no longer has its row (purged
            # or erased with it), its slot is emptied
            if block.live(memory_id, values) or (deleted and was not in (ABSENT, _DELETED)):
                self._mark(block, memory_id, (int(values[_WRITES]), str(values[_STATE])))

    def _gone(self, block: _Block, memory_id: str) -> None:
        """Look for a deleted memory's row on the late cadence (block lock held): when Milvus no
        longer has it (purged, erased), its slot is emptied (:meth:`_late`).
        """
        if memory_id not in block.gone:
            now = self.clock()
            block.gone[memory_id] = now
            block.late[memory_id] = now + GONE_CHECK_S

    def _mark(self, block: _Block, memory_id: str, told: tuple[int, str]) -> None:
        """Mark a memory dirty for what the view ``told`` of it (its write count and state;
        block lock held), stamped with the time of the latest change that told something new:
        the give-up (:data:`DIRTY_GIVE_UP_S`) counts from it, not from an older change whose row
        may have come long since, unread. An access (the same version and state) keeps the
        stamp, so the writer's grace and the give-up still run out while it is accessed.
        """
        if memory_id not in block.dirty or block.marked.get(memory_id) != told:
            block.dirty[memory_id] = self.clock()
        block.marked[memory_id] = told

    def await_rows(self, memories: Iterable[tuple[str, str]]) -> int:
        """(tenant, memory id) of memories whose rows the cache may lack or hold older than
        Milvus's (a fill from a read that missed their newest document): each is re-read from
        Milvus at its tenant's next search, as a change would be. Tenants not held are left
        alone (they load fresh). Returns how many were marked.
        """
        due = self.clock() - self.writer_grace_s  # due now: no writer in this process owes them
        marked = 0
        for tenant_id, memory_id in memories:
            block = self._blocks.get(tenant_id)
            if block is not None:
                with block.lock:
                    block.dirty.setdefault(memory_id, due)
                marked += 1
        return marked

    @staticmethod
    def evaluates(filters: Filters) -> bool:
        """The cache can apply ``filters`` (not ``tags_any``, ``memory_ids``, ``summary_of_any``,
        ``derived_from_any``).
        """
        return not (
            filters.tags_any
            or filters.memory_ids
            or filters.summary_of_any
            or filters.derived_from_any
        )

    def ready(self, tenant_id: str, filters: Filters) -> bool:
        """True when a search of this tenant under ``filters`` would read nothing from Milvus
        (loaded, nothing dirty): the caller may run it on the event loop, not in a thread.
        """
        block = self._blocks.get(tenant_id)
        return (
            self.evaluates(filters)
            and block is not None
            and not self._due(block)
            and not self._preloading
            and tenant_id not in self._loading
        )

    # -- search (worker threads; the event loop when ready) ----------------------------------------

    def tenant_rows(self, tenant_id: str) -> list[MemoryRow] | None:
        """Every row Milvus holds for a tenant the cache holds (any state: what
        :meth:`storage.MilvusStore.query` answers under ``ANY_STATE``), or None when the cache
        cannot answer exactly: the tenant is not held (it is not loaded for this: the caller
        reads Milvus, as a load would) and not known to have no rows, a preload or a load is
        under way, or a row is still awaited from Milvus. Blocking: dirty ids past the writer's
        grace are re-read first; may raise ``StorageError`` then. A row's vector is the block's
        L2-normalised float32 copy, so cosines equal those of Milvus's rows up to float32
        rounding (consolidation compares cosines only); its counters are Milvus's, which the
        caller overlays as it would Milvus's.
        """
        with self._guard:
            if self._preloading or tenant_id in self._loading:
                return None
            block = self._blocks.get(tenant_id)
            if block is None:
                return [] if self._known_empty(tenant_id) else None
        self._refresh(tenant_id, block)
        with block.lock:  # copied in C under the lock; the rows are built after (on_change,
            if block.dirty:  # on the event loop, waits for this lock)
                return None
            rows, vectors = block.rows[: block.n], block.vectors[: block.n].copy()
        return [
            dataclasses.replace(row, vector=tuple(vectors[slot].tolist()))
            for slot, row in enumerate(rows)
            if row is not None
        ]

    def search(
        self,
        tenant_id: str,
        vector: Sequence[float],
        n: int,
        filters: Filters,
        *,
        io: bool = True,
    ) -> HotHits | None:
        """The ``n`` nearest rows of one tenant that pass ``filters``, best first, or None when
        the cache cannot answer exactly (the caller searches Milvus). Blocking: Milvus is read
        when the tenant is not loaded yet or has dirty rows; may raise ``StorageError`` then.
        With ``io`` False nothing is read: None also when the tenant is not held or a read is
        owed (the event loop's search after :meth:`ready`: the tenant may have been evicted, or
        an id marked, since; the caller then searches in a thread).
        """
        found = self.search_many(tenant_id, [vector], n, filters, io=io)
        return None if found is None else found[0]

    def search_many(
        self,
        tenant_id: str,
        vectors: Sequence[Sequence[float]],
        n: int,
        filters: Filters,
        *,
        io: bool = True,
    ) -> list[HotHits] | None:
        """:meth:`search` for several query vectors of one tenant (one answer each, in order) by
        one matrix product over the tenant's rows: with numpy on the CPU, or on :attr:`device`
        (the block's vectors copied there once and kept up to date; the product and the top
        ``n`` computed there, the columns of the ``n`` gathered on the CPU). Exact in float32
        either way. Blocking and failing as :meth:`search` (``io`` as there).
        """
        if not self.evaluates(filters):
            return None
        if not io:
            block = self._resident(tenant_id)
            if block is None or self._due(block):
                return None
        else:
            block = self._block(tenant_id)
            if block is None:
                return None
            self._refresh(tenant_id, block)
        if not vectors:
            return []
        queries = _unit_rows(np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1))
        with block.lock:
            keep = block.mask(filters)
            if self.device is None:
                tops = _tops(block.vectors[: block.n] @ queries.T, keep, n)
            else:
                tops = _device_tops(block.on_device(self.device)[: block.n], queries, keep, n)
            return [block.hits(top, similarity) for top, similarity in tops]

    def neighbours(
        self, tenant_id: str, vectors: Sequence[Sequence[float]], n: int, filters: Filters
    ) -> list[list[Hit]] | None:
        """:meth:`storage.MilvusStore.search`'s answer for one tenant from the cache, or None
        when it cannot answer exactly (``streams.app.Services.neighbours``: the worker sharing
        the store looks here for what a write may supersede, which on Milvus Lite is otherwise
        a pass over the whole collection per batch). Rows hold their vectors, as Milvus's do
        (the worker rescores a fact stem's hits by them). Blocking as :meth:`search`.
        """
        found = self.search_many(tenant_id, vectors, n, filters)
        if found is None:
            return None
        return [
            [
                Hit(dataclasses.replace(row, vector=tuple(vector)), s)
                for row, s, vector in zip(
                    hits.rows, hits.similarity.tolist(), hits.vectors.tolist(), strict=True
                )
            ]
            for hits in found
        ]

    def preload(self, tenant_ids: Sequence[str] = ()) -> tuple[int, int]:
        """Load every tenant in one pass over the collection (:meth:`MilvusStore.scan`): on
        Milvus Lite one pass costs what one tenant's query does, so this beats loading tenants
        one by one at their first search. Tenants over ``tenant_max`` are left to Milvus; once
        ``total_max`` rows are held no new tenant is taken. Searches meanwhile go to Milvus. A
        change during the pass is caught either way: a tenant already met takes it as any
        change (:meth:`on_change`); a row met later is laid under the state view's values, and
        marked dirty when the view knows a newer version than Milvus gave. A Milvus
        that cannot scan (a 2.3 server has no query iterator) loads ``tenant_ids`` one by one
        instead. A cache already complete (:meth:`fill`) reads nothing. Blocking; returns
        (rows, tenants) held; raises ``StorageError`` when Milvus fails. Sets
        :attr:`preload_ended` as it returns or raises.
        """
        try:
            if self._complete:  # filled (:meth:`fill`): nothing to read back
                return self.held()
            try:
                self._scan_all()
            except StorageError:
                if self.rows or not tenant_ids:
                    raise
                log.info("hot cache: this Milvus cannot scan; loading tenants one by one")
                for tenant_id in tenant_ids:
                    if self._stop_preload.is_set():
                        raise PreloadStoppedError from None
                    self._block(tenant_id)
            return self.held()
        finally:
            self.preload_ended.set()

    def stop_preload(self) -> None:
        """Make a :meth:`preload` running in another thread end at its next page of rows, with
        :class:`PreloadStoppedError` (the process is stopping: an in-process Milvus Lite server ends
        with it, and a thread still waiting for its answer would hold the exit). A preload
        started later stops at its first page.
        """
        self._stop_preload.set()

    @property
    def stopping(self) -> bool:
        """:meth:`stop_preload` was called."""
        return self._stop_preload.is_set()

    def _scan_all(self) -> None:
        with contextlib.closing(self.store.scan()) as pages:  # closed at once when stopped
            self.fill(pages)
        self.loads += len(self._blocks)

    def fill(
        self, pages: Iterable[Sequence[MemoryRow]], then: Callable[[], object] | None = None
    ) -> tuple[int, int]:
        """Lay ``pages`` into the blocks as the preload's pass lays Milvus's rows (same limits;
        a change meanwhile is caught the same way), then hold the cache complete: a later
        :meth:`preload` reads nothing, and with ``sole_writer`` a tenant not held is known to
        have had no rows. The caller vouches that ``pages`` are every row the collection holds
        (``python -m server``: the rows its start-up resync read from the changelogs, before its
        worker writes any; it calls :meth:`forget` when Milvus holds another number of rows), or,
        without ``sole_writer``, every row but those it marks (:meth:`await_rows`) in ``then``,
        which runs after the last page, before the cache is complete, while searches still go
        to Milvus (a ``python -m ranker`` while the worker writes, :mod:`ranker.warmup`).
        Blocking; returns (rows, tenants) held; raises :class:`PreloadStoppedError` after
        :meth:`stop_preload`, leaving the cache as it was.
        """
        with self._guard:
            self._preloading = True
        made: set[str] = set()  # tenants whose block this pass starts
        try:
            too_big: set[str] = set()
            total = self.rows
            for page in pages:
                total = self._lay(page, total, made, too_big)
                if self._stop_preload.is_set():  # before asking for the next page
                    raise PreloadStoppedError
            now = self.clock()
            for tenant_id in made:
                block = self._blocks.get(tenant_id)
                if block is not None:
                    with block.lock:
                        self._await_unmet(tenant_id, block, now)
            if then is not None:
                then()
            with self._guard:
                self._complete = True
        except BaseException:
            with self._guard:  # a block the pass did not finish must not pass for its tenant
                for tenant_id in made:
                    self._blocks.pop(tenant_id, None)
            raise
        finally:
            with self._guard:  # no hand-over is skipped past here: the blocks are laid
                self._preloading = False
                skipped, self._skipped = self._skipped, {}
        self._owed_nothing(skipped)
        return self.held()

    def _owed_nothing(self, skipped: Mapping[tuple[str, str], int]) -> None:
        """Rows the local worker wrote during a pass (with their write counts) for tenants not
        held then: the pass may have read them or not, and no hand-over comes. Those the blocks
        lack are due at once; those the view has not told of yet are due at once when it does.
        """
        due = self.clock() - self.writer_grace_s
        for (tenant_id, memory_id), writes in skipped.items():
            block = self._blocks.get(tenant_id)
            if block is None:
                continue
            # recorded before the view is read: news between the two finds the record
            self._unowed[(tenant_id, memory_id)] = writes
            values = self.live_of(tenant_id, memory_id)
            told = values is not None and int(values[_WRITES]) >= writes
            if told:
                self._unowed.pop((tenant_id, memory_id), None)
            with block.lock:
                if told and values is not None:  # its news, not told the cache yet, is not new
                    block.marked[memory_id] = (int(values[_WRITES]), str(values[_STATE]))
                slot = block.index.get(memory_id)
                if slot is None or int(block.writes[slot]) < writes:
                    block.dirty[memory_id] = min(block.dirty.get(memory_id, due), due)

    def _lay(self, page: Sequence[MemoryRow], total: int, made: set[str], too_big: set[str]) -> int:
        """Lay one preload page into the blocks; returns the rows held after it. Adds to ``made``
        the tenants whose blocks it starts and to ``too_big`` those it drops over ``tenant_max``.
        """
        for row in page:
            tenant_id = row.tenant_id
            if tenant_id in too_big:
                continue
            block = self._blocks.get(tenant_id)
            if block is None:
                if total >= self.total_max:
                    with self._guard:
                        self._partial.add(tenant_id)
                    continue
                block = self._pending(tenant_id)
                made.add(tenant_id)
            with block.lock:
                held = block.held  # a purged memory's lingering row is left out: not counted
                laid = self._put(tenant_id, block, row)
                total += block.held - held
                if laid:
                    if self.live_of(tenant_id, row.memory_id) is not None:
                        # as new as the view knows: a change it told meanwhile is met (a
                        # memory it dropped stays marked, to be read back and removed)
                        block.dirty.pop(row.memory_id, None)
                else:
                    block.dirty.setdefault(row.memory_id, self.clock())
            if block.held > self.tenant_max:
                too_big.add(tenant_id)
                with self._guard:
                    total -= self._go_cold(tenant_id)
        return total

    def _block(self, tenant_id: str) -> _Block | None:
        while True:
            with self._guard:
                if self._preloading:
                    return None
                block = self._blocks.get(tenant_id)
                if block is not None and self._loading.get(tenant_id) is None:
                    self._blocks.move_to_end(tenant_id)
                    return block
                cold = self._cold.get(tenant_id)
                if cold is not None and self.clock() - cold < self.recheck_s:
                    return None
                gate = self._loading.setdefault(tenant_id, threading.Lock())
            with gate:  # one load per tenant; the others wait for it
                with self._guard:
                    if self._loading.get(tenant_id) is not gate:
                        # the load waited on ended: its block is held, or it failed and its
                        # gate is gone (loading unregistered, a block this load filled would
                        # be searched as the whole tenant while still empty): look again
                        continue
                try:
                    return self._load(tenant_id)
                finally:
                    with self._guard:
                        self._loading.pop(tenant_id, None)

    def _resident(self, tenant_id: str) -> _Block | None:
        """The tenant's block when it is held and no load or preload is under way (no load is
        begun here: None then), as the most recently searched.
        """
        with self._guard:
            block = self._blocks.get(tenant_id)
            if self._preloading or block is None or tenant_id in self._loading:
                return None
            self._blocks.move_to_end(tenant_id)
            return block

    @overload
    def _pending(self, tenant_id: str) -> _Block: ...

    @overload
    def _pending(self, tenant_id: str, *, while_loading: Literal[True]) -> _Block | None: ...

    def _pending(self, tenant_id: str, *, while_loading: bool = False) -> _Block | None:
        """The block a load in flight fills (created empty here so changes can mark it dirty).
        ``while_loading``: create it only while the tenant's load is under way (checked in the
        same step), else None: a block made after the load ended (the tenant found too large, a
        failed read) would be taken for the whole tenant by the next search, holding nothing but
        the ids changed since.
        """
        with self._guard:
            block = self._blocks.get(tenant_id)
            if block is None:
                if while_loading and tenant_id not in self._loading:
                    return None
                block = _Block(self.store.config.dim)
                self._blocks[tenant_id] = block
            return block

    def _load(self, tenant_id: str) -> _Block | None:
        """Count and read one tenant into a block (its load gate held). Whatever fails (a count,
        the read, laying a row), the block the load began (:meth:`_pending`, or on_change's for
        a change told meanwhile) leaves: an almost empty block must not pass for the tenant.
        """
        block: _Block | None = None
        try:
            count = self.store.count(tenant_id, ANY_STATE)
            if count > self.tenant_max:
                with self._guard:
                    self._go_cold(tenant_id)
                return None
            block = self._pending(tenant_id)
            rows = self.store.query(tenant_id, ANY_STATE, limit=self.tenant_max)
            if len(rows) >= self.tenant_max and self._grown(tenant_id):
                return None
            now = self.clock()
            for start in range(0, len(rows), LAY_CHUNK):
                # the lock is released between chunks: on_change, on the event loop, takes it
                # for a change to this tenant (laid whole, 16,384 rows held every request
                # ~1.3 s); searches skip a tenant while it loads
                with block.lock:
                    for row in rows[start : start + LAY_CHUNK]:
                        if not self._put(tenant_id, block, row):
                            block.dirty.setdefault(row.memory_id, now)
            with block.lock:
                self._await_unmet(tenant_id, block, now)
        except BaseException:
            with self._guard:  # this load's block, or (its count failed) one a change began
                begun = self._blocks.get(tenant_id)
                if begun is not None and (block is None or begun is block):
                    del self._blocks[tenant_id]
                self._partial.add(tenant_id)  # rows written meanwhile went with the block
            raise
        self.loads += 1
        with self._guard:
            self._cold.pop(tenant_id, None)
            self._evict(keep={tenant_id})
        return block

    def _grown(self, tenant_id: str) -> bool:
        """A load's read came back at the limit (Milvus reads at most 16,384 rows, the most
        ``tenant_max`` may be): when the tenant has grown past it since it was counted, the
        block would be cut there and hide the rows left out, so Milvus answers it (True).
        """
        if self.store.count(tenant_id, ANY_STATE) <= self.tenant_max:
            return False
        with self._guard:
            self._go_cold(tenant_id)
        return True

    def _await_unmet(self, tenant_id: str, block: _Block, now: float) -> None:
        """Mark dirty the memories the view holds live that a load or a pass laid no row of
        (block lock held): the view may have told of one before the tenant was held, its row not
        yet in Milvus when it was read (the worker writes its table first), and on_change
        ignored it then.
        """
        for memory_id in list(self.ids_of(tenant_id)):
            if not block.holds(memory_id) and self._awaited(tenant_id, memory_id):
                block.dirty.setdefault(memory_id, now)

    def _refresh(self, tenant_id: str, block: _Block) -> None:
        """Re-read the block's dirty ids from Milvus (rows there now replace the block's; ids
        Milvus no longer has are removed once the state view has dropped them too, at once when
        it holds them deleted: purged or erased). An id given up with a row found while the view
        holds a newer version is looked for again every :data:`LATE_RETRY_S`, as one with no row.
        """
        with block.lock:
            wanted = self._due(block)
            late = [memory_id for memory_id, since in wanted.items() if since == _LATE]
            if late:  # looked for again in LATE_RETRY_S, whatever this read gives
                retry_at = self.clock() + LATE_RETRY_S
                block.late.update(dict.fromkeys(late, retry_at))
        if not wanted:
            return
        found = self.store.get(tenant_id, list(wanted))
        now = self.clock()
        with block.lock:
            for memory_id, since in wanted.items():
                row = found.get(memory_id)
                if since == _LATE:
                    self._late(tenant_id, block, memory_id, row, now)
                    continue
                if block.dirty.get(memory_id) == since:  # else changed again: read next time
                    self._reread(tenant_id, block, memory_id, row, now - since)
        if found:
            with self._guard:
                if not self._preloading:  # as in upserted
                    self._bound({tenant_id}, keep={tenant_id})

    def _reread(
        self, tenant_id: str, block: _Block, memory_id: str, row: MemoryRow | None, age: float
    ) -> None:
        """A dirty id read back (``row``: what Milvus has; ``age``: seconds since it was marked;
        block lock held): taken, emptied when purged or erased, else re-read at the next search
        until :data:`DIRTY_GIVE_UP_S`.
        """
        if row is None and self._dropped(tenant_id, memory_id):
            block.remove(memory_id)  # purged or erased: its words leave the block
            block.clean(memory_id)
        elif row is not None and self._taken(tenant_id, block, row):
            block.clean(memory_id)
        elif age > DIRTY_GIVE_UP_S:
            if row is None:
                block.remove(memory_id)
            block.clean(memory_id)
            if self._awaited(tenant_id, memory_id):
                # no row yet, or one older than the version the view knows (a rewrite's upsert
                # still to come): looked for again, never given up for good
                block.late[memory_id] = self.clock() + LATE_RETRY_S
            elif row is not None and self._dropped(tenant_id, memory_id):
                self._gone(block, memory_id)  # a purge whose delete is still to come

    def _late(
        self, tenant_id: str, block: _Block, memory_id: str, row: MemoryRow | None, now: float
    ) -> None:
        """A late id looked for again (block lock held): taken when its row is in (or a change
        made it dirty again), dropped when the view no longer holds it live, else due again in
        :data:`LATE_RETRY_S`. A gone one (:attr:`_Block.gone`) is emptied once Milvus has no
        row of it, and no longer looked for when the view holds it live again or after
        :data:`GONE_GIVE_UP_S`.
        """
        since = block.gone.get(memory_id)
        if since is not None:
            if row is not None:
                self._put(tenant_id, block, row)
            if memory_id in block.dirty:
                block.late.pop(memory_id, None)  # a change since: the dirty re-read decides
            elif row is None and self._dropped(tenant_id, memory_id):
                block.remove(memory_id)  # purged or erased: its words leave the block
                block.clean(memory_id)
            elif not self._dropped(tenant_id, memory_id) or now - since > GONE_GIVE_UP_S:
                block.late.pop(memory_id, None)
                block.gone.pop(memory_id, None)
            else:
                block.late[memory_id] = now + LATE_RETRY_S
            return
        if (
            memory_id in block.dirty
            or (row is not None and self._put(tenant_id, block, row))
            or (row is None and not self._awaited(tenant_id, memory_id))
        ):
            block.late.pop(memory_id, None)
        else:
            block.late[memory_id] = now + LATE_RETRY_S

    def _taken(
        self, tenant_id: str, block: _Block, row: MemoryRow, *, written: bool = False
    ) -> bool:
        """Put ``row`` (:meth:`_put`; block lock held); True when nothing more is awaited of its
        memory: the row is as new as the view's version and, for a memory the view holds
        deleted, Milvus holds it deleted too and no purge of it is pending (:attr:`_Block.gone`).
        """
        if not self._put(tenant_id, block, row, written=written):
            return False
        if self.live_of(tenant_id, row.memory_id) is PURGED:
            return True  # left out by _put, or (written) laid: the view tells the rewrite next
        if not self._dropped(tenant_id, row.memory_id):
            return True
        return row.state == DELETED and row.memory_id not in block.gone

    def _dropped(self, tenant_id: str, memory_id: str) -> bool:
        """The state view holds the memory deleted: Milvus keeps its row only until a purge."""
        values = self.live_of(tenant_id, memory_id)
        return values is not None and str(values[_STATE]) == DELETED

    def _awaited(self, tenant_id: str, memory_id: str) -> bool:
        """The state view holds the memory, not deleted: Milvus is to have a row of it."""
        values = self.live_of(tenant_id, memory_id)
        return values is not None and str(values[_STATE]) != DELETED

    def upserted(self, rows: Sequence[MemoryRow]) -> None:
        """Rows this process just wrote to Milvus (``python -m server``: the worker shares the
        store, :attr:`storage.MilvusStore.upserted`): put into the blocks of tenants already
        held, so that the next search need not re-read them (on Milvus Lite each re-read is a
        query over the whole collection). A row older than the block's version is ignored.
        A tenant not held starts a block with it when it is known to have had no rows
        (:meth:`_started`), else takes it when it loads. Runs in the upserting thread; never
        raises for a row (a failure is logged and the id is re-read at the next search, without
        grace).
        """
        started, grown = set(), set()
        for row in rows:
            with self._guard:
                block = self._blocks.get(row.tenant_id)
                if block is None:
                    block = self._started(row.tenant_id)
                    if block is not None:
                        started.add(row.tenant_id)
                    elif self._preloading:  # in the same hold: the pass cannot end between
                        key = (row.tenant_id, row.memory_id)
                        self._skipped[key] = max(self._skipped.get(key, 0), row.write_count)
            if block is None:
                continue
            grown.add(row.tenant_id)
            try:
                with block.lock:
                    if self._taken(row.tenant_id, block, row, written=True):
                        block.clean(row.memory_id)
                    elif row.tenant_id in started:  # the view knows a newer version: await it
                        block.dirty.setdefault(row.memory_id, self.clock())
            except Exception:
                log.exception("hot cache: could not take the written row %s", row.key)
                with block.lock:
                    block.dirty[row.memory_id] = self.clock() - self.writer_grace_s  # due now
        with self._guard:
            if not self._preloading:  # the pass lays these blocks and bounds them itself
                self._bound(grown, keep=started)

    def upsert_failed(self, rows: Sequence[MemoryRow]) -> None:
        """Rows whose upsert raised (:attr:`storage.MilvusStore.upsert_failed`): Milvus may hold
        them all the same, unseen here, so a tenant of them not held is no longer known empty.
        """
        with self._guard:
            self._partial.update(row.tenant_id for row in rows)

    def _started(self, tenant_id: str) -> _Block | None:
        """A new, empty block for a tenant the sole writer writes a row for, when the tenant is
        known to have had no rows (guard held); None when that is not known: the tenant loads
        from Milvus at its first search. A row written during the preload's pass may or may not
        have been met by it, so its tenant is not known empty.
        """
        if not self.sole_writer:
            return None
        if self._preloading:
            self._partial.add(tenant_id)
            return None
        if not self._known_empty(tenant_id):
            return None
        block = self._blocks[tenant_id] = _Block(self.store.config.dim)
        return block

    def _whole(self, tenant_id: str) -> bool:
        """The cache met every row Milvus has for a tenant it holds: a complete fill or preload
        by the sole writer's process, the tenant not written during the pass (guard not needed:
        a stale answer only costs a read back).
        """
        return self.sole_writer and self._complete and tenant_id not in self._partial

    def _known_empty(self, tenant_id: str) -> bool:
        """A tenant not held had no rows: the sole writer's rows start its block (see
        :meth:`_started`; guard held, not preloading).
        """
        return self._whole(tenant_id) and tenant_id not in self._cold

    def _due(self, block: _Block) -> dict[str, float]:
        """The dirty ids a search re-reads now (all, or those past ``writer_grace_s``; each
        with when it was marked) and the late ids due again (with :data:`_LATE`).
        """
        if not block.dirty and not block.late:  # the usual case: two calls per search
            return {}
        due = dict(block.dirty)  # one C-level copy under the GIL: no lock against a writer
        if self.writer_grace_s and due:
            cutoff = self.clock() - self.writer_grace_s
            due = {memory_id: since for memory_id, since in due.items() if since <= cutoff}
        if block.late:
            now = self.clock()
            for memory_id, retry_at in dict(block.late).items():
                if retry_at <= now:
                    due.setdefault(memory_id, _LATE)
        return due

    def _put(self, tenant_id: str, block: _Block, row: MemoryRow, *, written: bool = False) -> bool:
        """Put ``row`` with the state view's live values over it (block lock held); False when
        the view knows a newer version than Milvus gave (the row is kept until that arrives). A
        row older than the one held (a load's read racing the worker's write) is left out, as is
        a purged memory's read from Milvus (the view answers :data:`storage.codec.PURGED`; True):
        its row outlives the purge until the worker deletes it. ``written``: the local worker's
        own row, just written (:meth:`upserted`): one of a memory written again after its purge
        (more writes than it had then) is laid though the view still answers the purge (it tells
        the rewrite next); one from before the purge (an upsert retried past it) is left out.
        """
        values = self.live_of(tenant_id, row.memory_id)
        if values is PURGED:
            before = self.purged_writes(tenant_id, row.memory_id)
            if written and before is None:  # the view may have read the rewrite meanwhile
                values = self.live_of(tenant_id, row.memory_id)
        if values is PURGED:
            if not written or before is None or row.write_count <= before:
                block.remove(row.memory_id)
                return True
            values = None
        if block.newer(row):  # what the view says is still applied by the row held
            return values is None or not block.live(row.memory_id, values)
        block.put(row)
        return values is None or not block.live(row.memory_id, values)

    def _bound(self, grown: Iterable[str], keep: Collection[str]) -> None:
        """After rows were added to the blocks of ``grown`` tenants (a load has its own checks):
        drop those now over ``tenant_max`` (Milvus answers them, counted again after
        ``recheck_s``), then the least recently searched others while over ``total_max``
        (guard held).
        """
        for tenant_id in grown:
            if tenant_id in self._loading:
                continue  # the load's own count decides
            block = self._blocks.get(tenant_id)
            if block is not None and block.held > self.tenant_max:
                self._go_cold(tenant_id)
        self._evict(keep=keep)

    def _go_cold(self, tenant_id: str) -> int:
        """The tenant is over ``tenant_max``: Milvus answers it, counted again after
        ``recheck_s``; returns the rows its block held (guard held).
        """
        self._cold[tenant_id] = self.clock()
        block = self._blocks.pop(tenant_id, None)
        return block.held if block is not None else 0

    def _evict(self, keep: Collection[str]) -> None:
        """Drop least recently searched tenants but ``keep`` while over ``total_max`` rows
        (guard held).
        """
        total = sum(b.held for b in self._blocks.values())
        for tenant_id in list(self._blocks):
            if total <= self.total_max:
                break
            if tenant_id not in keep and tenant_id not in self._loading:
                total -= self._blocks.pop(tenant_id).held
                self._partial.add(tenant_id)  # its rows stay in Milvus only
