"""Recency, effective importance and tier classification (SPEC sections 3 and 4)."""

from __future__ import annotations

import math
from datetime import datetime

from memcore.policy import LifecyclePolicy, TierPolicy
from memcore.types import Tier, hours_between


def recency(idle_hours: float, tau_hours: float) -> float:
    """``exp(-idle_hours / tau_hours)`` in (0, 1]. Negative idle time (an event older than the last
    access, e.g. out-of-order delivery) counts as zero: recency never exceeds 1.
    """
    return math.exp(-max(idle_hours, 0.0) / tau_hours)


def recency_at(last_access: datetime, at: datetime, tau_hours: float) -> float:
    """Recency at event time ``at`` of a memory last accessed at ``last_access``."""
    return recency(hours_between(last_access, at), tau_hours)


def effective_importance(importance: float, recency_value: float) -> float:
    """``importance × recency``; below the archive threshold a memory fades out of recall."""
    return importance * recency_value


def faded(
    importance: float, last_access: datetime, tau_hours: float, at: datetime, archive_below: float
) -> str | None:
    """Why a memory has faded out of recall by ``at`` (effective importance under
    ``archive_below``), or None while it has not.
    """
    value = effective_importance(importance, recency_at(last_access, at, tau_hours))
    if value < archive_below:
        return f"faded: effective importance {value:.4g} < {archive_below}"
    return None


def sweep_archive_reason(
    importance: float, last_access: datetime, tau_hours: float, at: datetime, rules: LifecyclePolicy
) -> str | None:
    """Why the archive sweep may archive a memory at ``at`` (SPEC section 7: effective importance
    under ``archive_below`` AND idle at least ``sweep_min_idle_hours`` AND importance under
    ``sweep_below_importance``), or None. Recall never hides a memory for this (rule zero).
    """
    idle = hours_between(last_access, at)
    if idle < rules.sweep_min_idle_hours or importance >= rules.sweep_below_importance:
        return None
    why = faded(importance, last_access, tau_hours, at, rules.archive_below)
    if why is None:
        return None
    return f"{why}, idle {idle / 24:.4g} d, importance {importance:.4g} < {rules.sweep_below_importance}"


def classify_tier(importance: float, tiers: TierPolicy) -> Tier:
    """Tier of a new memory whose writer gave none: >= 0.8 semantic, >= 0.6 episodic, else working."""
    if importance >= tiers.semantic_min_importance:
        return Tier.SEMANTIC
    if importance >= tiers.episodic_min_importance:
        return Tier.EPISODIC
    return Tier.WORKING
