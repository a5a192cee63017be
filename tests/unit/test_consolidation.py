from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from memcore import (
    MAX_SUMMARY_SOURCES,
    Absorb,
    Access,
    AccessKind,
    Decision,
    DecisionKind,
    Effect,
    EffectKind,
    Event,
    Fade,
    Item,
    Lifecycle,
    MemoryState,
    Policy,
    Position,
    Purge,
    Restore,
    Retire,
    SessionMember,
    Strategy,
    Succeeds,
    Supersede,
    Tier,
    apply,
    merged_away,
    plan,
    reinstatements,
    session_end,
    session_end_time,
    summary_gone,
    summary_outdated,
    to_events,
    unkept_summary,
)
from memcore.consolidation import (
    claims_of,
    compression_clusters,
    extractive_summary,
    greedy_groups,
    merged_duplicate,
    pairwise_neighbours,
)
from memcore.ids import content_hash

from .helpers import T0, created, hours, write

POLICY = Policy()


def item(
    memory_id: str,
    vector: tuple[float, ...],
    created_h: float = 0.0,
    content: str | None = None,
    **kw: object,
) -> Item:
    at = T0 + hours(created_h)
    base: dict[str, object] = {
        "content_hash": content or memory_id,
        "vector": vector,
        "created_at": at,
        "last_access": at,
        "state_changed_at": at,
        "tier": Tier.SEMANTIC,
        "state": Lifecycle.ACTIVE,
        "importance": 0.5,
        "tau_hours": 1200.0,
    }
    base.update(kw)
    return Item(memory_id=memory_id, **base)  # type: ignore[arg-type]


def kinds(decisions: list[Decision]) -> list[DecisionKind]:
    return [d.kind for d in decisions]


def carry_out(
    states: dict[str, MemoryState], events: Sequence[tuple[str, Event]], policy: Policy = POLICY
) -> list[Effect]:
    """Apply ``events`` as the worker does, an absorb's source's retire included; every effect."""
    effects: list[Effect] = []
    for memory_id, event in events:
        new, made = apply(states[memory_id], event, policy)
        assert new is not None
        states[memory_id] = new
        effects.extend(made)
        away = merged_away(new, event, made[0]) if isinstance(event, Absorb) else None
        if away is not None:
            effects.extend(carry_out(states, [away], policy))
    return effects


def test_exact_dedup_keeps_the_oldest() -> None:
    items = [
        item("b", (1.0, 0.0), 2, "h", access_count=2),
        item("a", (0.0, 1.0), 1, "h", recall_count=1),
        item("c", (1.0, 1.0), 3, "h"),
    ]
    (decision,) = plan("t", items, T0 + hours(4), POLICY, [Strategy.EXACT_DEDUP])
    assert (decision.kind, decision.target, decision.sources) == (
        DecisionKind.MERGE,
        "a",
        ("b", "c"),
    )


def test_semantic_dedup_threshold() -> None:
    items = [item("old", (1.0, 0.0)), item("near", (1.0, 0.3), 1), item("far", (1.0, 0.4), 2)]
    # cos(near) = 0.958, cos(far) = 0.928
    (decision,) = plan("t", items, T0 + hours(5), POLICY, [Strategy.SEMANTIC_DEDUP])
    assert (decision.target, decision.sources) == ("old", ("near",))
    assert "0.95" in decision.reason


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("User is allergic to peanuts.", "User is not allergic to peanuts."),
        ("User is allergic to peanuts.", "User isn't allergic to peanuts anymore."),
        (
            "Bob's flight leaves at 9:15 from gate B12.",
            "Bob's flight leaves at 9:45 from gate B12.",
        ),
        ("The meeting is at 3pm.", "The meeting is at 3 am."),
        ("Rent is 1,200 a month.", "Rent is 1,250 a month."),
    ],
)
def test_a_near_duplicate_saying_another_number_or_a_denial_is_not_merged(
    older: str, newer: str
) -> None:
    """MiniLM puts these within the near-duplicate cosine (0.96-0.99): the newer one, a user's
    correction, was deleted into the older, and no recall found it again (rule zero)."""
    items = [
        item("old", (1.0, 0.0), 0, older, claims=claims_of(older)),
        item("new", (1.0, 0.01), 1, newer, claims=claims_of(newer)),
    ]
    assert plan("t", items, T0 + hours(5), POLICY, [Strategy.SEMANTIC_DEDUP]) == []
    (summary,) = plan("t", items, T0 + hours(5), POLICY, [Strategy.COMPRESS])
    assert summary.sources == ("old", "new")  # both sentences kept, in a summary


def test_a_near_duplicate_with_the_same_numbers_and_denials_is_merged() -> None:
    older, newer = "Bob's flight is NOT at 9:15 pm.", "bob's flight is not at 9:15pm!"
    assert claims_of(older) == claims_of(newer) == ("9:15pm", "not")
    items = [
        item("old", (1.0, 0.0), 0, older, claims=claims_of(older)),
        item("new", (1.0, 0.01), 1, newer, claims=claims_of(newer)),
    ]
    (merge,) = plan("t", items, T0 + hours(5), POLICY, [Strategy.SEMANTIC_DEDUP])
    assert (merge.target, merge.sources) == ("old", ("new",))


def test_the_same_words_with_another_context_are_not_merged() -> None:
    """Exact dedup merged on the content alone: the duplicate's context (another day's date,
    who spoke before) left recall with it, and a recall by those words found nothing."""
    items = [
        item("turn-17", (1.0, 0.0), 0, "ok", context_hash=content_hash("[8 May] dentist")),
        item("turn-90", (1.0, 0.0), 1, "ok", context_hash=content_hash("[9 June] holiday")),
        item("turn-91", (1.0, 0.0), 2, "ok", context_hash=content_hash("[9 June] holiday")),
    ]
    for strategy in (Strategy.EXACT_DEDUP, Strategy.SEMANTIC_DEDUP):
        (merge,) = plan("t", items, T0 + hours(5), POLICY, [strategy])
        assert (merge.target, merge.sources) == ("turn-90", ("turn-91",))


def test_a_cluster_whose_words_pass_a_summary_is_cut_into_summaries_that_hold_them_all() -> None:
    """A summary was cut at 1,000 characters while every source was archived into it: the
    sources past the cut survived only archived, outranked by the summary on their topic."""
    texts = [f"Day {i} we ate at restaurant number {100 + i} downtown." for i in range(40)]
    items = [
        item(f"t{i:02d}", (1.0, 0.001 * i), i, text, chars=len(text))
        for i, text in enumerate(texts)
    ]
    items.append(item("long", (1.0, 0.0), 50, "x" * 1500, chars=1500))
    decisions = plan("t", items, T0 + hours(60), POLICY, [Strategy.COMPRESS])
    assert len(decisions) > 1
    summarised = [source for d in decisions for source in d.sources]
    assert "long" not in summarised  # longer than a summary: left as it is
    by_id = {i.memory_id: text for i, text in zip(items, texts, strict=False)}
    for d in decisions:
        summary = extractive_summary([by_id[s] for s in d.sources])
        assert all(by_id[s] in summary for s in d.sources), d.sources
    assert (
        len(summarised)
        == len(set(summarised))
        >= len(texts) - POLICY.consolidation.min_cluster_size
    )


def test_greedy_groups_are_not_transitive() -> None:
    items = [item("a", (1.0, 0.0)), item("b", (1.0, 0.33), 1), item("c", (1.0, 0.66), 2)]
    groups = greedy_groups(items, pairwise_neighbours(items, 0.94))
    assert [[i.memory_id for i in g] for g in groups] == [["a", "b"], ["c"]]


def test_compression_clusters_and_stable_summary_ids() -> None:
    items = [item("a", (1.0, 0.0)), item("b", (1.0, 0.5), 1), item("z", (0.0, 1.0), 2)]
    first = plan("t", items, T0 + hours(5), POLICY, [Strategy.COMPRESS])
    again = plan("t", list(reversed(items)), T0 + hours(5), POLICY, [Strategy.COMPRESS])
    assert first == again
    (decision,) = first
    assert decision.kind is DecisionKind.SUMMARISE
    assert decision.sources == ("a", "b")
    assert decision.target.startswith("m-")


def test_dedup_consumes_before_compression() -> None:
    items = [item("a", (1.0, 0.0)), item("a2", (1.0, 0.01), 1), item("b", (1.0, 0.5), 2)]
    decisions = plan(
        "t", items, T0 + hours(5), POLICY, [Strategy.SEMANTIC_DEDUP, Strategy.COMPRESS]
    )
    assert kinds(decisions) == [DecisionKind.MERGE, DecisionKind.SUMMARISE]
    assert decisions[1].sources == ("a", "b")


def test_tier_consolidation() -> None:
    at = T0 + hours(10)
    items = [
        item("idle-working", (1.0, 0.0), tier=Tier.WORKING, last_access=T0 + hours(6)),
        item("busy-working", (0.0, 1.0), tier=Tier.WORKING, last_access=T0 + hours(6.5)),
        item("used-episodic", (1.0, -1.0), tier=Tier.EPISODIC, access_count=3),
        item("key-episodic", (-1.0, 1.0), tier=Tier.EPISODIC, importance=0.71),
        item("plain-episodic", (-1.0, 0.0), tier=Tier.EPISODIC, importance=0.7),
    ]
    decisions = plan("t", items, at, POLICY, [Strategy.TIERS])
    assert {(d.target, d.to_tier) for d in decisions} == {
        ("idle-working", Tier.EPISODIC),
        ("used-episodic", Tier.SEMANTIC),
        ("key-episodic", Tier.SEMANTIC),
    }


def test_a_session_end_moves_its_active_working_memories_to_episodic_once() -> None:
    """SPEC sections 5 and 7: working -> episodic when its session ends (it waited 4 h idle)."""
    at = T0 + hours(1)
    used = T0 + hours(0.5)
    members = [
        SessionMember("working", Tier.WORKING, Lifecycle.ACTIVE, used),
        SessionMember("episodic", Tier.EPISODIC, Lifecycle.ACTIVE, used),
        SessionMember("archived", Tier.WORKING, Lifecycle.ARCHIVED, used),
        SessionMember("deleted", Tier.WORKING, Lifecycle.DELETED, used),
        SessionMember("forgotten", Tier.WORKING, Lifecycle.FORGOTTEN, used),
        SessionMember("old-version", Tier.WORKING, Lifecycle.ACTIVE, used, superseded=True),
        SessionMember("used-after", Tier.WORKING, Lifecycle.ACTIVE, at + hours(0.1)),
    ]
    latest = at + hours(1)  # the latest event time the worker takes
    assert session_end_time(members, at, latest) == at + hours(0.1)  # its last turn, ahead
    assert session_end_time(members[:1], at, latest) == at
    assert session_end_time(members, at, at + hours(0.05)) == at + hours(0.05)
    promotions = session_end(members, "s-7", at, latest)
    assert [(m, e.to, e.at) for m, e in promotions] == [
        ("working", Tier.EPISODIC, at),
        ("used-after", Tier.EPISODIC, at + hours(0.1)),  # reviews after its last access
    ]
    _, (_, capped) = session_end(members, "s-7", at, at + hours(0.05))
    assert capped.at == at + hours(0.05)  # never past what the worker takes
    ((_, event), _) = promotions
    state = created(0.1, Tier.WORKING)
    promoted, effects = apply(state, event, POLICY)
    assert promoted is not None
    assert promoted.tier is Tier.EPISODIC
    assert promoted.tau_hours == POLICY.decay.tau_hours(Tier.EPISODIC)
    assert [e.kind for e in effects] == [EffectKind.PROMOTED]
    assert "session 's-7' ended" in effects[0].reason
    again, effects = apply(promoted, event, POLICY)  # the same end sent twice
    assert again == promoted
    assert [e.kind for e in effects] == [EffectKind.IGNORED]
    # an access applied before a promotion dated earlier: no review falls due before it
    used_at = T0 + hours(3)
    accessed, _ = apply(state, Access(used_at, AccessKind.RECALL), POLICY)
    assert accessed is not None
    assert accessed.tier is Tier.WORKING
    late, _ = apply(accessed, event, POLICY)  # dated T0 + 1 h
    assert late is not None
    assert late.tier is Tier.EPISODIC
    assert late.card.next_review is not None
    assert late.card.next_review > used_at


def test_archive_sweep_and_purge() -> None:
    at = T0 + timedelta(days=100)
    items = [
        item("faded", (1.0, 0.0), tier=Tier.WORKING, importance=0.4, tau_hours=48.0),
        item("fresh", (0.0, 1.0), importance=0.4, last_access=at),
        item("idle-60-days", (0.0, 2.0), importance=0.4, last_access=at - timedelta(days=60)),
        item("important", (0.0, 3.0), importance=0.5, tau_hours=48.0),
        item("gone", (1.0, 1.0), state=Lifecycle.FORGOTTEN),
        item("recently-gone", (1.0, 2.0), state=Lifecycle.DELETED, state_changed_at=at - hours(1)),
    ]
    decisions = plan("t", items, at, POLICY, [Strategy.ARCHIVE, Strategy.PURGE])
    assert [(d.kind, d.target) for d in decisions] == [
        (DecisionKind.ARCHIVE, "faded"),
        (DecisionKind.PURGE, "gone"),
    ]


def test_a_merged_duplicates_purge_erases_its_key_and_no_other_purge_does() -> None:
    """Once a merged duplicate's row is purged, no link leads an erasure of its survivor to it:
    its purge erases its key (:func:`memcore.consolidation.purge_erases`). A summary's source
    deleted since keeps its key (the summary's replay opens it), and so does a memory merged
    into a survivor no longer stored, and one the user deleted.
    """
    at = T0 + timedelta(days=100)

    def gone(memory_id: str, merged_into: str = "") -> Item:
        changed = T0 + hours(1)
        deleted = item(memory_id, (1.0, 0.0), state=Lifecycle.DELETED, state_changed_at=changed)
        return dataclasses.replace(deleted, merged_into=merged_into)

    items = {
        i.memory_id: i
        for i in (
            item("s1", (1.0, 0.0)),
            gone("dup", "s1"),
            item("sum", (0.0, 1.0), summary_of=("src", "other")),
            gone("src", "sum"),
            gone("dup-of-sum", "sum"),
            gone("orphan", "purged-long-ago"),
            gone("mine"),
            dataclasses.replace(item("late", (1.0, 0.0)), created_at=at + hours(1)),
            gone("dup-of-late", "late"),  # its survivor written after the plan's time
            item("older-summary", (0.0, 1.0), summary_of=("revived", "x")),
            gone("revived", "s1"),  # archived into it, back by an access, merged since
        )
    }
    decisions = plan("t", list(items.values()), at, POLICY, [Strategy.PURGE])
    erases = {}
    for decision in decisions:
        ((target, purge),) = to_events(decision, items, at)
        assert isinstance(purge, Purge)
        erases[target] = purge.erase
        assert ("key erased" in decision.reason) is purge.erase
    assert erases == {
        "dup": True,
        "src": False,
        "dup-of-sum": True,
        "orphan": False,
        "mine": False,
        "dup-of-late": True,
        "revived": False,  # the older summary's replay opens it by its key
    }
    state, effects = apply(
        dataclasses.replace(created(memory_id="dup"), state=Lifecycle.DELETED),
        Purge(at, "p", erase=True),
        POLICY,
    )
    assert state is not None
    assert state.purged
    assert [e.kind for e in effects] == [EffectKind.PURGED]  # the reducer decides as before


def test_merge_events_conserve_counters_through_the_reducer() -> None:
    same = content_hash("same")
    survivor = dataclasses.replace(
        created(0.3, memory_id="a"), access_count=1, recall_count=1, content_hash=same
    )
    dup = dataclasses.replace(
        created(0.6, memory_id="b"), access_count=4, recall_count=2, content_hash=same
    )
    states = {"a": survivor, "b": dup}
    items = {
        m: item(
            m,
            (1.0, 0.0),
            content=same,
            importance=s.importance,
            access_count=s.access_count,
            recall_count=s.recall_count,
            created_h=i,
            tier=s.tier,
        )
        for i, (m, s) in enumerate(states.items())
    }
    (decision,) = plan("t", list(items.values()), T0 + hours(5), POLICY, [Strategy.EXACT_DEDUP])
    at = T0 + hours(1)
    effects = carry_out(states, to_events(decision, items, at))
    # a (working, 0.3) takes b's tier (episodic, 0.6), then b leaves
    assert [e.kind for e in effects] == [
        EffectKind.ABSORBED,
        EffectKind.PROMOTED,
        EffectKind.DELETED,
    ]
    assert states["a"].tier is Tier.EPISODIC
    assert (states["a"].access_count, states["a"].recall_count) == (5, 3)
    assert states["a"].importance == 0.6
    assert states["b"].state is Lifecycle.DELETED
    assert states["b"].merged_into == "a"


def test_summary_sources_are_archived_not_deleted() -> None:
    items = {m: item(m, v, i) for i, (m, v) in enumerate([("a", (1.0, 0.0)), ("b", (1.0, 0.5))])}
    (decision,) = plan("t", list(items.values()), T0 + hours(5), POLICY, [Strategy.COMPRESS])
    events = to_events(decision, items, T0)
    assert [(m, e.to) for m, e in events] == [  # type: ignore[union-attr]
        ("a", Lifecycle.ARCHIVED),
        ("b", Lifecycle.ARCHIVED),
    ]


def test_sources_of_a_summary_not_kept_are_active_again_and_only_they() -> None:
    """A summary refused (it quoted a memory erased since the plan) or erased with a source:
    the other sources stayed archived into a memory that was no more, recalled at the archive
    penalty, and no later plan took them up again.
    """

    def archived(memory_id: str, into: str) -> MemoryState:
        why = Retire(T0 + hours(5), Lifecycle.ARCHIVED, f"compressed into summary {into}", into)
        state, (effect,) = apply(created(0.5, memory_id=memory_id), why, POLICY)
        assert state is not None
        assert effect.kind is EffectKind.ARCHIVED
        return state

    states = {m: archived(m, "S") for m in ("a", "b", "c")} | {"d": archived("d", "other")}
    carry_out(states, [("c", Retire(T0 + hours(6), Lifecycle.DELETED, "deleted"))])
    notices = unkept_summary("S", ["b", "c", "d"], T0 + hours(7), "erased")
    effects = carry_out(states, [(n.target, n.event) for n in notices])
    assert [e.kind for e in effects] == [EffectKind.REVIVED, EffectKind.IGNORED, EffectKind.IGNORED]
    assert (states["b"].state, states["b"].merged_into) == (Lifecycle.ACTIVE, None)
    assert states["b"].state_changed_at == T0 + hours(7)
    assert (states["c"].state, states["d"].state) == (Lifecycle.DELETED, Lifecycle.ARCHIVED)
    assert (states["a"].state, states["a"].merged_into) == (Lifecycle.ARCHIVED, "S")  # not told


def test_a_summary_that_leaves_recall_gives_its_sources_back_their_place() -> None:
    """Deleted (by its user, or erased with a memory it quoted), forgotten or purged: its
    sources stayed archived into a memory no longer recalled.
    """
    summary = dataclasses.replace(created(0.5, memory_id="S"), summary_of=("a", "b"))
    deleting = Retire(T0 + hours(2), Lifecycle.DELETED, "deleted through the API")
    deleted, (effect,) = apply(summary, deleting, POLICY)
    assert deleted is not None
    notices = summary_gone(summary, deleted, deleting, effect)
    assert [(n.target, n.event) for n in notices] == [
        ("a", Restore(T0 + hours(2), "S", "summary S is deleted")),
        ("b", Restore(T0 + hours(2), "S", "summary S is deleted")),
    ]
    purging = Purge(T0 + hours(3), "purged")
    purged, (effect,) = apply(deleted, purging, POLICY)
    assert purged is not None
    assert summary_gone(deleted, purged, purging, effect) == ()  # told once, as it left
    plain = created(0.5, memory_id="p")
    gone, (effect,) = apply(plain, deleting, POLICY)
    assert gone is not None
    assert summary_gone(plain, gone, deleting, effect) == ()  # no summary: nobody to tell


@pytest.mark.parametrize("superseded_first", [False, True])
def test_a_summary_whose_source_is_superseded_is_deleted_whichever_came_first(
    superseded_first: bool,
) -> None:
    """A source archived into a summary, then updated (a new version superseding it): the
    summary stated its old words as current beside the new version. The same when the update
    came before the plan's archiving was applied."""
    source = created(0.5, memory_id="p")
    archiving = Retire(T0 + hours(2), Lifecycle.ARCHIVED, "compressed into S", "S")
    superseding = Supersede(T0 + hours(3), "p2", "updated through the API by p2")
    first, second = (superseding, archiving) if superseded_first else (archiving, superseding)
    second = dataclasses.replace(second, position=Position("memory-writes/0", 7))
    middle, (effect,) = apply(source, first, POLICY)
    assert middle is not None
    assert summary_outdated(source, middle, first, effect) == ()  # not yet both
    after, (effect,) = apply(middle, second, POLICY)
    assert after is not None
    (notice,) = summary_outdated(middle, after, second, effect)
    assert notice.target == "S"
    assert isinstance(notice.event, Retire)
    assert notice.event.to is Lifecycle.DELETED
    again, (effect,) = apply(after, second, POLICY)  # redelivered: skipped, told again
    assert again is not None
    assert effect.kind is EffectKind.SKIPPED
    assert [n.target for n in summary_outdated(after, again, second, effect)] == ["S"]
    revival = Access(T0 + hours(4))  # brings it back from the archive: told already
    accessed, effects = apply(after, revival, POLICY)
    assert accessed is not None
    assert summary_outdated(after, accessed, revival, effects[0]) == ()


@pytest.mark.parametrize("how", ["access", "rewrite", "access, then the sweep"])
def test_a_source_brought_back_from_its_summary_then_superseded_still_deletes_it(
    how: str,
) -> None:
    """An archived source brought back (a recall hit, a rewrite) and superseded since: the
    summary still stated its old words, served as current beside the new version ("lives in
    Osaka" and "lives in Lisbon"), for the revival had dropped the link to it.
    """
    source = created(0.1, memory_id="p")  # the sweep's kind of memory
    archived, _ = apply(source, Retire(T0 + hours(2), Lifecycle.ARCHIVED, "into S", "S"), POLICY)
    assert archived is not None
    back = Access(T0 + hours(3)) if how != "rewrite" else write(memory_id="p", at=T0 + hours(3))
    revived, _ = apply(archived, back, POLICY)
    assert revived is not None
    assert revived.state is Lifecycle.ACTIVE
    if how == "access, then the sweep":
        revived, _ = apply(revived, Fade(T0 + hours(5000), "archive sweep"), POLICY)
        assert revived is not None
        assert (revived.state, revived.merged_into) == (Lifecycle.ARCHIVED, None)
    superseding = Supersede(T0 + hours(6000), "p2", "updated through the API by p2")
    after, (effect,) = apply(revived, superseding, POLICY)
    assert after is not None
    (notice,) = summary_outdated(revived, after, superseding, effect)
    assert (notice.target, notice.event) == (
        "S",
        Retire(T0 + hours(6000), Lifecycle.DELETED, notice.event.reason),
    )
    # once S is gone (its restore came) there is nothing to delete
    gone, _ = apply(revived, Restore(T0 + hours(5), "S", "summary S is deleted"), POLICY)
    assert gone is not None
    later, (effect,) = apply(gone, superseding, POLICY)
    assert later is not None
    assert summary_outdated(gone, later, superseding, effect) == ()


def test_a_summary_outdated_by_a_backdated_supersession_is_deleted_after_it_was_made() -> None:
    """A supersession dated before the archiving (a write loaded with its own time, a decision
    in flight while consolidation ran) deleted the summary, and so revived its other sources,
    before either was made: history ran backwards, and the purge's retention started early.
    """
    source = created(0.5, memory_id="p")
    archiving = Retire(T0 + hours(3), Lifecycle.ARCHIVED, "compressed into S", "S")
    archived, _ = apply(source, archiving, POLICY)
    assert archived is not None
    backdated = Supersede(T0 + hours(2), "p2", "a newer value of the same fact")
    after, (effect,) = apply(archived, backdated, POLICY)
    assert after is not None
    (notice,) = summary_outdated(archived, after, backdated, effect)
    assert notice.event.at == T0 + hours(3)  # not before the archiving
    # and so the restores the deleted summary sends its sources (summary_gone)
    summary = dataclasses.replace(
        created(0.5, memory_id="S"), summary_of=("p", "q"), state_changed_at=T0 + hours(3)
    )
    deleted, (effect,) = apply(summary, notice.event, POLICY)
    assert deleted is not None
    assert deleted.state_changed_at == T0 + hours(3)
    assert {n.event.at for n in summary_gone(summary, deleted, notice.event, effect)} == {
        T0 + hours(3)
    }


def test_a_source_in_two_summaries_superseded_deletes_both() -> None:
    """Archived into S, brought back by a recall hit, compressed again into S2: superseded, it
    deleted S2 alone, and S went on stating its old words as current.
    """
    source = created(0.5, memory_id="p")
    into_s, _ = apply(source, Retire(T0 + hours(1), Lifecycle.ARCHIVED, "into S", "S"), POLICY)
    assert into_s is not None
    back, _ = apply(into_s, Access(T0 + hours(2)), POLICY)
    assert back is not None
    into_s2, _ = apply(back, Retire(T0 + hours(3), Lifecycle.ARCHIVED, "into S2", "S2"), POLICY)
    assert into_s2 is not None
    assert into_s2.summarised_in == ("S", "S2")
    superseding = Supersede(T0 + hours(4), "p2", "updated through the API by p2")
    after, (effect,) = apply(into_s2, superseding, POLICY)
    assert after is not None
    assert [n.target for n in summary_outdated(into_s2, after, superseding, effect)] == [
        "S",
        "S2",
    ]
    # brought back and compressed into S3 since: S3 alone is told (S and S2 were)
    revived, _ = apply(after, Access(T0 + hours(5)), POLICY)
    assert revived is not None
    into_s3 = Retire(T0 + hours(6), Lifecycle.ARCHIVED, "into S3", "S3")
    later, (effect,) = apply(revived, into_s3, POLICY)
    assert later is not None
    assert [n.target for n in summary_outdated(revived, later, into_s3, effect)] == ["S3"]


def test_a_summary_merged_into_a_survivor_keeps_its_sources_archived() -> None:
    """Dedup merged a summary into an older one with the same words: its sources came back
    active (and, planned into the same summary id again, went round at every run).
    """
    summary = dataclasses.replace(created(0.5, memory_id="S2"), summary_of=("a", "b"))
    merging = Retire(T0 + hours(2), Lifecycle.DELETED, "merged into S1", "S1")
    merged, (effect,) = apply(summary, merging, POLICY)
    assert merged is not None
    assert merged.merged_into == "S1"
    assert summary_gone(summary, merged, merging, effect) == ()


def test_a_summary_forgotten_and_planned_again_is_brought_back() -> None:
    """The same cluster planned again names the same summary: its sources were archived into it
    again, and the write, met as "this summary exists already", left it forgotten.
    """
    written = dataclasses.replace(write(memory_id="S", content="a. b."), summary_of=("a", "b"))
    summary, _ = apply(None, written, POLICY)
    assert summary is not None
    forgotten, _ = apply(summary, Retire(T0 + hours(2), Lifecycle.FORGOTTEN, "forgotten"), POLICY)
    assert forgotten is not None
    again = dataclasses.replace(written, at=T0 + hours(3))
    back, effects = apply(forgotten, again, POLICY)
    assert back is not None
    assert back.state is Lifecycle.ACTIVE
    assert EffectKind.REVIVED in [e.kind for e in effects]
    kept, (effect,) = apply(back, dataclasses.replace(written, at=T0 + hours(4)), POLICY)
    assert (kept, effect.kind) == (back, EffectKind.IGNORED)  # active: written once


def test_a_source_an_access_brought_back_is_not_restored_again() -> None:
    """An access revives an archived memory; it kept ``merged_into``, so a later restore for
    that summary undid the archive sweep that had faded it since.
    """
    archiving = Retire(T0 + hours(1), Lifecycle.ARCHIVED, "compressed into summary S", "S")
    archived, _ = apply(created(0.5, memory_id="a"), archiving, POLICY)
    assert archived is not None
    revived, (effect, *_) = apply(archived, Access(T0 + hours(2), AccessKind.RECALL), POLICY)
    assert revived is not None
    assert (effect.kind, revived.state, revived.merged_into, revived.summarised_in) == (
        EffectKind.REVIVED,
        Lifecycle.ACTIVE,
        None,
        ("S",),  # S still holds its words
    )
    faded = dataclasses.replace(revived, state=Lifecycle.ARCHIVED)  # as the sweep leaves it
    kept, (effect,) = apply(faded, Restore(T0 + hours(3), "S", "summary S is deleted"), POLICY)
    assert (effect.kind, kept) == (
        EffectKind.IGNORED,
        dataclasses.replace(faded, summarised_in=()),
    )


def test_consolidating_twice_changes_nothing_the_second_time() -> None:
    policy = POLICY
    states = {m: created(0.5, Tier.SEMANTIC, memory_id=m) for m in ("a", "b", "c")}
    vectors = {"a": (1.0, 0.0), "b": (1.0, 0.01), "c": (0.0, 1.0)}

    def items_now() -> list[Item]:
        return [
            item(
                m,
                vectors[m],
                i,
                state=s.state,
                importance=s.importance,
                tier=s.tier,
                access_count=s.access_count,
                content_hash=s.content_hash,
            )
            for i, (m, s) in enumerate(sorted(states.items()))
        ]

    at: datetime = T0 + hours(1)
    first = plan("t", items_now(), at, policy)
    assert first
    by_id = {i.memory_id: i for i in items_now()}
    for decision in first:
        carry_out(states, to_events(decision, by_id, at), policy)
    assert plan("t", items_now(), at, policy) == []


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        (
            ["Alice likes tea. She hates coffee.", "Alice likes tea."],
            "Alice likes tea. She hates coffee.",
        ),
        (["One.", "Two.", "Three."], "One. Two."),
    ],
)
def test_extractive_summary(contents: list[str], expected: str) -> None:
    assert extractive_summary(contents, max_chars=len(expected)) == expected


def test_summary_takes_the_largest_importance() -> None:
    from memcore.consolidation import summarise

    summary = summarise(["A. B.", "B. C."], [0.2, 0.6])
    assert (summary.content, summary.importance) == ("A. B. C.", 0.6)
    tiered = summarise(["A.", "B.", "C."], [0.4] * 3, [Tier.EPISODIC, Tier.SEMANTIC, Tier.WORKING])
    assert tiered.tier is Tier.SEMANTIC  # the slowest-decaying of its sources'


def test_memories_of_different_scopes_are_never_merged() -> None:
    bot, other = ("bot", "run-1", ""), ("other-bot", "run-1", "")
    items = [
        item("a", (1.0, 0.0), 1, "h", scope=bot),
        item("b", (1.0, 0.0), 2, "h", scope=other),
        item("c", (1.0, 0.01), 3, "h", scope=bot),
        item("d", (1.0, 0.02), 4, "x", scope=other),
    ]
    exact = plan("t", items, T0 + hours(5), POLICY, [Strategy.EXACT_DEDUP])
    assert [(d.target, d.sources) for d in exact] == [("a", ("c",))]  # not b: another agent's
    groups = greedy_groups(items, pairwise_neighbours(items, 0.99))
    assert [[i.memory_id for i in g] for g in groups] == [["a", "c"], ["b", "d"]]


def test_memories_of_different_users_are_never_merged_or_summarised_together() -> None:
    ann, bob = ("bot", "run-1", "ann"), ("bot", "run-1", "bob")  # one agent and run, two users
    items = [
        item("a", (1.0, 0.0), 1, "h", scope=ann),
        item("b", (1.0, 0.0), 2, "h", scope=bob),
        item("c", (1.0, 0.0), 3, "h", scope=ann),
        item("d", (1.0, 0.001), 4, "y", scope=bob),
    ]
    exact = plan("t", items, T0 + hours(5), POLICY, [Strategy.EXACT_DEDUP])
    assert [(d.target, d.sources) for d in exact] == [("a", ("c",))]  # not b: another user's
    near = plan("t", items, T0 + hours(5), POLICY, [Strategy.SEMANTIC_DEDUP])
    assert sorted((d.target, d.sources) for d in near) == [("a", ("c",)), ("b", ("d",))]
    similar = [
        item("p", (1.0, 0.0), 1, "p", scope=ann),
        item("q", (1.0, 0.5), 2, "q", scope=bob),
        item("r", (1.0, 0.4), 3, "r", scope=ann),
    ]
    (summary,) = plan("t", similar, T0 + hours(5), POLICY, [Strategy.COMPRESS])
    assert (summary.kind, summary.sources) == (DecisionKind.SUMMARISE, ("p", "r"))  # not bob's q


def test_a_cluster_over_what_one_summary_holds_is_cut_into_summaries_of_at_most_that_many() -> None:
    # a summary's sources are an array of the serving store: one over its capacity is refused,
    # and its sources would be archived into a summary that never exists
    def clusters(n: int) -> list[Decision]:
        items = [item(f"m{i:05d}", (1.0, 0.0), i / 100) for i in range(n)]
        ids = {i.memory_id for i in items}
        everyone = {memory_id: ids - {memory_id} for memory_id in ids}  # one cluster
        return compression_clusters("t", items, everyone, 0.9, 3)

    n = 2 * MAX_SUMMARY_SOURCES + 50
    decisions = clusters(n)
    assert [len(d.sources) for d in decisions] == [MAX_SUMMARY_SOURCES, MAX_SUMMARY_SOURCES, 50]
    covered = [s for d in decisions for s in d.sources]
    assert covered == [f"m{i:05d}" for i in range(n)]  # oldest first, each once
    assert len({d.target for d in decisions}) == 3
    (only,) = clusters(MAX_SUMMARY_SOURCES + 2)
    assert len(only.sources) == MAX_SUMMARY_SOURCES  # a last part under 3 is left for later


def test_a_memory_stating_a_fact_is_never_compressed_so_a_later_statement_supersedes_it() -> None:
    """A summary stating "Alice lives in Osaka" stayed current after "Alice now lives in Lisbon"
    superseded its archived source: the rule reads one fact per memory, not a summary's.
    """
    items = [
        item("a", (1.0, 0.0), 0, fact=True),  # "Alice lives in Osaka."
        item("b", (1.0, 0.3), 1),  # "Alice loves the ramen shops there."
        item("c", (1.0, 0.4), 2),
    ]
    (decision,) = plan("t", items, T0 + hours(5), POLICY, [Strategy.COMPRESS])
    assert (decision.kind, decision.sources) == (DecisionKind.SUMMARISE, ("b", "c"))


def test_a_merge_moves_the_survivor_up_to_a_duplicates_tier_and_never_down() -> None:
    """The survivor kept its own tier: a fact written as semantic merged into an older episodic
    copy decayed as episodic (τ 240 h, not 1,200) and the sweep archived it after 100 idle days.
    """
    same = content_hash("same")
    states = {
        m: dataclasses.replace(created(0.4, tier, memory_id=m), content_hash=same)
        for m, tier in (("a", Tier.EPISODIC), ("b", Tier.SEMANTIC), ("c", Tier.WORKING))
    }
    items = {
        m: item(m, (1.0, 0.0), i, same, tier=s.tier, tau_hours=s.tau_hours, importance=0.4)
        for i, (m, s) in enumerate(states.items())
    }
    (decision,) = plan("t", list(items.values()), T0 + hours(5), POLICY, [Strategy.EXACT_DEDUP])
    assert (decision.target, decision.sources) == ("a", ("b", "c"))
    carry_out(states, to_events(decision, items, T0 + hours(1)))
    survivor = states["a"]
    assert (survivor.tier, survivor.tau_hours) == (
        Tier.SEMANTIC,
        POLICY.decay.tau_hours(Tier.SEMANTIC),
    )
    planned = plan(
        "t", list(items.values()), T0 + hours(5), POLICY, [Strategy.EXACT_DEDUP, Strategy.ARCHIVE]
    )
    assert kinds(planned) == [DecisionKind.MERGE]  # the plan sees the survivor semantic too
    later = T0 + timedelta(days=100)
    swept = plan("t", list(items.values()), later, POLICY, [Strategy.EXACT_DEDUP, Strategy.ARCHIVE])
    assert kinds(swept) == [DecisionKind.MERGE]


def test_a_plan_takes_no_memory_created_after_its_time() -> None:
    """A request read with lag, or ``mnemo consolidate --at`` a past time, merged and summarised
    memories written after its ``at``: a summary dated before its sources, which as-of recall at
    ``at`` returned though its words were not written yet (SPEC section 6).
    """
    items = [
        item("a", (1.0, 0.0), 0),
        item("b", (1.0, 0.3), 1),
        item("c", (1.0, 0.4), 3),  # cos 0.928 to a: in the cluster, once it exists
        item("a2", (1.0, 0.0), 4, "a"),  # a's words again
    ]
    strategies = [Strategy.EXACT_DEDUP, Strategy.COMPRESS]
    then = plan("t", items, T0 + hours(2), POLICY, strategies)
    assert [(d.kind, d.target, d.sources) for d in then] == [
        (DecisionKind.SUMMARISE, then[0].target, ("a", "b"))
    ]
    now = plan("t", items, T0 + hours(4), POLICY, strategies)  # created at ``at``: offered
    assert [(d.kind, d.sources) for d in now] == [
        (DecisionKind.MERGE, ("a2",)),
        (DecisionKind.SUMMARISE, ("a", "b", "c")),
    ]


def test_a_purge_leaves_a_memory_deleted_again_since_the_plan_inside_its_window() -> None:
    """The plan judged the window from a deletion 31 days old; the memory was written again and
    deleted a minute before the purge applied, and its document and row were dropped inside
    the window that keeps them (SPEC section 7).
    """
    window = hours(POLICY.consolidation.retention_window_hours)
    first, _ = apply(
        created(memory_id="m"), Retire(T0 + hours(1), Lifecycle.DELETED, "api"), POLICY
    )
    assert first is not None
    at = T0 + hours(1) + window + timedelta(days=1)
    items = {"m": item("m", (1.0, 0.0), state=Lifecycle.DELETED, state_changed_at=T0 + hours(1))}
    (decision,) = plan("t", list(items.values()), at, POLICY, [Strategy.PURGE])
    ((_, purge),) = to_events(decision, items, at)
    assert isinstance(purge, Purge)
    assert purge.state_changed_at == T0 + hours(1)
    states = {"m": first}
    assert [e.kind for e in carry_out(states, [("m", write("m", at=at))])] == [EffectKind.CREATED]
    again = Retire(at + timedelta(minutes=1), Lifecycle.DELETED, "api")
    carry_out(states, [("m", again)])
    assert [e.kind for e in carry_out(states, [("m", purge)])] == [EffectKind.IGNORED]
    assert (states["m"].state, states["m"].purged) == (Lifecycle.DELETED, False)
    legacy = dataclasses.replace(purge, state_changed_at=None)  # recorded before it carried it
    assert [e.kind for e in carry_out(dict(states), [("m", legacy)])] == [EffectKind.PURGED]
    untouched = {"m": first}
    assert [e.kind for e in carry_out(untouched, [("m", purge)])] == [EffectKind.PURGED]


# -- successors gone: the superseded version asks its successor to confirm --------------------


def test_a_version_whose_successor_left_recall_unrecorded_is_current_again_after_a_plan() -> None:
    """A supersession recorded before successors kept their predecessors (or whose ``succeeds``
    an older worker dead-lettered) sent no ``reinstate`` when the successor was deleted: the
    older version stayed superseded by a deleted memory, hidden from current recall for good.
    """
    n, _ = apply(created(memory_id="n"), Supersede(T0 + hours(1), "p", "newer value"), POLICY)
    p, _ = apply(
        created(memory_id="p", at=T0 + hours(1)),
        Retire(T0 + hours(2), Lifecycle.DELETED, "api"),
        POLICY,
    )
    assert n is not None
    assert p is not None
    assert p.predecessors == ()  # nothing recorded: its deletion reinstated nothing
    items = [
        item("n", (1.0, 0.0), superseded=True, superseded_by="p", valid_to=n.valid_to),
        item("p", (1.0, 0.0), 1.0, state=Lifecycle.DELETED),
    ]
    (decision,) = plan("t", items, T0 + hours(3), POLICY, [Strategy.SUCCESSORS])
    assert (decision.kind, decision.target) == (DecisionKind.RECHECK, "n")
    assert "deleted" in decision.reason
    ((target, event),) = to_events(decision, {i.memory_id: i for i in items}, T0 + hours(3))
    assert target == "p"
    assert isinstance(event, Succeeds)
    assert (event.predecessor, event.at) == ("n", n.valid_to)
    after, effects = apply(p, event, POLICY)
    assert after is not None
    (notice,) = reinstatements(p, after, event, effects[0])
    assert notice.target == "n"
    current, effects = apply(n, notice.event, POLICY)
    assert current is not None
    assert effects[0].kind is EffectKind.REINSTATED
    assert (current.valid_to, current.superseded_by) == (None, None)


def test_sources_archived_into_a_summary_not_stored_or_gone_are_restored_by_a_plan() -> None:
    """A plan whose summaries were never produced (a failure after its sources' archiving was
    acknowledged), or a summary gone before it told its sources: they stayed archived into it,
    recalled at the archive penalty, never planned again.
    """
    archived: dict[str, Any] = {"state": Lifecycle.ARCHIVED}
    items = [
        item("never", (1.0, 0.0), merged_into="S-missing", **archived),
        item("kept", (1.0, 0.0), merged_into="S-live", **archived),
        item("S-live", (0.0, 1.0), 1.0),
        item("forgot", (1.0, 0.0), merged_into="S-forgotten", **archived),
        item("S-forgotten", (0.0, 1.0), 1.0, state=Lifecycle.FORGOTTEN),
        item("duplicate", (1.0, 0.0), merged_into="S-merged", **archived),
        item("S-merged", (0.0, 1.0), 1.0, state=Lifecycle.DELETED, merged_into="S-live"),
        item("swept", (1.0, 0.0), **archived),  # archived by the sweep, into nothing
    ]
    decisions = plan("t", items, T0 + hours(3), POLICY, [Strategy.SUCCESSORS])
    assert kinds(decisions) == [DecisionKind.RESTORE] * 2
    assert sorted(d.target for d in decisions) == ["forgot", "never"]
    by_id = {i.memory_id: i for i in items}
    states = {
        m: dataclasses.replace(
            created(0.5, memory_id=m), state=Lifecycle.ARCHIVED, merged_into=by_id[m].merged_into
        )
        for m in ("forgot", "never")
    }
    events = [e for d in decisions for e in to_events(d, by_id, T0 + hours(3))]
    effects = carry_out(states, events)
    assert [e.kind for e in effects] == [EffectKind.REVIVED] * 2
    assert {m: (s.state, s.merged_into) for m, s in states.items()} == {
        "forgot": (Lifecycle.ACTIVE, None),
        "never": (Lifecycle.ACTIVE, None),
    }


def test_a_recheck_asks_only_for_successors_gone_or_missing_from_the_store() -> None:
    superseded: dict[str, Any] = {"superseded": True, "valid_to": T0 + hours(1)}
    items = [
        item("kept", (1.0, 0.0), superseded_by="live", **superseded),
        item("live", (0.0, 1.0), 1.0),
        item("missing", (1.0, 0.0), superseded_by="purged", **superseded),
        item("forgot", (1.0, 0.0), superseded_by="faded", **superseded),
        item("faded", (0.0, 1.0), 1.0, state=Lifecycle.FORGOTTEN),
        item("gone-too", (1.0, 0.0), superseded_by="purged", state=Lifecycle.DELETED, **superseded),
        item("archived", (1.0, 0.0), superseded_by="faded", state=Lifecycle.ARCHIVED, **superseded),
        item("current", (1.0, 0.0)),
    ]
    decisions = plan("t", items, T0 + hours(3), POLICY, [Strategy.SUCCESSORS])
    assert kinds(decisions) == [DecisionKind.RECHECK] * 3
    assert sorted(d.target for d in decisions) == ["archived", "forgot", "missing"]
    assert "not in the store" in next(d.reason for d in decisions if d.target == "missing")
    assert plan("t", items, T0 + hours(3), POLICY, [Strategy.PURGE]) == []


def test_a_merged_duplicate_is_told_from_a_summarys_source() -> None:
    assert merged_duplicate("a2", "deleted", "a1", ())  # deleted into a survivor
    assert not merged_duplicate("c1", "archived", "s1", ("c1",))  # a summary's source
    assert not merged_duplicate("c2", "deleted", "s1", ("c1", "c2"))  # one the user deleted
    assert not merged_duplicate("c3", "deleted", "s9", None)  # survivor unknown: left alone
    assert not merged_duplicate("m1", "deleted", "", ())  # not merged at all


def test_a_summary_is_never_merged_or_summarised_with_its_own_sources() -> None:
    """A source back in recall by an access (a GET, a tracked recall) sits beside the summary
    that holds its words at a near duplicate's cosine: the next run merged the summary into
    the source (the oldest), and the summary's other sources stayed archived into a memory
    gone; with every source back, it also summarised them and merged the summary away.
    """
    summary_of = ("a", "b", "c")
    sources = [
        item("a", (1.0, 0.0), 1, "ha"),
        item("b", (0.96, 0.28), 2, "hb"),
        item("c", (0.94, 0.34), 3, "hc"),
    ]
    summary = item("s", (0.99, 0.14), 4, "hs", summary_of=summary_of)
    at = T0 + hours(5)
    one_back = plan("t", [sources[0], summary], at, POLICY, [Strategy.SEMANTIC_DEDUP])
    assert one_back == []
    assert plan("t", [sources[0], summary], at, POLICY, [Strategy.COMPRESS]) == []
    all_back = plan(
        "t", [*sources, summary], at, POLICY, [Strategy.SEMANTIC_DEDUP, Strategy.COMPRESS]
    )
    assert all(summary.memory_id not in (d.target, *d.sources) for d in all_back), all_back
    same_words = item("s", (1.0, 0.0), 4, "ha", summary_of=("a", "x"))
    assert plan("t", [sources[0], same_words], at, POLICY, [Strategy.EXACT_DEDUP]) == []
    stranger = item("d", (0.99, 0.14), 4, "ha")  # the same words, no summary of it: merged
    (merged,) = plan("t", [sources[0], stranger], at, POLICY, [Strategy.EXACT_DEDUP])
    assert (merged.target, merged.sources) == ("a", ("d",))


def test_a_summary_and_its_source_do_not_join_one_group_through_a_third_memory() -> None:
    founder = item("f", (1.0, 0.0), 0, "hf")
    source = item("a", (0.99, 0.14), 1, "ha")
    summary = item("s", (0.98, 0.2), 2, "hs", summary_of=("a", "b"))
    (group, alone) = greedy_groups(
        [founder, source, summary], {"f": ["a", "s"], "a": ["f", "s"], "s": ["f", "a"]}
    )
    assert ([i.memory_id for i in group], [i.memory_id for i in alone]) == (["f", "a"], ["s"])


def test_a_summary_is_merged_as_a_near_duplicate_only_into_a_summary() -> None:
    """Merged into a memory of one text (a source of a summary it summarises, or any older
    near duplicate), a summary's words left recall and its sources stayed archived into it.
    """
    at = T0 + hours(9)
    dedup = [Strategy.SEMANTIC_DEDUP]
    of_summary = item("a", (1.0, 0.0), 1, "ha")  # a source of S1, back in recall
    s2 = item("s2", (0.99, 0.14), 5, "h2", summary_of=("s1", "x", "y"))
    assert plan("t", [of_summary, s2], at, POLICY, dedup) == []
    older = item("f", (1.0, 0.0), 0, "hf")
    assert plan("t", [older, s2], at, POLICY, dedup) == []
    s1 = item("s1", (1.0, 0.0), 2, "h1", summary_of=("p", "q"))
    (merged,) = plan(
        "t", [s1, item("s3", (0.99, 0.14), 5, "h3", summary_of=("r", "u"))], at, POLICY, dedup
    )
    assert (merged.target, merged.sources) == ("s1", ("s3",))  # into a summary: as before
    (folded,) = plan("t", [s1, item("g", (0.99, 0.14), 6, "hg")], at, POLICY, dedup)
    assert (folded.target, folded.sources) == ("s1", ("g",))  # a memory into a summary too


def test_sources_left_archived_into_a_summary_merged_into_one_of_them_are_restored() -> None:
    """What the merge of a summary into its own source left: the other sources archived into a
    summary gone, restored only by its purge (30 days by default)."""
    archived: dict[str, Any] = {"state": Lifecycle.ARCHIVED, "merged_into": "S"}
    gone = {"state": Lifecycle.DELETED}
    items = [
        item("a", (1.0, 0.0), 1, "ha"),
        item("b", (0.9, 0.4), 2, "hb", **archived),
        item("c", (0.9, 0.4), 3, "hc", **archived),
        item("S", (1.0, 0.1), 4, "hs", summary_of=("a", "b", "c"), merged_into="a", **gone),
        item("d", (0.0, 1.0), 5, "hd", state=Lifecycle.ARCHIVED, merged_into="T"),
        item("T", (0.0, 1.0), 6, "ht", summary_of=("d", "e"), merged_into="U", **gone),
        item("U", (0.0, 1.0), 7, "hu", summary_of=("v", "w")),  # holds T's words: d stays
    ]
    decisions = plan("t", items, T0 + hours(8), POLICY, [Strategy.SUCCESSORS])
    assert sorted((d.kind, d.target) for d in decisions) == [
        (DecisionKind.RESTORE, "b"),
        (DecisionKind.RESTORE, "c"),
    ]


def test_sources_of_a_summary_merged_along_a_chain_into_a_live_one_stay_archived() -> None:
    archived: dict[str, Any] = {"state": Lifecycle.ARCHIVED, "merged_into": "S1"}
    gone = {"state": Lifecycle.DELETED}
    items = [
        item("p1", (1.0, 0.0), 1, "h1", **archived),
        item("p2", (1.0, 0.0), 2, "h2", **archived),
        item("S1", (1.0, 0.0), 3, "hs1", summary_of=("p1", "p2"), merged_into="S2", **gone),
        item("S2", (1.0, 0.0), 4, "hs2", summary_of=("q1", "q2"), merged_into="S3", **gone),
        item("S3", (1.0, 0.0), 0, "hs3", summary_of=("r1", "r2")),  # holds them all: live
    ]
    assert plan("t", items, T0 + hours(8), POLICY, [Strategy.SUCCESSORS]) == []
    looped = [*items[:3], dataclasses.replace(items[3], merged_into="S1")]
    restored = plan("t", looped, T0 + hours(8), POLICY, [Strategy.SUCCESSORS])
    assert sorted(d.target for d in restored) == ["p1", "p2"]
