from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from memcore import (
    MAX_RELATIONS,
    MAX_TAGS,
    Absorb,
    Access,
    AccessKind,
    EffectKind,
    Fade,
    ImportanceSource,
    Lifecycle,
    Policy,
    Position,
    Promote,
    Purge,
    Retire,
    Tier,
    apply,
    content_hash,
)
from memcore.card import review_intervals_hours

from .helpers import T0, created, hours, write

DEFAULT = Policy()
POWERMEM = Policy.build(decay="powermem", lifecycle="powermem")


def test_write_creates_with_tier_by_importance() -> None:
    state, effects = apply(None, write(importance=0.85), DEFAULT)
    assert state is not None
    assert state.tier is Tier.SEMANTIC
    assert state.tau_hours == DEFAULT.decay.semantic_tau_hours
    assert (state.access_count, state.recall_count, state.write_count) == (0, 0, 1)
    assert [e.kind for e in effects] == [EffectKind.CREATED]


def test_writer_tier_wins_over_classification() -> None:
    state = created(0.95, Tier.WORKING)
    assert state.tier is Tier.WORKING


def test_a_tier_the_writer_chose_is_audited_as_written_not_as_by_importance() -> None:
    """The history of a memory written as ``semantic`` with importance 0.1 said "semantic by
    importance 0.1": a reason the tier rules refute."""
    _, (effect,) = apply(None, write(importance=0.1, tier=Tier.SEMANTIC), DEFAULT)
    assert effect.reason == "semantic as written (memory_type); importance 0.1 (test)"
    _, (effect,) = apply(None, write(importance=0.85), DEFAULT)
    assert effect.reason == "semantic by importance 0.85 (test)"
    # an update's version: the API wrote the old memory's tier and importance, not its caller
    update = dataclasses.replace(write(importance=0.1, tier=Tier.WORKING), supersedes="m0")
    _, (effect,) = apply(None, update, DEFAULT)
    assert "as written" not in effect.reason
    assert effect.reason.startswith("working, importance 0.1: the version of m0")


def test_identical_rewrite_folds() -> None:
    first = created(0.4)
    again, effects = apply(first, write(importance=0.6, at=T0 + hours(1)), DEFAULT)
    assert again is not None
    assert again.write_count == 2
    assert again.importance == 0.6
    assert again.created_at == T0
    assert again.tier is first.tier
    lower, _ = apply(again, write(importance=0.1, at=T0 + hours(2)), DEFAULT)
    assert lower is not None
    assert (lower.write_count, lower.importance) == (3, 0.6)
    assert [e.kind for e in effects] == [EffectKind.FOLDED]


def test_rewrites_keep_at_most_max_tags_and_relations_dropping_the_oldest_first() -> None:
    """Each rewrite adds its tags and relations; a memory never holds more than the serving
    store's arrays take, and a rewrite's own (a repeated old one too) are never the ones dropped.
    """
    state = None
    for i in range(3):
        tags = tuple(f"t{i}-{j}" for j in range(40))
        relations = tuple(f"r{i}-{j}" for j in range(40))
        if i == 2:  # repeats the oldest one the memory holds now: kept, though the oldest
            tags, relations = ("t1-0", *tags[1:]), ("r1-0", *relations[1:])
        event = dataclasses.replace(
            write(at=T0 + hours(i)), tags=tags, relations=relations, position=Position("w", i)
        )
        state, _ = apply(state, event, DEFAULT)
        assert state is not None
        assert len(state.tags) <= MAX_TAGS
        assert len(state.relations) <= MAX_RELATIONS
        assert set(tags) <= set(state.tags)
        assert set(relations) <= set(state.relations)
    assert state is not None
    # the third write's 40 (one of them repeated from the second) and the second's 24 newest
    kept = {"t1-0", *(f"t2-{j}" for j in range(1, 40)), *(f"t1-{j}" for j in range(16, 40))}
    assert (len(state.tags), set(state.tags)) == (MAX_TAGS, kept)
    assert set(state.relations) == {t.replace("t", "r", 1) for t in kept}
    assert len(state.tags) == len(set(state.tags))


def test_rewrite_with_new_content_is_an_update() -> None:
    first = created(0.4)
    updated, effects = apply(first, write(content="new text", at=T0 + hours(1)), DEFAULT)
    assert updated is not None
    assert updated.content_hash != first.content_hash
    assert updated.write_count == 2
    assert [e.kind for e in effects] == [EffectKind.UPDATED]


class TestAccessDefault:
    def test_counts_clock_and_boost(self) -> None:
        state = created(0.3)
        at = T0 + hours(0.25)
        after, effects = apply(state, Access(at, AccessKind.RECALL), DEFAULT)
        assert after is not None
        assert (after.access_count, after.recall_count) == (1, 1)
        assert after.last_access == at
        assert after.importance == pytest.approx(0.35)
        assert [e.kind for e in effects] == [EffectKind.ACCESSED]

    def test_get_is_not_a_recall(self) -> None:
        after, _ = apply(created(0.3), Access(T0, AccessKind.GET), DEFAULT)
        assert after is not None
        assert (after.access_count, after.recall_count) == (1, 0)

    def test_boost_caps_at_one(self) -> None:
        after, _ = apply(created(0.98, Tier.SEMANTIC), Access(T0), DEFAULT)
        assert after is not None
        assert after.importance == 1.0

    def test_third_access_promotes_one_tier(self) -> None:
        state = created(0.1)
        assert state.tier is Tier.WORKING
        tiers = []
        for i in range(1, 5):
            nxt, _ = apply(state, Access(T0 + hours(i * 0.1)), DEFAULT)
            assert nxt is not None
            state = nxt
            tiers.append(state.tier)
        assert tiers == [Tier.WORKING, Tier.WORKING, Tier.EPISODIC, Tier.SEMANTIC]

    def test_importance_above_point_seven_promotes(self) -> None:
        after, _ = apply(created(0.66), Access(T0), DEFAULT)
        assert after is not None
        assert after.importance == 0.71
        assert after.tier is Tier.SEMANTIC

    def test_boundary_is_strict_and_exact(self) -> None:
        # 0.65 + 0.05 is exactly 0.7 after settling: not above 0.7, so no promotion.
        after, _ = apply(created(0.65), Access(T0), DEFAULT)
        assert after is not None
        assert after.importance == 0.7
        assert after.tier is Tier.EPISODIC

    def test_an_access_never_archives_a_faded_memory(self) -> None:
        state = created(0.1)  # working: tau 48 h; effective importance 0.1 × e^(-4800/48) ≈ 0
        after, effects = apply(state, Access(T0 + hours(4800), AccessKind.RECALL), DEFAULT)
        assert after is not None
        assert after.state is Lifecycle.ACTIVE
        assert (after.access_count, after.recall_count) == (1, 1)
        assert after.last_access == T0 + hours(4800)
        assert EffectKind.ARCHIVED not in [e.kind for e in effects]

    def test_an_access_revives_an_archived_memory_then_counts(self) -> None:
        archived = dataclasses.replace(created(0.5), state=Lifecycle.ARCHIVED)
        at = T0 + hours(3000)
        after, effects = apply(archived, Access(at, AccessKind.GET), DEFAULT)
        assert after is not None
        assert (after.state, after.state_changed_at) == (Lifecycle.ACTIVE, at)
        assert (after.access_count, after.last_access, after.importance) == (1, at, 0.55)
        assert [e.kind for e in effects][:2] == [EffectKind.REVIVED, EffectKind.ACCESSED]

    @pytest.mark.parametrize(
        "retire",
        [
            Retire(T0 + hours(3000), Lifecycle.ARCHIVED, "compressed", merged_into="sum1"),
            Retire(T0 + hours(3000), Lifecycle.DELETED, "deleted through the API"),
            Retire(T0 + hours(3000), Lifecycle.FORGOTTEN, "forgotten"),
        ],
    )
    def test_an_access_dated_before_a_retirement_counts_alike_in_either_order(
        self, retire: Retire
    ) -> None:
        """Accesses and decisions come on two topics read apart: an access dated before a
        compression revived the source when it came second (a replay's order), so the live
        state and the replay's differed (the source back in recall beside its summary)."""
        access = Access(T0 + hours(10), AccessKind.RECALL)
        live, _ = apply(created(0.5), access, DEFAULT)
        assert live is not None
        live, _ = apply(live, retire, DEFAULT)
        replayed, effects = apply(created(0.5), retire, DEFAULT)
        assert replayed is not None
        replayed, effects = apply(replayed, access, DEFAULT)
        assert replayed is not None
        assert replayed == live
        assert (replayed.state, replayed.access_count) == (retire.to, 1)
        assert EffectKind.REVIVED not in [e.kind for e in effects]
        later, effects = apply(replayed, Access(T0 + hours(3001)), DEFAULT)
        revives = retire.to is Lifecycle.ARCHIVED  # an access after it: needed again
        assert later is not None
        assert (later.state is Lifecycle.ACTIVE) is revives
        assert (EffectKind.REVIVED in [e.kind for e in effects]) is revives

    def test_an_access_arriving_after_a_later_one_never_moves_the_schedule_back(self) -> None:
        """The schedule was recomputed from the late access's own time: last_access on day
        50, the next review due before it (accesses in another order, another state)."""
        policy = Policy.build(overrides={"lifecycle": {"recompute_every": 1}})
        later, _ = apply(created(0.5), Access(T0 + hours(1200)), policy)
        assert later is not None
        late, _ = apply(later, Access(T0 + hours(10)), policy)
        assert late is not None
        assert late.last_access == T0 + hours(1200)
        assert late.card.next_review is not None
        assert late.card.next_review > late.last_access  # scheduled from the latest access

    def test_forgotten_and_deleted_memories_ignore_access(self) -> None:
        for gone in (Lifecycle.FORGOTTEN, Lifecycle.DELETED):
            state = dataclasses.replace(created(0.5), state=gone)
            after, effects = apply(state, Access(T0), DEFAULT)
            assert after == state
            assert [e.kind for e in effects] == [EffectKind.IGNORED]

    def test_every_fifth_access_recomputes_the_card(self) -> None:
        policy = Policy.build(overrides={"lifecycle": {"promote_min_access_count": 100}})
        state = created(0.2)
        kinds = []
        for i in range(1, 11):
            nxt, effects = apply(state, Access(T0 + hours(i * 0.01)), policy)
            assert nxt is not None
            state = nxt
            kinds.append(EffectKind.RESCHEDULED in [e.kind for e in effects])
        assert kinds == [False] * 4 + [True] + [False] * 4 + [True]
        assert state.card.next_review == T0 + hours(0.1) + hours(1 - state.importance * 0.3)

    def test_fifth_access_picks_up_a_changed_decay_policy(self) -> None:
        state = created(0.2)
        slower = Policy.build(
            overrides={
                "decay": {"working_tau_hours": 96.0},
                "lifecycle": {"promote_min_access_count": 100},
            }
        )
        for i in range(1, 6):
            nxt, _ = apply(state, Access(T0 + hours(i * 0.01)), slower)
            assert nxt is not None
            assert nxt.tau_hours == (96.0 if i == 5 else 48.0)
            state = nxt

    def test_out_of_order_access_never_moves_the_clock_back(self) -> None:
        state, _ = apply(created(0.5), Access(T0 + hours(2)), DEFAULT)
        assert state is not None
        after, _ = apply(state, Access(T0 + hours(1)), DEFAULT)
        assert after is not None
        assert after.last_access == T0 + hours(2)
        assert after.access_count == 2


class TestAccessPowermem:
    def test_never_accessed_for_seven_days_is_forgotten(self) -> None:
        # semantic tau 4.8 h would forget it on recency first; give it a huge tau to test the rule.
        policy = POWERMEM.with_overrides({"decay": {"semantic_tau_hours": 1e9}})
        state = created(0.9, policy=policy)
        after, effects = apply(state, Access(T0 + timedelta(days=7, seconds=1)), policy)
        assert after is not None
        assert after.state is Lifecycle.FORGOTTEN
        assert "never accessed" in effects[0].reason

    def test_gates_read_the_state_before_the_access(self) -> None:
        # 0.55 is below the 0.6 promote line before the access, 0.6 after it: no promotion.
        state = created(0.55, Tier.WORKING, policy=POWERMEM)
        after, _ = apply(state, Access(T0 + hours(0.1)), POWERMEM)
        assert after is not None
        assert after.tier is Tier.WORKING
        assert after.importance == 0.6

    def test_low_importance_is_archived_after_the_access_counts(self) -> None:
        state = created(0.2, Tier.EPISODIC, policy=POWERMEM)
        after, effects = apply(state, Access(T0 + hours(0.1)), POWERMEM)
        assert after is not None
        assert after.state is Lifecycle.ARCHIVED
        assert after.access_count == 1
        assert [e.kind for e in effects] == [EffectKind.ACCESSED, EffectKind.ARCHIVED]

    def test_age_over_a_day_promotes(self) -> None:
        policy = POWERMEM.with_overrides({"decay": {"episodic_tau_hours": 1e9}})
        state = created(0.4, Tier.EPISODIC, policy=policy)
        accessed, _ = apply(state, Access(T0 + hours(1)), policy)
        assert accessed is not None
        later, _ = apply(accessed, Access(T0 + hours(25)), policy)
        assert later is not None
        assert later.tier is Tier.SEMANTIC
        assert later.tau_hours == policy.decay.semantic_tau_hours


class TestIdempotence:
    def test_redelivered_event_changes_nothing(self) -> None:
        state, _ = apply(None, dataclasses.replace(write(), position=Position("w/0", 7)), DEFAULT)
        assert state is not None
        once, _ = apply(state, Access(T0, position=Position("a/0", 3)), DEFAULT)
        again, effects = apply(once, Access(T0, position=Position("a/0", 3)), DEFAULT)
        older, _ = apply(once, Access(T0, position=Position("a/0", 2)), DEFAULT)
        assert again == once
        assert older == once
        assert [e.kind for e in effects] == [EffectKind.SKIPPED]
        assert once is not None
        assert once.offsets == (("a/0", 3), ("w/0", 7))

    def test_sources_are_independent(self) -> None:
        state, _ = apply(None, dataclasses.replace(write(), position=Position("w/0", 7)), DEFAULT)
        after, _ = apply(state, Access(T0, position=Position("a/0", 1)), DEFAULT)
        assert after is not None
        assert after.access_count == 1

    def test_redelivered_write_does_not_fold(self) -> None:
        w = dataclasses.replace(write(), position=Position("w/0", 1))
        state, _ = apply(None, w, DEFAULT)
        again, _ = apply(state, w, DEFAULT)
        assert again is not None
        assert again.write_count == 1


class TestDecisions:
    def test_absorb_adds_counters_keeps_max_importance_once_per_source(self) -> None:
        state = dataclasses.replace(created(0.3), access_count=2, recall_count=1)
        event = Absorb(T0, "m2", 5, 4, 2, 0.9, "near duplicate")
        after, effects = apply(state, event, DEFAULT)
        assert after is not None
        assert (after.access_count, after.recall_count, after.write_count) == (7, 5, 3)
        assert after.importance == 0.9
        assert after.merged_from == ("m2",)
        assert effects[0].kind is EffectKind.ABSORBED
        again, effects = apply(after, Absorb(T0, "m2", 5, 4, 2, 0.9, "again"), DEFAULT)
        assert again == after
        assert effects[0].kind is EffectKind.IGNORED

    def test_an_absorb_planned_for_other_words_of_its_survivor_is_ignored(self) -> None:
        state = created(0.3)  # its words: content_hash("m1")
        planned = Absorb(T0, "m2", 5, 4, 2, 0.9, "dup", target_hash=content_hash("other words"))
        after, effects = apply(state, planned, DEFAULT)
        assert after == state
        assert [e.kind for e in effects] == [EffectKind.IGNORED]
        assert "rewritten" in effects[0].reason
        for hashed in (content_hash("m1"), None):  # as planned; planned before it was carried
            taken, effects = apply(state, dataclasses.replace(planned, target_hash=hashed), DEFAULT)
            assert taken is not None
            assert (taken.merged_from, effects[0].kind) == (("m2",), EffectKind.ABSORBED)

    def test_retire_and_purge(self) -> None:
        state = created(0.3)
        forgotten, _ = apply(state, Retire(T0 + hours(1), Lifecycle.FORGOTTEN, "user"), DEFAULT)
        assert forgotten is not None
        assert forgotten.state_changed_at == T0 + hours(1)
        twice, effects = apply(forgotten, Retire(T0 + hours(2), Lifecycle.FORGOTTEN, "u"), DEFAULT)
        assert twice == forgotten
        assert effects[0].kind is EffectKind.IGNORED
        purged, effects = apply(forgotten, Purge(T0 + hours(3), "window"), DEFAULT)
        assert purged is not None
        assert (purged.state, purged.purged) == (Lifecycle.DELETED, True)
        assert effects[0].kind is EffectKind.PURGED
        again, effects = apply(purged, Purge(T0 + hours(4), "window"), DEFAULT)
        assert again == purged
        assert effects[0].kind is EffectKind.IGNORED

    def test_active_memory_is_not_purged(self) -> None:
        state = created(0.3)
        after, effects = apply(state, Purge(T0, "window"), DEFAULT)
        assert after == state
        assert effects[0].kind is EffectKind.IGNORED

    def test_rewrite_revives_archived_and_recreates_deleted(self) -> None:
        archived = dataclasses.replace(created(0.3), state=Lifecycle.ARCHIVED)
        revived, effects = apply(archived, write(at=T0 + hours(5)), DEFAULT)
        assert revived is not None
        assert revived.state is Lifecycle.ACTIVE
        assert revived.last_access == T0 + hours(5)
        assert [e.kind for e in effects] == [EffectKind.FOLDED, EffectKind.REVIVED]
        deleted = dataclasses.replace(created(0.3), state=Lifecycle.DELETED, access_count=9)
        fresh, effects = apply(deleted, write(at=T0 + hours(5)), DEFAULT)
        assert fresh is not None
        assert (fresh.access_count, fresh.created_at) == (0, T0 + hours(5))
        assert effects[0].kind is EffectKind.CREATED
        # the count of writes goes on: readers order the memory's rows by it
        assert fresh.write_count == deleted.write_count + 1

    def test_a_backdated_rewrite_revives_without_moving_the_decay_clock_back(self) -> None:
        archived = dataclasses.replace(
            created(0.3), state=Lifecycle.ARCHIVED, last_access=T0 + hours(10)
        )
        revived, _ = apply(archived, write(at=T0 + hours(5)), DEFAULT)
        assert revived is not None
        assert revived.state is Lifecycle.ACTIVE
        assert revived.last_access == T0 + hours(10)

    def test_promote_only_one_tier_up(self) -> None:
        state = created(0.1)
        skipped, effects = apply(state, Promote(T0, Tier.SEMANTIC, "idle"), DEFAULT)
        assert skipped == state
        assert effects[0].kind is EffectKind.IGNORED
        up, _ = apply(state, Promote(T0 + hours(5), Tier.EPISODIC, "idle 5 h"), DEFAULT)
        assert up is not None
        assert up.tier is Tier.EPISODIC
        assert up.tau_hours == DEFAULT.decay.episodic_tau_hours

    def test_events_for_unknown_memories_are_ignored(self) -> None:
        for event in (Access(T0), Purge(T0, "x"), Promote(T0, Tier.EPISODIC, "x")):
            state, effects = apply(None, event, DEFAULT)
            assert state is None
            assert effects[0].kind is EffectKind.IGNORED


def test_importance_source_is_kept() -> None:
    assert created(0.3).importance_source is ImportanceSource.EXPLICIT


class TestFade:
    """The archive sweep's decision (SPEC section 7): decided again on the state it meets."""

    def test_only_the_long_horizon_archives(self) -> None:
        state = created(0.4, Tier.WORKING)  # tau 48 h: effective importance ~0 after days
        for days, archived in ((30, False), (89.9, False), (90, True)):
            at = T0 + hours(days * 24)
            after, effects = apply(state, Fade(at, "archive sweep"), DEFAULT)
            assert after is not None
            assert (after.state is Lifecycle.ARCHIVED) is archived, days
        assert effects[0].kind is EffectKind.ARCHIVED
        assert effects[0].reason.startswith("archive sweep: faded: effective importance")
        assert after is not None
        assert (after.state_changed_at, after.access_count, after.last_access) == (at, 0, T0)

    def test_important_memories_are_never_swept(self) -> None:
        state = created(0.5, Tier.WORKING)
        after, effects = apply(state, Fade(T0 + hours(5000), "archive sweep"), DEFAULT)
        assert (after, effects[0].kind) == (state, EffectKind.IGNORED)

    def test_an_access_in_between_keeps_it(self) -> None:
        state = created(0.4, Tier.WORKING)
        revived, _ = apply(state, Access(T0 + hours(2400), AccessKind.GET), DEFAULT)
        assert revived is not None
        # planned on a stale view; applied to the accessed state, it is not idle any more
        after, effects = apply(revived, Fade(T0 + hours(2401), "archive sweep"), DEFAULT)
        assert after == revived
        assert effects[0].kind is EffectKind.IGNORED

    def test_a_fresh_or_inactive_memory_is_left(self) -> None:
        state = created(0.5)
        after, effects = apply(state, Fade(T0 + hours(1), "sweep"), DEFAULT)
        assert (after, effects[0].kind) == (state, EffectKind.IGNORED)
        gone, _ = apply(state, Retire(T0, Lifecycle.FORGOTTEN, "user"), DEFAULT)
        again, effects = apply(gone, Fade(T0 + hours(5000), "sweep"), DEFAULT)
        assert again == gone
        assert effects[0].kind is EffectKind.IGNORED


@pytest.mark.parametrize(
    ("before", "stale"),
    [
        (Lifecycle.DELETED, Lifecycle.ARCHIVED),
        (Lifecycle.DELETED, Lifecycle.FORGOTTEN),
        (Lifecycle.FORGOTTEN, Lifecycle.ARCHIVED),
    ],
)
def test_a_stale_retire_never_moves_a_memory_back(before: Lifecycle, stale: Lifecycle) -> None:
    """A consolidation plan made before the user deleted a memory archives it as a summary's
    source after the delete: the memory stays deleted, and a later access does not revive it.
    """
    state, _ = apply(
        created(0.5), Retire(T0 + hours(1), before, "deleted through the API"), DEFAULT
    )
    if before is Lifecycle.DELETED:
        state, _ = apply(state, Purge(T0 + hours(1), "purged through the API"), DEFAULT)
    late, effects = apply(state, Retire(T0 + hours(1), stale, "compressed into X", "X"), DEFAULT)
    assert late == state
    assert [e.kind for e in effects] == [EffectKind.IGNORED]
    after, _ = apply(late, Access(T0 + hours(2)), DEFAULT)
    assert after is not None
    assert after.state is before


def test_retire_still_moves_forward_from_archived_and_forgotten() -> None:
    archived, _ = apply(created(0.5), Retire(T0 + hours(1), Lifecycle.ARCHIVED, "sweep"), DEFAULT)
    forgotten, _ = apply(archived, Retire(T0 + hours(2), Lifecycle.FORGOTTEN, "forget"), DEFAULT)
    deleted, effects = apply(forgotten, Retire(T0 + hours(3), Lifecycle.DELETED, "api"), DEFAULT)
    assert forgotten is not None
    assert deleted is not None
    assert (forgotten.state, deleted.state) == (Lifecycle.FORGOTTEN, Lifecycle.DELETED)
    assert [e.kind for e in effects] == [EffectKind.DELETED]


def test_a_survivor_takes_the_later_last_access_and_the_tags_of_what_it_absorbs() -> None:
    """A duplicate used yesterday merged into a copy idle for months left the survivor to fade,
    and a recall filtered by a tag only the duplicate had found neither.
    """
    survivor = dataclasses.replace(created(0.3, memory_id="a"), tags=("work",))
    used = T0 + hours(24 * 100)
    merged, _ = apply(
        survivor, Absorb(used, "b", 4, 2, 1, 0.6, "dup", used, ("work", "tea")), DEFAULT
    )
    assert merged is not None
    assert (merged.last_access, merged.tags) == (used, ("work", "tea"))
    older, _ = apply(survivor, Absorb(used, "c", 0, 0, 1, 0.1, "dup", T0 - hours(5)), DEFAULT)
    assert older is not None
    assert (older.last_access, older.tags) == (survivor.last_access, ("work",))


def test_a_survivor_full_of_tags_keeps_its_own_when_it_absorbs_more() -> None:
    """A survivor at ``MAX_TAGS`` merging a duplicate keeps its own tags (a filter by one of
    them still finds it); the duplicate's do not fit."""
    own = tuple(f"own{i}" for i in range(MAX_TAGS))
    survivor = dataclasses.replace(created(0.3, memory_id="a"), tags=own)
    merged, _ = apply(
        survivor, Absorb(T0 + hours(1), "b", 0, 0, 1, 0.5, "dup", None, ("dup-a",)), DEFAULT
    )
    assert merged is not None
    assert merged.tags == own


def test_a_late_rewrite_raising_the_tier_schedules_from_the_latest_access() -> None:
    """A rewrite dated before the memory's last access (it arrived late) rescheduled the
    review from its own time: next_review fell before last_access."""
    used, _ = apply(created(0.4), Access(T0 + hours(100)), DEFAULT)
    assert used is not None
    assert used.tier is Tier.WORKING
    late, _ = apply(used, write(importance=0.4, tier=Tier.SEMANTIC, at=T0 + hours(1)), DEFAULT)
    assert late is not None
    assert late.tier is Tier.SEMANTIC
    assert late.card.next_review is not None
    assert late.card.next_review > late.last_access == T0 + hours(100)


def test_a_rewrite_stating_a_higher_tier_moves_the_memory_up_never_down() -> None:
    first = created(0.4)
    assert first.tier is Tier.WORKING
    at = T0 + hours(1)
    semantic, effects = apply(first, write(importance=0.4, tier=Tier.SEMANTIC, at=at), DEFAULT)
    assert semantic is not None
    assert semantic.tier is Tier.SEMANTIC
    assert semantic.tau_hours == DEFAULT.decay.semantic_tau_hours
    assert semantic.card.next_review == at + hours(review_intervals_hours(0.4, DEFAULT.review)[0])
    assert [e.kind for e in effects] == [EffectKind.FOLDED, EffectKind.PROMOTED]
    working, effects = apply(semantic, write(importance=0.4, tier=Tier.WORKING, at=at), DEFAULT)
    assert working is not None
    assert (working.tier, working.tau_hours) == (Tier.SEMANTIC, semantic.tau_hours)
    assert [e.kind for e in effects] == [EffectKind.FOLDED]
