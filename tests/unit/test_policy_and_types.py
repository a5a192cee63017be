from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memcore import Access, AccessKind, InvalidField, Item, Lifecycle, Policy, Tier, apply, plan
from memcore.ids import check_id, content_hash, derive_memory_id, split_key, state_key
from memcore.policy import (
    DECAY_PRESETS,
    DecayPreset,
    LifecyclePreset,
    RecallPreset,
    RecallWeights,
    recall_decay,
)
from memcore.types import require_aware

from .helpers import created


def test_defaults_are_the_spec() -> None:
    policy = Policy()
    assert policy.decay.preset is DecayPreset.ZEROMEMORY
    assert (policy.decay.working_tau_hours, policy.decay.semantic_tau_hours) == (48.0, 1200.0)
    assert policy.lifecycle.preset is LifecyclePreset.DEFAULT
    assert policy.recall.preset is RecallPreset.MNEMOSTREAM
    assert policy.recall.weights == RecallWeights(0.5, 0.5, 0.3, 0.3, 0.0)
    assert (policy.recall.archived_penalty, policy.recall.soft_delete_below) == (0.5, 0.05)
    assert Policy.build() == policy
    assert Policy.build(recall="zeromemory").recall.weights == RecallWeights(
        0.5, 0.0, 0.3, 0.2, 0.0
    )
    rules = policy.lifecycle
    assert (rules.archive_below, rules.sweep_min_idle_hours, rules.sweep_below_importance) == (
        0.05,
        90 * 24.0,
        0.5,
    )
    assert policy.review.intervals_hours == (1.0, 6.0, 24.0, 72.0, 168.0)


def test_powermem_decay_preset() -> None:
    decay = Policy.build(decay="PowerMem").decay
    assert [decay.tau_hours(t) for t in Tier] == [1.2, 3.6, 4.8]
    assert decay.tau_hours(None) == 2.4


def test_a_recall_preset_decays_at_its_source_s_rates_on_a_tenant_decaying_otherwise() -> None:
    zeromemory, powermem = (
        DECAY_PRESETS[DecayPreset.ZEROMEMORY],
        DECAY_PRESETS[DecayPreset.POWERMEM],
    )
    assert recall_decay(RecallPreset.POWERMEM, zeromemory) is powermem
    assert recall_decay(RecallPreset.ZEROMEMORY, powermem) is zeromemory
    # the tenant's rates now, not each memory's τ (a memory written before the tenant moved to
    # this preset holds the old one's): its overrides stay
    assert recall_decay(RecallPreset.POWERMEM, powermem) is powermem
    tuned = Policy.build(overrides={"decay": {"semantic_tau_hours": 5000.0}}).decay
    assert recall_decay(RecallPreset.ZEROMEMORY, tuned) is tuned
    for preset in (RecallPreset.MNEMOSTREAM, RecallPreset.ZEPH):
        assert recall_decay(preset, powermem) is recall_decay(preset, zeromemory) is None


def test_overrides_apply_and_nest() -> None:
    policy = Policy.build(
        overrides={
            "recall": {"weights": {"keyword": 0.2}, "mmr_lambda": 0.5},
            "review": {"intervals_hours": [2, 4]},
        }
    )
    assert policy.recall.weights.keyword == 0.2
    assert policy.recall.weights.similarity == 0.5
    assert policy.recall.mmr_lambda == 0.5
    assert policy.review.intervals_hours == (2, 4)


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"decay": "slow"}, "policy.decay.preset", "slow"),
        ({"lifecycle": "x"}, "policy.lifecycle.preset", "x"),
        ({"recall": 3}, "policy.recall.preset", 3),
        ({"overrides": {"nope": {}}}, "policy.nope", {}),
        ({"overrides": {"review": {"speed": 1}}}, "policy.review.speed", 1),
        ({"overrides": {"review": {"reinforcement": 1.5}}}, "policy.review.reinforcement", 1.5),
        ({"overrides": {"decay": {"working_tau_hours": 0}}}, "policy.decay.working_tau_hours", 0),
        (
            {"overrides": {"recall": {"weights": {"recency": -1}}}},
            "policy.recall.weights.recency",
            -1,
        ),
        ({"overrides": {"recall": {"mmr_lambda": 2}}}, "policy.recall.mmr_lambda", 2),
        (
            {"overrides": {"lifecycle": {"recompute_every": 0}}},
            "policy.lifecycle.recompute_every",
            0,
        ),
        (
            {"overrides": {"lifecycle": {"recompute_every": 2**64}}},
            "policy.lifecycle.recompute_every",
            2**64,
        ),
        (
            {"overrides": {"review": {"intervals_hours": [1, -(2**63) - 1]}}},
            "policy.review.intervals_hours",
            -(2**63) - 1,
        ),
        ({"overrides": {"recall": {"weights": "x"}}}, "policy.recall.weights", "x"),
        ({"overrides": {"recall": {"weights": None}}}, "policy.recall.weights", None),
        (
            {"overrides": {"review": {"intervals_hours": [6, 1]}}},
            "policy.review.intervals_hours[1]",
            1,
        ),
        (
            {"overrides": {"tiers": {"episodic_min_importance": 0.9}}},
            "policy.tiers.episodic_min_importance",
            0.9,
        ),
        (
            {"overrides": {"consolidation": {"min_cluster_size": 1}}},
            "policy.consolidation.min_cluster_size",
            1,
        ),
    ],
)
def test_invalid_policies_name_field_and_value(
    kwargs: dict[str, object], field: str, value: object
) -> None:
    with pytest.raises(InvalidField) as err:
        Policy.build(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field
    assert err.value.value == value
    assert field in str(err.value)


def test_nan_weight_is_rejected() -> None:
    with pytest.raises(InvalidField, match=r"policy\.recall\.weights\.similarity=nan"):
        Policy.build(overrides={"recall": {"weights": {"similarity": float("nan")}}})


def test_weights_are_bounded_so_scores_stay_finite() -> None:
    assert Policy.build(overrides={"recall": {"weights": {"similarity": 1000}}})
    assert Policy.build(
        recall="zeromemory", overrides={"recall": {"weights": {"importance": 1000}}}
    )
    with pytest.raises(InvalidField, match=r"policy\.recall\.weights\.importance=1e\+308"):
        Policy.build(overrides={"recall": {"weights": {"importance": 1e308}}})


@pytest.mark.parametrize(
    ("name", "tier"),
    [("working", Tier.WORKING), ("short_term", Tier.EPISODIC), ("LONG_TERM", Tier.SEMANTIC)],
)
def test_tier_aliases(name: str, tier: Tier) -> None:
    assert Tier.parse(name) is tier


def test_unknown_tier() -> None:
    with pytest.raises(InvalidField) as err:
        Tier.parse("procedural")
    assert (err.value.field, err.value.value) == ("memory_type", "procedural")


def test_promotion_order() -> None:
    assert [t.promoted() for t in Tier] == [Tier.EPISODIC, Tier.SEMANTIC, Tier.SEMANTIC]


def test_naive_datetimes_are_rejected() -> None:
    with pytest.raises(InvalidField, match="naive"):
        require_aware("at", datetime(2026, 1, 1))  # noqa: DTZ001
    assert require_aware("at", datetime(2026, 1, 1, tzinfo=UTC)).tzinfo is UTC


def test_derived_ids_are_stable_per_tenant_and_content() -> None:
    a = derive_memory_id("acme", "Alice  prefers\nPython ")
    assert a == derive_memory_id("acme", "Alice prefers Python")
    assert a != derive_memory_id("other", "Alice prefers Python")
    assert a != derive_memory_id("acme", "alice prefers python")
    assert content_hash("a  b") == content_hash(" a b")


def test_keys_round_trip_and_reject_slashes() -> None:
    assert split_key(state_key("acme", "m-1")) == ("acme", "m-1")
    with pytest.raises(InvalidField) as err:
        state_key("ac/me", "m")
    assert err.value.field == "tenant_id"
    for bad in ["", "a" * 129, "x y", None]:
        with pytest.raises(InvalidField):
            check_id("memory_id", bad)
    with pytest.raises(InvalidField):
        split_key("no-slash")
    with pytest.raises(InvalidField) as leading:  # only characters the message listed
        check_id("tenant_id", "-x")
    assert "the first a letter or digit" in leading.value.reason


def test_a_preset_override_brings_its_own_weights_under_the_given_ones() -> None:
    zeromemory = Policy().with_overrides({"recall": {"preset": "zeromemory"}}).recall
    assert zeromemory.weights == RecallWeights(0.5, 0.0, 0.3, 0.2, 0.0)
    tuned = Policy().with_overrides({"recall": {"preset": "zeromemory", "weights": {"keyword": 1}}})
    assert tuned.recall.weights == RecallWeights(0.5, 1, 0.3, 0.2, 0.0)


def test_the_mnemostream_importance_boost_keeps_its_factor_non_negative() -> None:
    # 1 + b·(0 − 0.5) < 0 past b = 2: a better match of importance 0 would rank lower
    with pytest.raises(InvalidField) as refused:
        Policy.build(overrides={"recall": {"weights": {"importance": 2.5}}})
    assert refused.value.field == "policy.recall.weights.importance"
    edge = Policy.build(overrides={"recall": {"weights": {"importance": 2.0}}})
    assert edge.recall.weights.importance == 2.0
    zeromemory = Policy.build(
        recall="zeromemory", overrides={"recall": {"weights": {"importance": 5.0}}}
    )
    assert zeromemory.recall.weights.importance == 5.0  # a linear weight there: any size


def test_a_policy_saying_never_with_a_huge_number_of_hours_works_to_the_end_of_time() -> None:
    """Every write of such a tenant raised OverflowError (a review time past the year 9999, a
    span past timedelta's limit): a dead letter naming no field.
    """
    never = Policy.build(
        lifecycle="powermem",
        overrides={
            "review": {"intervals_hours": [1.0, 1e8, 1e12], "min_interval_hours": 1e7},
            "lifecycle": {
                "forget_unaccessed_after_hours": 1e12,
                "archive_after_hours": 1e12,
                "promote_after_hours": 1e12,
            },
            "consolidation": {"working_idle_hours": 1e12, "retention_window_hours": 1e12},
        },
    )
    late = datetime(8999, 1, 1, tzinfo=UTC)
    state = created(0.5, Tier.WORKING, never, at=late)
    assert state.card.next_review is not None
    assert state.card.next_review > late
    accessed, effects = apply(state, Access(late + timedelta(days=1), AccessKind.GET), never)
    assert accessed is not None
    assert (accessed.state, accessed.access_count) == (Lifecycle.ACTIVE, 1), effects
    item = Item("m1", "h", (1.0,), late, late, late, Tier.WORKING, Lifecycle.DELETED, 0.5, 48.0)
    assert plan("t", [item], late + timedelta(days=3000), never) == []


def test_naming_the_tenant_s_own_preset_keeps_the_tenant_s_weights() -> None:
    """A recall naming its tenant's own preset (``"preset": "zeromemory"`` of a zeromemory
    tenant with weights of its own) was scored with the preset's default weights instead.
    """
    tenant = Policy.build(
        recall="zeromemory", overrides={"recall": {"weights": {"recency": 0.5, "importance": 0}}}
    )
    own = tenant.with_overrides({"recall": {"preset": "zeromemory"}}).recall
    assert own.weights == tenant.recall.weights
    tuned = tenant.with_overrides(
        {"recall": {"preset": "zeromemory", "weights": {"similarity": 1}}}
    )
    assert (tuned.recall.weights.similarity, tuned.recall.weights.recency) == (1, 0.5)
    other = tenant.with_overrides({"recall": {"preset": "mnemostream"}}).recall
    assert other.weights == Policy.build(recall="mnemostream").recall.weights
