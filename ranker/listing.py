"""Listing a tenant's memories in pages, in memory-id order, with an opaque cursor.

The ids come from the state view (every memory the worker's table holds); the rows and the
filters are Milvus's, asked for a chunk of ids at a time. A memory whose row Milvus does not hold
yet when its page is read (the worker writes its table first) is not in that listing: a read with
``after`` (the write's token) waits for the row. A page's position is the last id of the
previous page: pages stay consistent while memories are written (a new memory appears on a later
page when its id sorts after the cursor, never twice). The public cursor (:func:`listing_cursor`)
adds the time the listing is current at, fixed by its first page (a version superseded while the
later pages are read is still listed), and which listing it belongs to (another tenant's or other
filters' cursor is refused).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memcore import InvalidField
from memcore.ids import check_id
from storage import Filters, MemoryRow, MilvusStore

CHUNK = 500
"""Ids asked of Milvus in one query."""
SCAN_MAX = 10_000
"""Ids one page looks at, at most (so at most 20 Milvus queries): past them the page ends with the
rows found so far, fewer than asked or none, and a cursor to go on from. Without the bound a page
of a rare filter, or of a tenant holding many purged memories, asked Milvus of every id."""


@dataclass(frozen=True)
class Page:
    """One page: its rows in id order, and the cursor of the next page (None: the last page)."""

    rows: list[MemoryRow]
    cursor: str | None


def encode_cursor(memory_id: str) -> str:
    """The cursor of the page after ``memory_id`` (base64url, no padding)."""
    return base64.urlsafe_b64encode(memory_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The memory id a cursor stands for; InvalidField (``cursor``) for one we did not issue."""
    text = _text(cursor)
    try:
        return check_id("cursor", text)
    except ValueError as exc:
        raise InvalidField("cursor", cursor, "not a cursor this service gave") from exc


LISTING_CURSOR = "2/"
"""The prefix of a listing's cursor text (an id holds no ``/``: an older cursor is an id alone)."""


def listing_of(tenant_id: str, filters: Filters) -> str:
    """What a listing's cursor is bound to: its tenant and the filters a listing takes (states,
    tiers and tags in any order; the scopes; whether superseded versions are in), hashed. Named
    one by one, so that a field added to :class:`storage.Filters` changes no cursor in flight.
    """
    bound = (
        "listing/1",
        tenant_id,
        sorted(filters.states),
        sorted(filters.tiers),
        sorted(filters.tags_any),
        filters.agent_id,
        filters.session_id,
        filters.user_id,
        filters.current_at_us is None,
    )
    return hashlib.sha256(repr(bound).encode()).hexdigest()[:16]


def listing_cursor(position: str, as_of_us: int, listing: str) -> str:
    """The cursor of the page after ``position`` (:func:`page`'s cursor) of the listing
    ``listing`` (:func:`listing_of`), current at ``as_of_us`` (µs, its first page's time).
    """
    text = f"{LISTING_CURSOR}{listing}/{as_of_us}/{decode_cursor(position)}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def read_listing_cursor(cursor: str, listing: str) -> tuple[str, int | None]:
    """The memory id a listing's cursor continues after and the time its listing is current at
    (µs; None for a cursor given before cursors carried it: now). InvalidField (``cursor``) for
    one we did not give, or gave another listing (another tenant, other filters).
    """
    text = _text(cursor)
    if not text.startswith(LISTING_CURSOR):
        return decode_cursor(cursor), None  # an older cursor: an id alone
    made_for, _, rest = text[len(LISTING_CURSOR) :].partition("/")
    as_of, _, memory_id = rest.partition("/")
    if made_for != listing:
        raise InvalidField("cursor", cursor, "given for another listing (other filters or tenant)")
    # as this service writes it: digits alone (int() also took " 12 ", "1_000", "-5")
    if not (as_of.isascii() and as_of.isdigit() and int(as_of) <= _MAX_US):
        raise InvalidField("cursor", cursor, "not a cursor this service gave")
    return check_id("cursor", memory_id), int(as_of)


_MAX_US = 2**63 - 1
"""The latest time a cursor's listing is current at (µs; Milvus's int64)."""


def _text(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidField("cursor", cursor, "not a cursor this service gave") from exc


def page(
    store: MilvusStore,
    tenant_id: str,
    ids: Sequence[str],
    filters: Filters,
    after_id: str | None,
    limit: int,
    keep: Callable[[MemoryRow], bool] | None = None,
    candidate: Callable[[str], bool] | None = None,
) -> Page:
    """Up to ``limit`` rows of ``tenant_id`` among ``ids`` (sorted, distinct) after ``after_id``,
    matching ``filters`` and, when given, ``keep``; ``candidate`` rules ids out before Milvus is
    asked. At most :data:`SCAN_MAX` ids are looked at: a page may then hold fewer rows than
    ``limit`` (none, too) and still have a cursor; only the last page has none. Blocking: run it
    in a thread. Raises StorageError when Milvus fails.
    """
    at = bisect.bisect_right(ids, after_id) if after_id is not None else 0
    stop = min(len(ids), at + SCAN_MAX)
    out: list[MemoryRow] = []
    while at < stop:
        part: list[str] = []
        while at < stop and len(part) < CHUNK:
            if candidate is None or candidate(ids[at]):
                part.append(ids[at])
            at += 1
        if not part:
            continue
        wanted = dataclasses.replace(filters, memory_ids=tuple(part))
        found = {r.memory_id: r for r in store.query(tenant_id, wanted, limit=len(part))}
        for memory_id in part:
            row = found.get(memory_id)
            if row is None or (keep is not None and not keep(row)):
                continue
            out.append(row)
            if len(out) == limit:
                last = memory_id != ids[-1]
                return Page(out, encode_cursor(memory_id) if last else None)
    return Page(out, encode_cursor(ids[stop - 1]) if stop < len(ids) else None)
