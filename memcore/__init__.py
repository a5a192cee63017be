"""memcore: the memory model of SPEC.md as pure functions and one reducer.

Standard library only. No clock, no environment, no I/O: event time and the tenant's
:class:`Policy` are arguments. Bad input raises :class:`InvalidField` naming the field and value.
"""

from memcore.card import ReviewCard, new_card, review_intervals_hours
from memcore.consolidation import Decision, DecisionKind, Item, Strategy, plan, to_events
from memcore.decay import classify_tier, effective_importance, faded, recency, recency_at
from memcore.errors import InvalidField
from memcore.ids import content_hash, derive_memory_id, normalise_content, split_key, state_key
from memcore.importance import (
    ImportanceDecision,
    parse_llm_answer,
    resolve_importance,
    rule_importance,
)
from memcore.policy import DecayPreset, LifecyclePreset, Policy, RecallPreset, RecallWeights
from memcore.reducer import Relink, apply, create, relink
from memcore.scoring import Candidate, RankParams, Scored, blend, mmr, rank
from memcore.state import (
    MAX_RELATIONS,
    MAX_RELINKS,
    MAX_SUMMARY_SOURCES,
    MAX_TAGS,
    Absorb,
    Access,
    Effect,
    EffectKind,
    Event,
    Fade,
    MemoryState,
    Position,
    Promote,
    Purge,
    Retire,
    Supersede,
    Write,
)
from memcore.supersession import (
    SUPERSEDABLE,
    Supersession,
    SupersessionPolicy,
    Version,
    decide,
    detect,
    fact_of,
    llm_candidates,
    llm_prompt,
)
from memcore.types import AccessKind, ImportanceSource, Lifecycle, Tier

__all__ = [
    "MAX_RELATIONS",
    "MAX_RELINKS",
    "MAX_SUMMARY_SOURCES",
    "MAX_TAGS",
    "SUPERSEDABLE",
    "Absorb",
    "Access",
    "AccessKind",
    "Candidate",
    "DecayPreset",
    "Decision",
    "DecisionKind",
    "Effect",
    "EffectKind",
    "Event",
    "Fade",
    "ImportanceDecision",
    "ImportanceSource",
    "InvalidField",
    "Item",
    "Lifecycle",
    "LifecyclePreset",
    "MemoryState",
    "Policy",
    "Position",
    "Promote",
    "Purge",
    "RankParams",
    "RecallPreset",
    "RecallWeights",
    "Relink",
    "Retire",
    "ReviewCard",
    "Scored",
    "Strategy",
    "Supersede",
    "Supersession",
    "SupersessionPolicy",
    "Tier",
    "Version",
    "Write",
    "apply",
    "blend",
    "classify_tier",
    "content_hash",
    "create",
    "decide",
    "derive_memory_id",
    "detect",
    "effective_importance",
    "fact_of",
    "faded",
    "llm_candidates",
    "llm_prompt",
    "mmr",
    "new_card",
    "normalise_content",
    "parse_llm_answer",
    "plan",
    "rank",
    "recency",
    "recency_at",
    "relink",
    "resolve_importance",
    "review_intervals_hours",
    "rule_importance",
    "split_key",
    "state_key",
    "to_events",
]
