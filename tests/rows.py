"""One builder of store rows for tests: every field set, any of them overridden by keyword."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from memcore.keyword import keyword_text
from storage import MemoryRow


def make_row(tenant: str, memory_id: str, vector: Sequence[float], **kw: object) -> MemoryRow:
    """An active episodic row of ``tenant`` with plain values; ``kw`` replaces any field (a
    ``content`` given without a ``search_text`` is indexed as the worker indexes it).
    """
    base = MemoryRow(
        key=f"{tenant}/{memory_id}",
        tenant_id=tenant,
        memory_id=memory_id,
        content=f"content of {memory_id} ✓",
        vector=tuple(vector),
        tier="episodic",
        state="active",
        importance=0.5,
        access_count=0,
        recall_count=0,
        write_count=1,
        created_at_us=1_000_000,
        last_access_us=1_000_000,
        state_changed_at_us=1_000_000,
        tau_hours=240.0,
        retention=0.5,
        review_count=0,
        next_review_us=2_000_000,
        session_id="s1",
        agent_id="",
        user_id="",
        tags=("work",),
        relations=(),
        merged_into="",
        summary_of=(),
        metadata={"priority": "high", "n": 1},
        valid_to_us=0,
        superseded_by="",
        search_text=keyword_text(f"content of {memory_id} ✓"),
    )
    if "content" in kw and "search_text" not in kw:
        kw = {**kw, "search_text": keyword_text(str(kw["content"]))}
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]
