"""Consolidation at the edge: read a tenant's memories from the serving store, let memcore plan,
and turn each decision into records for the state agent (``memory-writes``) and a report (``audit``).

Nothing here changes state or Milvus: the writes agent applies the decision records through the
reducer like any other event, so replaying the topics reproduces every consolidation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from memcore import (
    MAX_TAGS,
    Decision,
    DecisionKind,
    Item,
    Lifecycle,
    Policy,
    Tier,
    plan,
    to_events,
)
from memcore.consolidation import Neighbours, claims_of, fold, summarise
from memcore.ids import content_hash
from memcore.keyword import keyword_text
from memcore.state import Access, Event, Write, absorbed_relations
from memcore.supersession import SupersessionPolicy, states_fact
from storage import MemoryRow, from_us
from storage.records import ConsolidationRequest, decision_value
from storage.rows import CURRENT
from storage.similarity import cosine_neighbours
from streams.processor import Outbound


def item_of(row: MemoryRow, rules: SupersessionPolicy | None = None) -> Item:
    """What consolidation needs of a stored row; ``rules``: the tenant's supersession rules, which
    say whether its content states a fact they read (None: no fact, for decisions already made).
    """
    return Item(
        memory_id=row.memory_id,
        content_hash=content_hash(row.content),
        vector=tuple(row.vector),
        created_at=from_us(row.created_at_us),
        last_access=from_us(row.last_access_us),
        state_changed_at=from_us(row.state_changed_at_us),
        tier=Tier(row.tier),
        state=Lifecycle(row.state),
        importance=row.importance,
        tau_hours=row.tau_hours,
        access_count=row.access_count,
        recall_count=row.recall_count,
        write_count=row.write_count,
        scope=(row.agent_id or "", row.session_id or "", row.user_id or ""),
        superseded=row.valid_to_us != CURRENT or bool(row.superseded_by),
        superseded_by=row.superseded_by or "",
        merged_into=row.merged_into or "",
        summary_of=tuple(row.summary_of),
        valid_to=from_us(row.valid_to_us) if row.valid_to_us != CURRENT else None,
        tags=tuple(row.tags),
        relations=tuple(row.relations),
        fact=rules is not None and states_fact(row.content, rules),
        claims=claims_of(row.content),
        context_hash=_context_hash(row),
        chars=len(row.content),
    )


def _context_hash(row: MemoryRow) -> str:
    """The hash of a row's context words ("" for none): its ``search_text`` is the context's
    words then the content's (:func:`memcore.ids.indexed_text`); a text cut at the indexing
    limit hashes whole (merged with nothing but its equal).
    """
    own = keyword_text(row.content)
    context = row.search_text.removesuffix(own).strip() if own else row.search_text
    return content_hash(context) if context else ""


def faiss_neighbours(items: Sequence[Item], min_cosine: float) -> Neighbours:
    """Memcore's neighbour finder, computed with a FAISS range search."""
    return cosine_neighbours([i.memory_id for i in items], [i.vector for i in items], min_cosine)


def plan_tenant(
    tenant_id: str, rows: Sequence[MemoryRow], request: ConsolidationRequest, policy: Policy
) -> list[Decision]:
    """The decisions for one tenant's rows under its policy and the request's overrides."""
    if request.overrides:
        policy = policy.with_overrides({"consolidation": dict(request.overrides)})
    items = [item_of(r, policy.supersession) for r in rows]
    return plan(tenant_id, items, request.at, policy, request.strategies, faiss_neighbours)


def decision_records(
    tenant_id: str,
    decisions: Sequence[Decision],
    rows: Sequence[MemoryRow],
    at: datetime,
    request_id: str | None,
    key_of: Callable[[str], str | None] = lambda _: None,
) -> list[Outbound]:
    """``memory-writes`` records carrying out ``decisions``: summaries first, then the events.
    ``key_of``: a live data key id of a memory now (None: it has none), which each summary
    names for each source (``source_keys``: erasing the source erases that key, so the worker
    refuses the summary even if the source is written again under its id before it is applied).
    """
    by_id = {r.memory_id: r for r in rows}
    items = {r.memory_id: item_of(r) for r in rows}
    out = []
    merged: set[str] = set()  # merged away earlier in the plan: a summary links to none of them
    for decision in decisions:
        if decision.kind is DecisionKind.MERGE:
            merged.update(decision.sources)
        if decision.kind is DecisionKind.SUMMARISE:
            summary = _summary(tenant_id, decision, by_id, items, at, request_id, merged, key_of)
            out.append(summary)
        for memory_id, event in to_events(decision, items, at):
            out.append(_decision(tenant_id, memory_id, event, request_id))
        fold(items, decision)
    return out


REPORT_MAX_BYTES = 512 * 1024
"""The most a report's decisions take as JSON: a large tenant's plan (6,000 archive decisions made
1.1 MB) is past what Kafka takes in one record (1 MB by default), and the report was lost. The
decisions past it are counted, not listed; each applied one has its memory's audit record."""


def report(
    tenant_id: str, request: ConsolidationRequest, decisions: Sequence[Decision]
) -> Outbound:
    """The audit record of one tenant's consolidation (the plan, applied unless a dry run): its
    decisions up to :data:`REPORT_MAX_BYTES`, ``decisions_total`` and ``truncated``.
    """
    listed: list[dict[str, Any]] = []
    size = 0
    for d in decisions:
        entry = {
            "kind": d.kind.value,
            "target": d.target,
            "sources": list(d.sources),
            "reason": d.reason,
            "to_tier": d.to_tier.value if d.to_tier else None,
        }
        size += len(orjson.dumps(entry)) + 1
        if size > REPORT_MAX_BYTES:
            break
        listed.append(entry)
    value = {
        "v": 1,
        "kind": "consolidation",
        "tenant_id": tenant_id,
        "request_id": request.request_id,
        "at": request.at.isoformat(),
        "dry_run": request.dry_run,
        "decisions": listed,
        "decisions_total": len(decisions),
        "truncated": len(listed) < len(decisions),
    }
    return Outbound("audit", tenant_id.encode(), orjson.dumps(value))


def _summary(
    tenant_id: str,
    decision: Decision,
    rows: Mapping[str, MemoryRow],
    items: Mapping[str, Item],
    at: datetime,
    request_id: str | None,
    merged: set[str],
    key_of: Callable[[str], str | None],
) -> Outbound:
    """The summary's write (:func:`memcore.consolidation.summarise`), of its sources as the plan's
    earlier decisions leave them (``items``; ``merged``: the memories merged away by then).
    """
    sources = [rows[s] for s in decision.sources]
    planned = [items[s] for s in decision.sources]
    summary = summarise(
        [s.content for s in sources], [i.importance for i in planned], [i.tier for i in planned]
    )
    links = absorbed_relations(
        (), (r for i in planned for r in i.relations), *decision.sources, *merged
    )
    keys = {s: k for s in decision.sources if (k := key_of(s)) is not None}
    value = {
        "v": 1,
        "tenant_id": tenant_id,
        "memory_id": decision.target,
        "content": summary.content,
        "at": at.isoformat(),
        "importance": summary.importance,
        "summary_of": list(decision.sources),
        **({"source_keys": keys} if keys else {}),
        "metadata": {"consolidation": request_id, "reason": decision.reason},
        # the sources share a scope (memcore.consolidation groups within one); tags: all of
        # theirs, those a merge earlier in the plan gave them too
        **({"agent_id": sources[0].agent_id} if sources[0].agent_id else {}),
        **({"session_id": sources[0].session_id} if sources[0].session_id else {}),
        **({"user_id": sources[0].user_id} if sources[0].user_id else {}),
        "tags": sorted({t for i in planned for t in i.tags})[:MAX_TAGS],  # a merge's folded in
        **({"relations": list(links)} if links else {}),
        **({"memory_type": summary.tier.value} if summary.tier else {}),
    }
    return Outbound("memory-writes", f"{tenant_id}/{decision.target}".encode(), orjson.dumps(value))


def _decision(tenant_id: str, memory_id: str, event: Event, request_id: str | None) -> Outbound:
    assert not isinstance(event, (Write, Access)), "plans hold decisions only"
    value = decision_value(tenant_id, memory_id, event, request_id)
    return Outbound("memory-writes", f"{tenant_id}/{memory_id}".encode(), orjson.dumps(value))
