"""A tenant's policy: every number of the memory model, as validated, frozen data.

A policy is built from two named presets (decay and lifecycle) plus overrides, e.g.::

    Policy.build(decay="powermem", lifecycle="powermem", overrides={"review": {"reinforcement": 0.2}})

Every field is checked on construction; a bad value raises :class:`~memcore.errors.InvalidField`
naming the dotted field (``policy.review.reinforcement``) and the value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self, TypeVar

from memcore.errors import InvalidField
from memcore.supersession import SupersessionPolicy
from memcore.types import (
    HOURS_PER_DAY,
    Tier,
    require_finite,
    require_non_negative,
    require_positive,
    require_unit,
)

E = TypeVar("E", bound=StrEnum)


class DecayPreset(StrEnum):
    """Named decay constants (SPEC section 4)."""

    ZEROMEMORY = "zeromemory"
    POWERMEM = "powermem"


class LifecyclePreset(StrEnum):
    """Named access-time gates (SPEC section 5)."""

    DEFAULT = "default"
    POWERMEM = "powermem"


class RecallPreset(StrEnum):
    """Named recall scoring formulas (SPEC section 6); ``mnemostream`` is the default."""

    MNEMOSTREAM = "mnemostream"
    ZEROMEMORY = "zeromemory"
    ZEPH = "zeph"
    POWERMEM = "powermem"

    @property
    def ignores(self) -> tuple[str, ...]:
        """The recall settings this formula does not read: ``zeph`` and ``powermem`` take no
        weights, and ``zeph`` diversifies with its own λ (``zeph_mmr_lambda``), not ``mmr_lambda``.
        """
        return {
            RecallPreset.ZEPH: ("weights", "mmr_lambda"),
            RecallPreset.POWERMEM: ("weights",),
        }.get(self, ())


def _parse_enum(kind: type[E], field_name: str, value: object) -> E:
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        for member in kind:
            if member.value == value.strip().lower():
                return member
    allowed = ", ".join(m.value for m in kind)
    raise InvalidField(field_name, value, f"unknown preset; expected one of {allowed}")


def _check(
    section: object,
    path: str,
    check: Any,  # noqa: ANN401 - one of the require_* functions
    *,
    only: tuple[str, ...] | None = None,
    exclude: tuple[str, ...] = (),
) -> None:
    names = only or tuple(f.name for f in dataclasses.fields(section))  # type: ignore[arg-type]
    for name in names:
        if name not in exclude:
            check(f"policy.{path}.{name}", getattr(section, name))


@dataclass(frozen=True)
class DecayPolicy:
    """Decay time constants τ, in hours, per tier: ``recency = exp(-idle_hours / τ)``.

    Attributes:
        working_tau_hours: τ of working memories.
        episodic_tau_hours: τ of episodic memories.
        semantic_tau_hours: τ of semantic memories.
        base_tau_hours: τ when no tier is known (PowerMem's global rate).
    """

    preset: DecayPreset = DecayPreset.ZEROMEMORY
    working_tau_hours: float = 48.0
    episodic_tau_hours: float = 240.0
    semantic_tau_hours: float = 1200.0
    base_tau_hours: float = 240.0

    def __post_init__(self) -> None:
        _check(self, "decay", require_positive, exclude=("preset",))

    def tau_hours(self, tier: Tier | None) -> float:
        """τ in hours for ``tier``, or the base τ when the tier is unknown."""
        if tier is None:
            return self.base_tau_hours
        return {
            Tier.WORKING: self.working_tau_hours,
            Tier.EPISODIC: self.episodic_tau_hours,
            Tier.SEMANTIC: self.semantic_tau_hours,
        }[tier]


# zeromemory: τ = 1/rate days (rates 0.5, 0.1, 0.02 per day); no tier -> the episodic rate.
# powermem: τ = 24 h × global rate 0.1 × tier multiplier (0.5, 1.5, 2.0); no tier -> 2.4 h.
# Written as exact literals so that no preset carries float noise (24 × 0.1 × 1.5 = 3.6000000000000005).
DECAY_PRESETS: Mapping[DecayPreset, DecayPolicy] = {
    DecayPreset.ZEROMEMORY: DecayPolicy(),
    DecayPreset.POWERMEM: DecayPolicy(
        preset=DecayPreset.POWERMEM,
        working_tau_hours=1.2,
        episodic_tau_hours=3.6,
        semantic_tau_hours=4.8,
        base_tau_hours=2.4,
    ),
}


_DECAY_OF_RECALL: Mapping[RecallPreset, DecayPreset] = {
    RecallPreset.ZEROMEMORY: DecayPreset.ZEROMEMORY,
    RecallPreset.POWERMEM: DecayPreset.POWERMEM,
}


def recall_decay(preset: RecallPreset, tenant: DecayPolicy) -> DecayPolicy | None:
    """The decay rates a recall of ``preset`` scores recency with, by each candidate's tier, on a
    tenant whose decay policy is ``tenant``.

    ``zeromemory`` and ``powermem`` reproduce their sources (SPEC section 6), their rates included:
    on a tenant that decays by the other preset they take their own (a ``powermem`` recall on a
    ``zeromemory`` tenant vetoes what is hours stale, as PowerMem does); on a tenant that decays
    by their source, the tenant's rates now (its overrides kept; a memory written before the
    tenant changed its preset holds the old preset's τ until its next recompute). None
    (``mnemostream``, ``zeph``): each memory's own τ.
    """
    source = _DECAY_OF_RECALL.get(preset)
    if source is None:
        return None
    return tenant if tenant.preset is source else DECAY_PRESETS[source]


@dataclass(frozen=True)
class TierPolicy:
    """Write-time tier classification by importance (SPEC section 3).

    Attributes:
        semantic_min_importance: importance at or above which a new memory is semantic.
        episodic_min_importance: importance at or above which (and below semantic) it is episodic.
    """

    semantic_min_importance: float = 0.8
    episodic_min_importance: float = 0.6

    def __post_init__(self) -> None:
        _check(self, "tiers", require_unit)
        if self.episodic_min_importance > self.semantic_min_importance:
            raise InvalidField(
                "policy.tiers.episodic_min_importance",
                self.episodic_min_importance,
                "must not exceed semantic_min_importance",
            )


@dataclass(frozen=True)
class ReviewPolicy:
    """The Ebbinghaus card (SPEC section 4).

    Attributes:
        intervals_hours: base review intervals, hours after creation (or after a recompute).
        adjustment_factor: each interval is scaled by ``1 - importance × adjustment_factor``.
        min_interval_hours: floor of a scaled interval, hours.
        reinforcement: a review does ``retention += reinforcement × (1 - retention)``.
        initial_retention_factor: ``retention = importance × initial_retention_factor`` at creation.
    """

    intervals_hours: tuple[float, ...] = (1.0, 6.0, 24.0, 72.0, 168.0)
    adjustment_factor: float = 0.3
    min_interval_hours: float = 0.5
    reinforcement: float = 0.3
    initial_retention_factor: float = 1.0

    def __post_init__(self) -> None:
        _check(self, "review", require_unit, only=("adjustment_factor", "reinforcement"))
        _check(self, "review", require_unit, only=("initial_retention_factor",))
        _check(self, "review", require_non_negative, only=("min_interval_hours",))
        if not isinstance(self.intervals_hours, tuple) or not self.intervals_hours:
            raise InvalidField(
                "policy.review.intervals_hours", self.intervals_hours, "expected a non-empty tuple"
            )
        previous = 0.0
        for i, value in enumerate(self.intervals_hours):
            hours = require_positive(f"policy.review.intervals_hours[{i}]", value)
            if hours < previous:
                raise InvalidField(
                    f"policy.review.intervals_hours[{i}]", value, "intervals must not decrease"
                )
            previous = hours


@dataclass(frozen=True)
class LifecyclePolicy:
    """What an access does beyond counting (SPEC section 5).

    Attributes:
        preset: ``default`` (decide on effective importance) or ``powermem`` (the article's gates).
        auto_boost: importance added by every access, capped at 1.
        archive_below: effective importance under which the archive sweep may archive a memory.
        sweep_min_idle_hours: the sweep archives only memories idle (since the last access) at
            least this long, hours (default 90 days).
        sweep_below_importance: the sweep archives only memories whose importance is below this.
        promote_min_access_count: access count at or above which a memory moves one tier up.
        promote_above_importance: importance strictly above which a memory moves one tier up (default).
        recompute_every: every n-th access recomputes τ and the review schedule.
        forget_below_recency: powermem forget gate: recency under this forgets.
        forget_unaccessed_after_hours: powermem forget gate: never accessed and older than this.
        promote_after_hours: powermem promote gate: age above this promotes.
        promote_min_importance: powermem promote gate: importance at or above this promotes.
        archive_after_hours: powermem archive gate: age above this archives.
        archive_below_importance: powermem archive gate: importance under this archives.
    """

    preset: LifecyclePreset = LifecyclePreset.DEFAULT
    auto_boost: float = 0.05
    archive_below: float = 0.05
    sweep_min_idle_hours: float = 90 * HOURS_PER_DAY
    sweep_below_importance: float = 0.5
    promote_min_access_count: int = 3
    promote_above_importance: float = 0.7
    recompute_every: int = 5
    forget_below_recency: float = 0.3
    forget_unaccessed_after_hours: float = 7 * HOURS_PER_DAY
    promote_after_hours: float = HOURS_PER_DAY
    promote_min_importance: float = 0.6
    archive_after_hours: float = 30 * HOURS_PER_DAY
    archive_below_importance: float = 0.3

    def __post_init__(self) -> None:
        _check(
            self,
            "lifecycle",
            require_unit,
            only=(
                "auto_boost",
                "archive_below",
                "sweep_below_importance",
                "promote_above_importance",
                "forget_below_recency",
                "promote_min_importance",
                "archive_below_importance",
            ),
        )
        _check(
            self,
            "lifecycle",
            require_non_negative,
            only=(
                "forget_unaccessed_after_hours",
                "promote_after_hours",
                "archive_after_hours",
                "sweep_min_idle_hours",
            ),
        )
        for name in ("promote_min_access_count", "recompute_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidField(f"policy.lifecycle.{name}", value, "expected an integer >= 1")


@dataclass(frozen=True)
class RecallWeights:
    """Weights of the recall score; each is a number in [0, 1000] (they need not sum to 1; the cap
    keeps every score finite). The defaults are the ``zeromemory`` blend; ``mnemostream`` has its
    own (:data:`RECALL_WEIGHTS`).

    ``zeromemory``: ``final = Σ weight × term``. ``mnemostream``: similarity and keyword weigh the
    relevance, the other three are bounded boosts:
    ``final = relevance × (1 + importance·(imp − 0.5) + recency·access_recency + graph·proximity)``.

    Attributes:
        similarity: weight of cosine similarity in [0, 1].
        keyword: weight of the keyword score normalised by the batch maximum.
        importance: weight (boost) of importance.
        recency: weight of recency ``exp(-idle/τ)`` (``mnemostream``: access recency, 0 for a
            memory never accessed).
        graph: weight (boost) of graph proximity ``1/(1+hops)``.
    """

    similarity: float = 0.5
    keyword: float = 0.0
    importance: float = 0.3
    recency: float = 0.2
    graph: float = 0.0

    def __post_init__(self) -> None:
        _check(self, "recall.weights", require_non_negative)
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value > MAX_WEIGHT:
                raise InvalidField(
                    f"policy.recall.weights.{name}", value, f"expected <= {MAX_WEIGHT}"
                )


MAX_WEIGHT = 1000.0
"""The largest recall weight: weights are relative, and a bound keeps every score finite."""
MAX_IMPORTANCE_BOOST = 2.0
"""The largest importance boost of ``mnemostream``: its factor ``1 + b·(importance − 0.5)`` stays
>= 0 for every importance in [0, 1] (recency and graph boosts only add)."""

RECALL_WEIGHTS: Mapping[RecallPreset, RecallWeights] = {
    RecallPreset.MNEMOSTREAM: RecallWeights(
        similarity=0.5, keyword=0.5, importance=0.3, recency=0.3, graph=0.0
    ),
    RecallPreset.ZEROMEMORY: RecallWeights(),
    RecallPreset.ZEPH: RecallWeights(),
    RecallPreset.POWERMEM: RecallWeights(),
}
"""Each preset's default weights (``zeph`` and ``powermem`` use none of them)."""


@dataclass(frozen=True)
class RecallPolicy:
    """Recall defaults of a tenant; a request may override each (SPEC section 6).

    Attributes:
        preset: the scoring formula (``mnemostream``: relevance first, priors as bounded boosts).
        weights: weights of the ``mnemostream`` and ``zeromemory`` formulas.
        graphrag: when true, ``final = blend × (1 - graph_weight) + proximity × graph_weight``.
        graph_weight: the GraphRAG share of graph proximity, in [0, 1].
        mmr_lambda: MMR trade-off in [0, 1] (1 = relevance only); None disables MMR.
        min_score: results scoring below this before MMR are dropped (``zeph``: its final score);
            None: no minimum (zeph's MMR gives a weaker near-duplicate a negative score, and a
            minimum of 0 dropped it where zeph returns it).
        archived_penalty: factor on the score of an archived candidate, in [0, 1] (archived
            memories stay reachable, below active ones that answer as well).
        soft_delete_below: ``zeromemory`` only: candidates whose effective importance
            (importance × recency) is below this are not returned (its source's soft delete).
        zeph_half_life_days: age half-life of the ``zeph`` preset, days.
        zeph_mmr_lambda: MMR λ of the ``zeph`` preset.
        zeph_importance_weight: importance bonus of the ``zeph`` preset.
        zeph_semantic_bonus: bonus of semantic-tier memories in the ``zeph`` preset.
    """

    preset: RecallPreset = RecallPreset.MNEMOSTREAM
    weights: RecallWeights = field(default_factory=lambda: RECALL_WEIGHTS[RecallPreset.MNEMOSTREAM])
    graphrag: bool = False
    graph_weight: float = 0.3
    mmr_lambda: float | None = None
    min_score: float | None = None
    archived_penalty: float = 0.5
    soft_delete_below: float = 0.05
    zeph_half_life_days: float = 30.0
    zeph_mmr_lambda: float = 0.7
    zeph_importance_weight: float = 0.15
    zeph_semantic_bonus: float = 0.3

    def __post_init__(self) -> None:
        _check(
            self,
            "recall",
            require_unit,
            only=("graph_weight", "zeph_mmr_lambda", "archived_penalty", "soft_delete_below"),
        )
        _check(self, "recall", require_positive, only=("zeph_half_life_days",))
        _check(
            self,
            "recall",
            require_non_negative,
            only=("zeph_importance_weight", "zeph_semantic_bonus"),
        )
        if self.mmr_lambda is not None:
            require_unit("policy.recall.mmr_lambda", self.mmr_lambda)
        if not isinstance(self.graphrag, bool):
            raise InvalidField("policy.recall.graphrag", self.graphrag, "expected true or false")
        if self.min_score is not None:
            require_finite("policy.recall.min_score", self.min_score)
        boost = self.weights.importance
        if self.preset is RecallPreset.MNEMOSTREAM and boost > MAX_IMPORTANCE_BOOST:
            raise InvalidField(
                "policy.recall.weights.importance",
                boost,
                f"expected <= {MAX_IMPORTANCE_BOOST:g} with the mnemostream preset (a larger boost"
                " turns the factor of a memory of importance 0 negative: its better matches"
                " would rank lower)",
            )

    def for_archive(self) -> RecallPolicy:
        """The policy archive search scores with: no soft delete. What the sweep archived has
        faded under 0.05, ``zeromemory``'s soft-delete line, and archived memories stay
        searchable through the archive API (SPEC sections 1 and 7).
        """
        return dataclasses.replace(self, soft_delete_below=0.0)

    @property
    def scores_keywords(self) -> bool:
        """The score reads keyword (BM25) scores: ``zeph`` always, ``powermem`` never, the others
        when their keyword weight is positive.
        """
        return self.preset is RecallPreset.ZEPH or (
            self.preset is not RecallPreset.POWERMEM and self.weights.keyword > 0
        )

    @property
    def stems_keywords(self) -> bool:
        """Keywords match stemmed (``memcore.keyword.stem``), as the default preset's full-text
        index keeps them; the named presets keep their sources' plain tokens.
        """
        return self.preset is RecallPreset.MNEMOSTREAM

    @classmethod
    def of(cls, preset: RecallPreset) -> RecallPolicy:
        """The defaults of ``preset``, its weights included."""
        return cls(preset=preset, weights=RECALL_WEIGHTS[preset])


@dataclass(frozen=True)
class ConsolidationPolicy:
    """Compaction thresholds (SPEC section 7).

    Attributes:
        semantic_dedup_min_cosine: cosine at or above which two memories are one.
        cluster_min_cosine: cosine at or above which memories join a compression cluster.
        min_cluster_size: smallest cluster that is compressed into a summary.
        working_idle_hours: a working memory idle this long becomes episodic.
        episodic_min_access_count: an episodic memory accessed this often becomes semantic.
        episodic_above_importance: an episodic memory above this importance becomes semantic.
        retention_window_hours: forgotten/deleted memories older than this are purged, hours.
    """

    semantic_dedup_min_cosine: float = 0.95
    cluster_min_cosine: float = 0.85
    min_cluster_size: int = 2
    working_idle_hours: float = 4.0
    episodic_min_access_count: int = 3
    episodic_above_importance: float = 0.7
    retention_window_hours: float = 30 * HOURS_PER_DAY

    def __post_init__(self) -> None:
        _check(
            self,
            "consolidation",
            require_unit,
            only=("semantic_dedup_min_cosine", "cluster_min_cosine", "episodic_above_importance"),
        )
        _check(
            self,
            "consolidation",
            require_non_negative,
            only=("working_idle_hours", "retention_window_hours"),
        )
        for name, low in (("min_cluster_size", 2), ("episodic_min_access_count", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidField(
                    f"policy.consolidation.{name}", value, f"expected an integer >= {low}"
                )


@dataclass(frozen=True)
class Policy:
    """Everything a tenant can tune. Build it with :meth:`build`; the defaults are SPEC's."""

    decay: DecayPolicy = field(default_factory=DecayPolicy)
    tiers: TierPolicy = field(default_factory=TierPolicy)
    review: ReviewPolicy = field(default_factory=ReviewPolicy)
    lifecycle: LifecyclePolicy = field(default_factory=LifecyclePolicy)
    recall: RecallPolicy = field(default_factory=RecallPolicy)
    consolidation: ConsolidationPolicy = field(default_factory=ConsolidationPolicy)
    supersession: SupersessionPolicy = field(default_factory=SupersessionPolicy)

    @classmethod
    def build(
        cls,
        decay: str = "zeromemory",
        lifecycle: str = "default",
        recall: str = "mnemostream",
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Self:
        """Presets first, then ``overrides`` (section name -> field name -> value).

        Raises:
            InvalidField: unknown preset, section or field, or a value out of range.
        """
        decay_policy = DECAY_PRESETS[_parse_enum(DecayPreset, "policy.decay.preset", decay)]
        lifecycle_policy = LifecyclePolicy(
            preset=_parse_enum(LifecyclePreset, "policy.lifecycle.preset", lifecycle)
        )
        recall_policy = RecallPolicy.of(_parse_enum(RecallPreset, "policy.recall.preset", recall))
        policy = cls(decay=decay_policy, lifecycle=lifecycle_policy, recall=recall_policy)
        return policy.with_overrides(overrides or {})

    def with_overrides(self, overrides: Mapping[str, Mapping[str, Any]]) -> Self:
        """A copy with ``overrides`` applied and validated (see :meth:`build`)."""
        sections = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for section, values in overrides.items():
            if section not in sections:
                raise InvalidField(f"policy.{section}", values, "unknown policy section")
            if not isinstance(values, Mapping):
                raise InvalidField(f"policy.{section}", values, "expected a mapping of fields")
            given = _with_preset_weights(values, self.recall) if section == "recall" else values
            changes[section] = _replace(getattr(self, section), f"policy.{section}", given)
        return dataclasses.replace(self, **changes)


def _with_preset_weights(values: Mapping[str, Any], current: RecallPolicy) -> Mapping[str, Any]:
    """Recall overrides that name another preset than ``current``'s start from that preset's
    weights (then the given ones); naming ``current``'s keeps its weights (a tenant's own).
    """
    if "preset" not in values:
        return values
    preset = _parse_enum(RecallPreset, "policy.recall.preset", values["preset"])
    if preset is current.preset:
        return values
    given = values.get("weights") or {}
    if not isinstance(given, Mapping):
        return values
    return {**values, "weights": {**dataclasses.asdict(RECALL_WEIGHTS[preset]), **given}}


def _replace(section: Any, path: str, values: Mapping[str, Any]) -> Any:  # noqa: ANN401
    names = {f.name: f for f in dataclasses.fields(section)}
    changes: dict[str, object] = {}
    for name, value in values.items():
        if name not in names:
            raise InvalidField(f"{path}.{name}", value, "unknown policy field")
        current = getattr(section, name)
        _check_int_size(f"{path}.{name}", value)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, Mapping):
                raise InvalidField(f"{path}.{name}", value, "expected a mapping of its fields")
            changes[name] = _replace(current, f"{path}.{name}", value)
        elif isinstance(current, StrEnum):
            changes[name] = _parse_enum(type(current), f"{path}.{name}", value)
        elif isinstance(current, tuple) and isinstance(value, list):
            changes[name] = tuple(value)
        else:
            changes[name] = value
    return dataclasses.replace(section, **changes)


def _check_int_size(path: str, value: object) -> None:
    """Refuse an integer (or a list's) past 64 bits: no store of the policy (JSON, the tenants
    topic) holds it.
    """
    for item in value if isinstance(value, list) else (value,):
        if isinstance(item, int) and not -(2**63) <= item < 2**63:
            raise InvalidField(path, item, "an integer past 64 bits")
