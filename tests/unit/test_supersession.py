"""The write-time supersession rule (SPEC section 6) and what the reducer does with it."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import deque
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore import (
    MAX_PREDECESSORS,
    MAX_RELINKS,
    Access,
    EffectKind,
    Event,
    Lifecycle,
    MemoryState,
    Notice,
    Policy,
    Position,
    Purge,
    Reinstate,
    Relink,
    Retire,
    Succeeds,
    Supersede,
    Write,
    apply,
    bypass,
    reassertion,
    reinstatements,
    relink,
    revival,
    succession,
    supersession,
    versioning,
)
from memcore.supersession import (
    MAX_WORD_CHARS,
    MAX_WORDS,
    Fact,
    SupersessionPolicy,
    Version,
    decide,
    detect,
    fact_of,
    llm_candidates,
    llm_prompt,
    newer_says_new,
)

from .helpers import T0, created, hours, write

RULE = SupersessionPolicy()


@pytest.mark.parametrize(
    ("text", "fact"),
    [
        ("Alice lives in Osaka.", Fact("alice", "lives in", "osaka")),
        ("Alice now lives in Lisbon", Fact("alice", "lives in", "lisbon")),
        ("Bob is working at Globex now", Fact("bob", "works at", "globex")),
        ("Alice's favourite food is ramen", Fact("alice's favourite food", "is", "ramen")),
        ("The wifi password is hunter2", Fact("the wifi password", "is", "hunter2")),
        (
            "Alice prefers Python for backend work",
            Fact("alice", "prefers for backend work", "python"),
        ),
        # the purpose is part of a preference only: a move for work is still a move
        ("Alice relocated to Lisbon for work", Fact("alice", "lives in", "lisbon")),
    ],
)
def test_plain_statements_parse(text: str, fact: Fact) -> None:
    assert fact_of(text) == fact


@pytest.mark.parametrize(
    "text",
    [
        "Alice is tired",  # a plain "X is Y" says too many things to compare
        "Where does Alice live?",
        "Alice lives in Osaka. She likes it there.",  # more than one statement
        "We talked for hours about the trip and all the places Alice lived in over the years ok",
        "lives in Osaka",  # no subject
        # a denial states no value
        "Alice no longer lives in Osaka",
        "Alice doesn't live in Osaka anymore",
        "Bob does not work at Acme",
        "Carol never drives a car",
        "Alice's car is not a Prius",  # a copula's denial is in its value
        "The wifi password is no longer hunter2",
        "Alice works at Globex. Congrats Alice.",  # two sentences
        "Alice drives a.",  # no car after the article (raised IndexError)
        "Bob drives an",
        "Alice drives a now.",
    ],
)
def test_other_text_is_left_alone(text: str) -> None:
    assert fact_of(text) is None


def test_a_newer_value_supersedes_the_older_either_way_round() -> None:
    old = Version("osaka", "Alice lives in Osaka.", T0, 0.8)
    new = Version("lisbon", "Alice now lives in Lisbon.", T0 + hours(24 * 90))
    (found,) = detect(new, [old], RULE)
    assert (found.older, found.newer, found.at) == ("osaka", "lisbon", new.at)
    # no word of either memory: the reason stays on the log and the audit after an erasure
    assert found.reason == "a newer value of the same fact ('lives in') (cosine 0.800)"
    # the older statement written after the newer one (a backfill) is superseded on arrival
    late_old = Version("osaka", "Alice lives in Osaka.", T0)
    (back,) = detect(late_old, [Version("lisbon", new.content, new.at, 0.8)], RULE)
    assert (back.older, back.newer, back.at) == ("osaka", "lisbon", new.at)


def test_a_denial_or_a_preference_for_something_else_supersedes_nothing() -> None:
    """ "no longer" read as filler made "Alice no longer lives in Osaka" state Osaka, superseding
    the current Lisbon; a preference for frontend work replaced the one for backend work (both
    hold). Cosines as MiniLM gives them (0.67, 0.61).
    """
    lisbon = Version("lisbon", "Alice lives in Lisbon.", T0, 0.669)
    denial = Version("denial", "Alice no longer lives in Osaka.", T0 + hours(24))
    assert detect(denial, [lisbon], RULE) == []
    backend = Version("backend", "Alice prefers Python for backend work.", T0, 0.609)
    frontend = Version("frontend", "Alice prefers React for frontend work.", T0 + hours(24))
    assert detect(frontend, [backend], RULE) == []
    changed = Version("go", "Alice prefers Go for backend work now.", T0 + hours(24))
    (found,) = detect(changed, [backend], RULE)
    assert (found.older, found.newer) == ("backend", "go")


def test_same_value_other_subject_weak_similarity_or_disabled_supersede_nothing() -> None:
    new = Version("n", "Alice lives in Lisbon", T0 + hours(5))
    neighbours = [
        Version("same", "Alice still lives in Lisbon.", T0, 0.9),
        Version("bob", "Bob lives in Osaka", T0, 0.9),
        Version("job", "Alice works at Acme", T0, 0.9),
        Version("far", "Alice lives in Osaka", T0, 0.2),
        Version("n", "Alice lives in Osaka", T0, 1.0),
        Version("simultaneous", "Alice lives in Osaka", T0 + hours(5), 0.9),
    ]
    assert detect(new, neighbours, RULE) == []
    off = SupersessionPolicy(enabled=False)
    assert detect(new, [Version("o", "Alice lives in Osaka", T0, 0.9)], off) == []


def test_only_a_memory_of_the_same_user_and_agent_is_superseded() -> None:
    """End user u2's "My mother now lives in Lisbon" superseded u1's "My mother lives in Osaka",
    and u1's recall (by user_id) then found neither; another session of the same user is the
    same scope (a fact restated later supersedes).
    """
    new = Version("lisbon", "My mother now lives in Lisbon", T0 + hours(24), scope=("bot", "u2"))
    others = [
        Version("u1", "My mother lives in Osaka", T0, 0.9, ("bot", "u1")),
        Version("agent", "My mother lives in Osaka", T0, 0.9, ("x", "u2")),
        Version("unscoped", "My mother lives in Osaka", T0, 0.9),
        Version("later", "My mother lives in Kyoto now", T0 + hours(48), 0.9, ("bot", "u1")),
    ]
    assert detect(new, others, RULE) == []
    assert llm_candidates(new, others, RULE) == []  # another user's words never reach a prompt
    assert decide(new, others, RULE, '{"replaces": [1, 2, 3]}') == []
    assert decide(new, others, RULE) == []
    mine = Version("mine", "My mother lives in Osaka", T0, 0.9, ("bot", "u2"))
    assert [(s.older, s.newer) for s in detect(new, [*others, mine], RULE)] == [("mine", "lisbon")]
    assert [s.older for s in decide(new, [*others, mine], RULE, '{"replaces": [1]}')] == ["mine"]
    unscoped = Version("n", "My mother now lives in Lisbon", T0 + hours(24))
    assert [s.older for s in detect(unscoped, others, RULE)] == ["unscoped"]


def test_the_reducer_records_the_earliest_supersession() -> None:
    policy = Policy()
    state = created(0.5, memory_id="osaka")
    later = T0 + hours(100)
    new, effects = apply(state, Supersede(later, "lisbon", "rule"), policy)
    assert new is not None
    assert (new.valid_to, new.superseded_by) == (later, "lisbon")
    assert effects[0].kind is EffectKind.SUPERSEDED
    again, effects = apply(new, Supersede(later + hours(1), "tokyo", "rule"), policy)
    assert (again, effects[0].kind) == (new, EffectKind.IGNORED)
    # an earlier version is put between them by relink; an LLM's decision takes the place
    chained, effects = apply(new, Supersede(T0 + hours(50), "porto", "rule"), policy)
    assert (chained, effects[0].kind) == (new, EffectKind.IGNORED)
    llm = Supersede(T0 + hours(50), "porto", "llm", chains=False)
    earlier, _ = apply(new, llm, policy)
    assert earlier is not None
    assert (earlier.valid_to, earlier.superseded_by) == (T0 + hours(50), "porto")
    before_it_existed, effects = apply(state, Supersede(T0 - hours(1), "x", "rule"), policy)
    assert (before_it_existed, effects[0].kind) == (state, EffectKind.IGNORED)


def settle(states: dict[str, MemoryState], decisions: list[tuple[str, Supersede]]) -> int:
    """Apply ``decisions`` (memory id, event) in order as the worker does, each followed by what
    :func:`relink` passes on; returns how many decisions were applied.
    """
    queue = deque(decisions)
    applied = 0
    while queue:
        target, event = queue.popleft()
        passed = relink(states[target], event)
        new, _ = apply(states[target], event, Policy())
        assert new is not None
        states[target] = new
        applied += 1
        queue.extend((p.target, p.event) for p in passed)
    return applied


@given(st.permutations([10, 20, 30, 40]), st.booleans())
def test_updates_that_raced_past_the_check_still_make_one_chain_in_time_order(
    hours_in: list[int], redelivered: bool
) -> None:
    # four updates of one memory, each checked while it was current: their supersedes reach it
    # in any order, and each version is then superseded by the next in time, one stays current
    states = {"old": created(0.5, memory_id="old")}
    states |= {f"v{h}": created(0.5, memory_id=f"v{h}", at=T0 + hours(h)) for h in hours_in}
    decisions = [("old", Supersede(T0 + hours(h), f"v{h}", "update")) for h in hours_in]
    settle(states, decisions + (decisions if redelivered else []))
    chain = ["old", *(f"v{h}" for h in sorted(hours_in))]
    for older, newer in itertools.pairwise(chain):
        assert (states[older].superseded_by, states[older].valid_to) == (
            newer,
            states[newer].created_at,
        )
    assert [k for k, s in states.items() if s.superseded_by is None] == [chain[-1]]


def test_a_later_update_is_chained_after_the_current_version_and_an_earlier_one_before() -> None:
    osaka = created(0.5, memory_id="osaka")
    superseded, _ = apply(osaka, Supersede(T0 + hours(10), "lisbon", "update"), Policy())
    assert superseded is not None
    (later,) = relink(superseded, Supersede(T0 + hours(20), "tokyo", "update"))
    assert (later.target, later.event.by, later.event.at) == ("lisbon", "tokyo", T0 + hours(20))
    porto = Supersede(T0 + hours(5), "porto", "update")
    kept, effects = apply(superseded, porto, Policy())  # the chain moves it, not this decision
    assert (kept, effects[0].kind) == (superseded, EffectKind.IGNORED)
    after, between = relink(superseded, porto)
    assert (after.target, after.event.by, after.event.at) == ("porto", "lisbon", T0 + hours(10))
    assert (between.target, between.event.by, between.event.at) == ("osaka", "porto", porto.at)
    assert between.event.replaces == "lisbon"
    assert after.event.hops == between.event.hops == later.event.hops == 1
    moved, effects = apply(superseded, between.event, Policy())
    assert moved is not None
    assert (moved.superseded_by, moved.valid_to, effects[0].kind) == (
        "porto",
        porto.at,
        EffectKind.SUPERSEDED,
    )
    assert relink(superseded, between.event) == ()  # the chain's own move
    assert "osaka" in later.event.reason  # ids only: what they raced on
    assert "porto" in between.event.reason


def test_nothing_is_passed_on_for_a_copy_a_current_memory_an_llm_decision_or_a_cycle() -> None:
    osaka = created(0.5, memory_id="osaka")
    assert relink(osaka, Supersede(T0 + hours(10), "lisbon", "update")) == ()  # current
    superseded, _ = apply(osaka, Supersede(T0 + hours(10), "lisbon", "update"), Policy())
    assert superseded is not None
    assert relink(superseded, Supersede(T0 + hours(10), "lisbon", "update")) == ()  # a copy
    assert relink(superseded, Supersede(T0 + hours(10), "osaka", "update")) == ()  # itself
    tired = Supersede(T0 + hours(20), "tokyo", "update", hops=MAX_RELINKS)
    assert relink(superseded, tired) == ()
    # the LLM may replace one of two facts a memory states: the earliest wins, nothing chains
    llm = Supersede(T0 + hours(5), "porto", "llm", chains=False)
    assert relink(superseded, llm) == ()
    earliest, _ = apply(superseded, llm, Policy())
    assert earliest is not None
    assert earliest.superseded_by == "porto"
    # a deleted version's successor is still the chain's next
    deleted, _ = apply(superseded, Retire(T0 + hours(11), Lifecycle.DELETED, "asked"), Policy())
    assert deleted is not None
    (passed,) = relink(deleted, Supersede(T0 + hours(20), "tokyo", "update"))
    assert passed.target == "lisbon"
    # two versions that supersede each other (one rewritten back): the chain ends all the same
    a, _ = apply(created(0.5, memory_id="a"), Supersede(T0 + hours(1), "b", "update"), Policy())
    b, _ = apply(created(0.5, memory_id="b"), Supersede(T0 + hours(1), "a", "update"), Policy())
    assert a is not None
    assert b is not None
    states = {"a": a, "b": b, "c": created(0.5, memory_id="c", at=T0 + hours(2))}
    applied = settle(states, [("a", Supersede(T0 + hours(2), "c", "update"))])
    assert applied == MAX_RELINKS + 1


def test_a_memory_stated_again_before_an_older_decision_arrives_stays_the_current_one() -> None:
    """b (t10) superseded a by the rule; a was written again (t20) before that decision reached
    it, and its own check superseded b. The late decision used to make them supersede each
    other: no version current.
    """
    a, _ = apply(created(0.5, memory_id="a"), write("a", at=T0 + hours(20)), Policy())
    assert a is not None
    assert a.stated_at == T0 + hours(20)
    b = created(0.5, memory_id="b", at=T0 + hours(10))
    states = {"a": a, "b": b}
    late = Supersede(T0 + hours(10), "b", "rule")
    settle(states, [("b", Supersede(T0 + hours(20), "a", "rule")), ("a", late)])
    assert (states["a"].superseded_by, states["b"].superseded_by) == (None, "a")
    # the same late decision with b's own check not sent yet: relink sends it
    states = {"a": a, "b": b}
    settle(states, [("a", late)])
    assert (states["a"].superseded_by, states["b"].superseded_by) == (None, "a")
    assert states["b"].valid_to == T0 + hours(20)


def race(seed: int) -> tuple[list[str], str]:
    """Racing updates of v0 (v1..vk, as the API sends them) and versions written again (as the
    worker reasserts them), in a seeded random order, each decision followed by what relink
    passes on: the current versions at the end, and the one stated last.
    """
    rng = random.Random(seed)
    times = rng.sample(range(1, 40), rng.randint(2, 4))
    states = {"v0": created(0.5, memory_id="v0")}
    last = {"v0": T0}
    steps: list[tuple[str, Supersede | datetime]] = []
    for i, h in enumerate(times, 1):
        states[f"v{i}"] = created(0.5, memory_id=f"v{i}", at=T0 + hours(h))
        last[f"v{i}"] = T0 + hours(h)
        steps.append(("v0", Supersede(T0 + hours(h), f"v{i}", "update")))
    for h in rng.sample(range(1, 60), rng.randint(0, 3)):
        again, at = f"v{rng.randrange(len(times) + 1)}", T0 + hours(h + 0.5)
        if at > states[again].created_at:
            steps.append((again, at))
            last[again] = max(last[again], at)
    rng.shuffle(steps)
    queue = deque(steps)
    while queue:
        target, what = queue.popleft()
        if isinstance(what, Supersede):
            queue.extend((p.target, p.event) for p in relink(states[target], what))
            new, _ = apply(states[target], what, Policy())
        else:
            new, _ = apply(states[target], write(target, at=what), Policy())
            assert new is not None
            passed = reassertion(new, what)
            if passed is not None:
                queue.append((passed.target, passed.event))
        assert new is not None
        states[target] = new
    return sorted(m for m, s in states.items() if s.superseded_by is None), max(
        last, key=last.__getitem__
    )


@pytest.mark.parametrize("seeds", [range(0, 400), range(2400, 2800)])
def test_racing_updates_and_rewrites_leave_the_version_stated_last_current(seeds: range) -> None:
    # seed 2534: a chain's move older than a rewrite made v0 -> v4 -> v3 -> v0, two current
    for seed in seeds:
        current, stated_last = race(seed)
        assert current == [stated_last], seed


@pytest.mark.parametrize("to", [Lifecycle.DELETED, Lifecycle.FORGOTTEN])
def test_a_deleted_or_forgotten_memory_is_not_superseded(to: Lifecycle) -> None:
    policy = Policy()
    retired, _ = apply(created(0.5, memory_id="osaka"), Retire(T0 + hours(1), to, "asked"), policy)
    assert retired is not None
    after, effects = apply(retired, Supersede(T0 + hours(2), "lisbon", "rule"), policy)
    assert (after, effects[0].kind) == (retired, EffectKind.IGNORED)
    assert to in effects[0].reason


def test_an_archived_memory_is_still_superseded() -> None:
    policy = Policy()
    archived, _ = apply(
        created(0.5, memory_id="osaka"), Retire(T0 + hours(1), Lifecycle.ARCHIVED, "sweep"), policy
    )
    assert archived is not None
    after, effects = apply(archived, Supersede(T0 + hours(2), "lisbon", "rule"), policy)
    assert after is not None
    assert after.superseded_by == "lisbon"
    assert effects[0].kind is EffectKind.SUPERSEDED


def test_a_rewrite_after_supersession_makes_it_current_again() -> None:
    policy = Policy()
    state = created(0.5, memory_id="m1")
    superseded, _ = apply(state, Supersede(T0 + hours(10), "m2", "rule"), policy)
    assert superseded is not None
    rewrite: Write = write(at=T0 + hours(20))
    again, effects = apply(superseded, rewrite, policy)
    assert again is not None
    assert (again.valid_to, again.superseded_by) == (None, None)
    assert EffectKind.REASSERTED in [e.kind for e in effects]


def test_an_update_marker_lets_any_name_verb_value_statement_supersede() -> None:
    old = Version("tennis", "Alice plays tennis.", T0, 0.8)
    new = Version("squash", "Alice plays squash now.", T0 + hours(24 * 40))
    (found,) = detect(new, [old], RULE)
    assert (found.older, found.newer) == ("tennis", "squash")
    assert found.reason.startswith("a newer value of the same fact (a statement of an update)")
    assert "squash" not in found.reason
    # without the marker two such statements may both be true: nothing is superseded
    also = Version("chess", "Alice plays chess.", T0 + hours(24 * 40))
    assert detect(also, [old], RULE) == []
    assert fact_of("Alice plays squash") is None
    assert fact_of("Alice went home now", generic=True) is None  # past tense: an event


PHONE_OLD = Version("iphone", "Alice has an iPhone 12.", T0, 0.8)
PHONE_NEW = Version("pixel", "Alice got a Pixel 8 phone.", T0 + hours(24))
OSAKA = Version("osaka", "Alice lives in Osaka.", T0, 0.9)
LISBON = Version("lisbon", "Alice lives in Lisbon now.", T0 + hours(24))


def test_llm_is_asked_about_older_close_neighbours_only() -> None:
    later = Version("later", "Alice has a Nokia.", T0 + hours(48), 0.9)
    far = Version("far", "Bob has an iPhone.", T0, 0.2)
    candidates = llm_candidates(PHONE_NEW, [PHONE_OLD, later, far, PHONE_NEW], RULE)
    assert candidates == [PHONE_OLD]
    prompt = llm_prompt(PHONE_NEW, candidates)
    assert prompt.endswith(
        "NEW: Alice got a Pixel 8 phone.\n\nOLDER:\n1. Alice has an iPhone 12.\n"
    )


def test_without_a_user_the_llm_is_asked_about_its_session_s_memories_only() -> None:
    """It cannot tell whether "I" of two sessions is one person: Bert's "I now use a Pixel"
    would have been asked about, and replaced, Anna's "I use an iPhone".
    """
    new = dataclasses.replace(PHONE_NEW, session="bert")
    others = [dataclasses.replace(PHONE_OLD, session=s) for s in ("anna", "bert")]
    assert llm_candidates(new, others[:1], RULE) == []
    assert llm_candidates(new, others[1:], RULE) == others[1:]
    user = ("", "ann")
    scoped = [dataclasses.replace(v, scope=user) for v in (new, others[0])]
    assert llm_candidates(scoped[0], scoped[1:], RULE) == scoped[1:]  # one user: any session


# cosines MiniLM gives these pairs (docs/quality.md, stop 61): the value's words are most of them
FAR_APART = [
    ("I live in Toronto.", "I live in Hanoi now.", 0.234),
    ("I work at Umbrella.", "I work at Cyberdyne now.", 0.244),
    ("Lives in Wellington", "Lives in Hanoi now", 0.231),
    ("We live in Wellington.", "We live in Hanoi now.", 0.193),
    ("My favourite food is tacos.", "My favourite food is kimchi now.", 0.488),
    ("I'm married to Ben.", "I'm married to Maria Lopez now.", 0.481),
]


@pytest.mark.parametrize(("older", "newer", "cosine"), FAR_APART)
def test_a_fact_its_speaker_states_supersedes_however_far_apart_its_values_put_it(
    older: str, newer: str, cosine: float
) -> None:
    """MiniLM puts two values of a fact the speaker states of themselves far apart: under
    ``min_cosine`` 0.5 "I live in Hanoi now." left "I live in Toronto." current, and ranked
    under it. The parse decides; the speaker's floor only keeps out texts with nothing in
    common. A named subject keeps ``min_cosine``; a tenant may raise the speaker's floor.
    """
    user = ("", "ann")
    new = Version("n", newer, T0 + hours(24), scope=user)
    old = Version("o", older, T0, cosine, user)
    (found,) = detect(new, [old], RULE)
    assert (found.older, found.newer) == ("o", "n")
    assert f"(cosine {cosine:.3f})" in found.reason
    strict = dataclasses.replace(RULE, speaker_min_cosine=0.5)
    assert detect(new, [old], strict) == []
    unrelated = dataclasses.replace(old, similarity=RULE.speaker_min_cosine - 1e-9)
    assert detect(new, [unrelated], RULE) == []
    alice = Version("o", "Alice lives in Toronto.", T0, cosine, user)
    assert (
        detect(dataclasses.replace(new, content="Alice lives in Hanoi now."), [alice], RULE) == []
    )
    unmarked = dataclasses.replace(new, content=newer.replace(" now", ""))
    assert detect(unmarked, [old], RULE) == []  # a missed update: an ordering, not a memory


@pytest.mark.parametrize(
    ("older", "newer", "cosine"),
    [
        ("I live in Toronto.", "I live in Excel.", 0.410),
        ("Lives in Toronto", "I live in Sweatpants.", 0.186),
        ("We live in Toronto.", "We live in Slack.", 0.453),
        ("Works at Google", "I work at Starbucks.", 0.273),
        ("Works at Accenture", "I work at Barclays.", 0.409),
        ("Lives in Hackney", "I live in London.", 0.472),
    ],
)
def test_a_far_value_of_a_speaker_s_fact_not_said_to_be_new_replaces_nothing(
    older: str, newer: str, cosine: float
) -> None:
    """A review of the speaker's floor: at its real cosine each newer statement would have
    hidden the older, though it names a habit, an app, a seat or a part of a city, and the
    older still holds. Below ``min_cosine`` only a value said to be new replaces.
    """
    user = ("", "ann")
    new = Version("n", newer, T0 + hours(24), scope=user)
    assert detect(new, [Version("o", older, T0, cosine, user)], RULE) == []


def test_the_llm_is_asked_about_a_far_fact_of_its_speaker_the_rule_reads() -> None:
    """With an LLM, a speaker's older value under ``min_cosine`` was never asked about, so the
    LLM's answer ("replaces nothing" of what it saw) kept it current.
    """
    new = Version("n", "I live in Hanoi now.", T0 + hours(24))
    old = Version("o", "I live in Toronto.", T0, 0.234)
    chatter = Version("c", "I went to the cinema.", T0, 0.234)
    assert llm_candidates(new, [old, chatter], RULE) == [old]
    assert llm_candidates(new, [old], dataclasses.replace(RULE, speaker_min_cosine=0.5)) == []


def test_the_llm_answer_decides_when_it_parses() -> None:
    answer = 'Sure: {"replaces": [1, 7, "1"], "reason": "new phone"}'
    (decided,) = decide(PHONE_NEW, [PHONE_OLD], RULE, answer)
    assert (decided.older, decided.newer, decided.at) == ("iphone", "pixel", PHONE_NEW.at)
    assert decided.reason == "llm: a newer value of the same fact"  # its words are not kept
    # the LLM may also overrule the rule: "nothing replaced" is an answer
    assert decide(LISBON, [OSAKA], RULE, '{"replaces": []}') == []


def test_with_an_llm_a_write_older_than_a_version_already_written_is_still_superseded() -> None:
    """The LLM is asked of older neighbours only: a back-dated write ("Alice lives in Osaka",
    dated before the current "Alice now lives in Lisbon") stayed current beside it."""
    osaka = Version("osaka", "Alice lives in Osaka.", T0)
    lisbon = Version("lisbon", "Alice now lives in Lisbon.", T0 + hours(24), 0.709)
    assert llm_candidates(osaka, [lisbon], RULE) == []
    (found,) = decide(osaka, [lisbon], RULE, '{"replaces": []}')
    assert (found.older, found.newer, found.at) == ("osaka", "lisbon", lisbon.at)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Alice works at Acme.", "Alice joined a book club."),  # no job
        ("Alice prefers Python.", "Alice prefers tea."),  # both hold
        ("Alice drives a Tesla.", "Alice drives to work."),  # where, not what
        ("Alice studies math.", "Alice studies French."),
        ("Alice works at Acme.", "Alice works at home."),
    ],
)
def test_statements_that_hold_beside_the_older_one_supersede_nothing(
    older: str, newer: str
) -> None:
    """Each of these hid a true memory at MiniLM's cosines (0.58-0.78, over the 0.5 default)."""
    assert detect(Version("n", newer, T0 + hours(24)), [Version("o", older, T0, 0.78)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Bob works at Home Depot.", "Bob now works at Target."),
        ("Bob works at AT&T.", "Bob now works at Verizon."),
        ("Carol works at In-N-Out.", "Carol now works at Chipotle."),
        ("Erin lives in Back Bay.", "Erin now lives in Cambridge."),
    ],
)
def test_a_value_that_opens_with_a_preposition_s_letters_is_still_a_value(
    older: str, newer: str
) -> None:
    new = Version("n", newer, T0 + hours(24))
    (found,) = detect(new, [Version("o", older, T0, 0.7)], RULE)
    assert (found.older, found.newer) == ("o", "n")


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("I work at Acme.", "I work at Globex now."),
        ("We work at Acme.", "We work at Globex now."),
        ("I prefer Python for backend work.", "I prefer Go for backend work now."),
        ("I drive a Toyota Corolla.", "I drive a Tesla Model 3 now."),
        ("I am married to Tom.", "I'm married to Ben now."),
        ("I\u2019m dating Sam.", "I\u2019m dating Alex now."),
        ("You're married to Tom.", "You're married to Ben now."),
        ("My favourite drive is the Pacific Coast Highway.", "My favourite drive is Route 66 now."),
        ("You live in Paris.", "You reside in Berlin now."),
        ("I live in Paris.", "Lives in Berlin now."),  # as mem0 writes the user's own facts
        ("Lives in Paris.", "Lives in Berlin."),
        ("Works at Acme.", "Works at Globex."),
        ("Prefers Python for backend work.", "Prefers Go for backend work now."),
    ],
)
def test_a_first_person_or_subjectless_replacement_supersedes(older: str, newer: str) -> None:
    """Only "I live in" was read of the first person: "I work at Acme" stayed current beside
    "I work at Globex now" and ranked first; mem0's facts ("Lives in Paris") have no subject.
    """
    new = Version("n", newer, T0 + hours(24))
    (found,) = detect(new, [Version("o", older, T0, 0.7)], RULE)
    assert (found.older, found.newer) == ("o", "n")


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("I'm married to Tom.", "I'm married to Ben now."),
        ("Lives in Paris.", "Lives in Berlin now."),
        ("My phone number is 555-1234.", "My new phone number is 555-9876."),
        ("We live in Paris.", "We live in Berlin now."),
        ("Mom lives in Osaka.", "Mom lives in Lisbon now."),  # one's own, as "my mother"
        ("Wife works at Acme.", "Wife works at Globex now."),
        ("Our address is 5 Oak Rd.", "Our new address is 9 Elm St."),
        ("The wifi password is hunter2.", "The wifi password is swordfish now."),
    ],
)
def test_a_fact_its_speaker_states_without_a_user_is_one_session_s(older: str, newer: str) -> None:
    """Without a ``user_id``, "I" of two sessions may be two people: Anna's "I'm married to
    Tom" was hidden by Bert's "I'm married to Ben now", and her session recalled nothing. Under
    one user, or in one session, it is a replacement; a named subject is one across sessions.
    """
    at = T0 + hours(24)

    def found(older_version: Version, newer_version: Version) -> bool:
        return bool(detect(newer_version, [older_version], RULE))

    assert not found(
        Version("o", older, T0, 0.7, session="anna"), Version("n", newer, at, session="bert")
    )
    assert found(
        Version("o", older, T0, 0.7, session="anna"), Version("n", newer, at, session="anna")
    )
    assert found(Version("o", older, T0, 0.7), Version("n", newer, at))  # one pool: no sessions
    user = ("", "ann")
    assert found(
        Version("o", older, T0, 0.7, user, "mon"),
        Version("n", newer, at, scope=user, session="tue"),
    )
    named = ("Alice lives in Paris.", "Alice lives in Berlin now.")
    assert found(
        Version("o", named[0], T0, 0.7, session="anna"),
        Version("n", named[1], at, session="bert"),
    )


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Backups work at Night.", "Backups work at Dawn."),  # things: "I", "we", "you" only
        ("Cats prefer Fish for dinner.", "Cats prefer Chicken for dinner now."),
        ("Trucks drive a Route.", "Trucks drive a Tesla now."),
        ("Docs reside in Notion.", "Docs reside in Confluence now."),
        ("Live in Paris.", "Live in Berlin now."),  # a bidding, not a statement
        ("lives in Paris", "lives in Berlin"),  # pieces of sentences
        ("I work at Acme.", "I work at Globex on Saturdays now."),  # a when: beside it
        ("I drive a Toyota.", "I drive a Kia."),  # one may drive several, unless said to replace
        ("I prefer Python for backend work.", "I prefer React for frontend work now."),
        ("I work at Acme.", "We work at Globex now."),  # another subject
        ("I'd live in Paris.", "I'd live in Rome now."),  # a wish
        ("I am married to Tom.", "I am not married to Tom now."),  # a denial
        # where one stays or sits for now, not one's home or employer
        ("I live in Paris.", "I'm living in the Hilton now."),
        ("I work at Acme.", "I'm working at WeWork now."),
        ("We work at Acme.", "We're working at Globex now."),
        ("I'm dating Sam.", "I'm dating Alex."),  # one may date several, unless said to replace
        ("I live in Paris.", "Is living in the Hilton now."),  # as mem0 writes "I'm living in"
        ("Works at Acme.", "Is working at WeWork now."),
        # in capitals or every word capitalised once "I'm" is read as "I am": case tells nothing
        ("I'M MARRIED TO TOM", "I'M MARRIED TO MY JOB NOW"),
        ("I'm Married To Tom", "I'm Married To My Job Now"),
    ],
)
def test_first_person_look_alikes_supersede_nothing(older: str, newer: str) -> None:
    new = Version("n", newer, T0 + hours(24))
    assert detect(new, [Version("o", older, T0, 0.7)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Carol works at Globex.", "Carol took a job at Soylent."),
        ("Dave works at Soylent.", "Dave started a new job at Initech."),
        ("Dave's favourite food is sushi.", "Dave's favorite food is pho."),
        ("Alice's favourite food is sushi.", "Alice's new favourite food is paella."),
        ("My phone number is 555-1234.", "My new phone number is 555-9876."),
        ("My boss is Ann.", "My new boss is Tom."),
        ("Alice lives in Osaka.", "Alice relocated to Lisbon for work."),
        ("Bob works at Acme.", "Bob now works at Bank of America."),
        ("Alice drives a Tesla.", "Alice drives a Kia Niro now."),
        ("Alice plays tennis.", "Alice plays squash these days instead."),
        ("Alice prefers Python for backend work.", "Alice prefers Go for backend work now."),
        ("Bob works at Acme.", "Bob works at Procter & Gamble now."),
        ("My job is at Acme.", "My new job is at Globex."),
        ("My password is hunter2.", "My new password is swordfish."),
        ("Mom lives in Rome.", "Mom lives in Paris now."),
    ],
)
def test_a_replacement_in_other_words_supersedes(older: str, newer: str) -> None:
    """Ways people state a replacement that the rule missed (bench.quality's ``--paraphrased``
    workload): a perfect tense, a new job, an American spelling, an attribute called new, and a
    marked update that names the value first.
    """
    new = Version("n", newer, T0 + hours(24))
    (found,) = detect(new, [Version("o", older, T0, 0.7)], RULE)
    assert (found.older, found.newer) == ("o", "n")


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Bob lives in Osaka.", "Bob settled in well."),
        ("Bob lives in Osaka.", "Bob settled in for the night."),
        # no value-first reading: hedges and qualifiers would be read as the value
        ("Alice's favourite food is sushi.", "Curry is Alice's favourite food."),
        ("Alice's favourite food is sushi.", "Curry is Alice's favourite food now."),
        ("My boss is Ann.", "Ann doubts Tom is my boss now."),
        ("My boss is Ann.", "Sometimes Tom is my boss now."),
        ("My favourite food is sushi.", "On weekends pizza is my favourite food now."),
        ("Alice's car is a Tesla.", "That is Alice's car now."),
        ("The capital is Lisbon.", "Porto is the capital now."),
        # found by a review of the first version of these readings (MiniLM cosines 0.50-0.79)
        ("My hobby is chess.", "My new hobby is pottery."),  # several of them at once
        ("Alice's friend is Sam.", "Alice's new friend is Tom."),
        ("Alice's friend lives in Rome.", "Alice's new friend lives in Paris."),
        ("The intern works at the York office.", "The new intern works at the Leeds office."),
        ("Sam is Alice's friend.", "Tom is Alice's friend now."),
        ("Milo is my cat.", "Luna is my cat now."),
        ("My phone is a Pixel.", "I think this is my phone now."),
        ("Alice lives in Osaka.", "Alice settled in her new job."),  # no place named
        ("Alice lives in Osaka.", "Alice settled in June."),
        ("Alice lives in Osaka.", "Alice settled in Engineering."),
        ("Alice lives in Osaka.", "Alice settled in Slack."),
        ("Alice lives in Osaka.", "Alice moved back to teaching."),
        ("Bob lives in Boston.", "Bob settled in as team lead."),
        ("My grandparents live in Florida.", "My grandparents settled in Ohio in 1950."),  # past
        ("My boss lives in London.", "My new boss lives in Paris."),  # another person
        ("My manager works at Acme.", "My new manager works at Globex."),
        ("My boss is Ann.", "Ann thinks Tom is my boss now."),  # someone's report or guess
        ("My boss is Ann.", "Maybe Tom is my boss now."),
        ("My favourite food is sushi.", "Nothing is my favourite food now."),
        ("Bob works at Globex.", "Bob was hired by Acme in 2019."),
        ("Bob works at Acme.", "Bob was hired by Acme in 2019."),
        ("Bob works at Globex.", "Bob took a job at the cafe for the summer."),  # a side job
        ("Bob works at Globex.", "Bob took a job at a bar on weekends."),
        ("Alice works at Acme.", "Alice got hired by a client for a side project."),
        ("Alice works at Acme.", "Alice took a job at Globex but turned it down."),
        ("Alice works at Acme.", "Alice took a job at a cafe over the summer."),
        ("Alice works at Acme.", "Alice took a job at Globex years ago."),
        ("Alice works at Acme.", "Alice took a job at Globex in the 90s."),
        ("Alice works at Acme.", "Alice got hired by a client."),  # a gig
        ("Alice works at Acme.", "Alice got hired by the Smiths as a nanny."),
        ("Alice works at Acme.", "Alice got hired by Globex, though she turned it down."),
        ("My job is at Acme.", "My new job is at Globex but I haven't started yet."),
        # a job taken or a "new" attribute is read in a plain statement alone
        ("Alice works at Acme.", "Alice took a job at Globex and left after a year."),
        ("Alice works at Acme.", "Alice took a job at a cafe, for the summer."),
        ("Alice works at Acme.", "Alice started a new job at Globex, starting in March."),
        ("Alice works at Acme.", "Alice took a job at a bar in college."),
        ("My address is 1 Elm St.", "My new address is 5 Oak Rd from March."),
        ("My job is at Acme.", "My new job is at Globex, starting in June."),
        ("My boss is Ann.", "My new boss is going to be Tom."),
        ("My manager is Ann.", "My new manager is Tom starting Monday."),
        ("Alice lives in Osaka.", "Alice has relocated to Lisbon before."),
        ("Bob's neighbour is Ann.", "Bob's neighbor is Tom."),  # one has several
    ],
)
def test_words_that_only_look_like_a_replacement_supersede_nothing(older: str, newer: str) -> None:
    new = Version("n", newer, T0 + hours(24))
    assert detect(new, [Version("o", older, T0, 0.7)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        # a job taken, with a tail that says when, how long, how sure or who says
        ("Alice works at Acme.", "Alice took a job at a cafe part-time."),
        ("Alice works at Acme.", "Alice took a job at Globex then quit."),
        ("Alice works at Acme.", "Alice took a job at Globex out of college."),
        ("Alice works at Acme.", "Alice took a job at Globex (for the summer)."),
        ("Alice works at Acme.", "Alice took a job at Globex—for the summer."),
        ("Alice works at Acme.", "Alice took a job at Globex temporarily."),
        ("Alice works at Acme.", "Alice took a job at Globex briefly."),
        ("Alice works at Acme.", "Alice took a job at Globex I think."),
        ("Alice works at Acme.", "Alice took a job at Globex apparently."),
        ("Alice works at Acme.", "Alice took a job at Globex decades back."),
        ("Bob works at Acme.", "Bob started a job at noon."),
        ("Alice works at Acme.", "Alice took a job at Globex previously."),
        ("Alice works at Acme.", "Alice took a job at a bar weekends."),
        ("Alice works at Acme.", "Alice took a job at Globex & quit."),
        ("Alice works at Acme.", "Alice took a job at Globex Bob says."),
        ("Alice works at Acme.", "Alice started a job at Globex tomorrow."),
        ("Alice works at Acme.", "Alice took a job at Globex part time."),
        ("Alice works at Acme.", "Alice took a job at a bar nights."),
        ("Alice works at Acme.", "Alice got a new job at Globex supposedly."),
        ("Alice works at Acme.", "Alice took a job at Globex 3 years back."),
        # an attribute called new, with a tail, a second email, someone else's
        ("My boss is Ann.", "My new boss is Tom probably."),
        ("My email is ann@home.com.", "My new email is ann@acme.com."),
        ("Her boss is Ann.", "Her new boss is Tom."),
        ("My phone number is 555-1234.", "My new phone number is 555-9876 tomorrow."),
        ("My job is at Acme.", "My new job is at Globex soonish."),
        ("My address is 1 Elm St.", "My new address is 5 Oak Rd eventually."),
        ("My boss is Ann.", "My new boss is Tom (from March)."),
        ("Alice's manager is Ann.", "Alice's new manager is Tom maybe."),
        ("My job is nursing.", "My new job is part-time."),
        # the phrases of 7613fda's rule, with a tail (read so since then)
        ("Bob lives in Berlin.", "Bob moved to Paris in 2024."),
        ("Bob works at Acme.", "Bob works at Globex now but misses Acme."),
        ("Alice works at Acme.", "Alice works at Globex too."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon and Osaka."),
        ("Alice works at Acme.", "Alice works at Globex as well."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon during the summer."),
        ("Alice works at Acme.", "Alice works at a bar on weekends."),
        ("Alice works at Acme.", "Alice got a job at a cafe for the summer."),
        ("Alice works at Acme.", "Alice started working at a bar on weekends."),
        ("Alice lives in Osaka.", "Alice has moved to Lisbon before."),
        ("Alice lives in Osaka.", "Alice moved to Lisbon as a child."),
        ("Alice works at Acme.", "Alice works at Globex, I think."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon, Bob said."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon if she gets the visa."),
        ("Alice works at Acme.", "Alice works at night."),
        ("Alice lives in Osaka.", "Alice moved to a new flat in Osaka."),
        ("Alice works at Acme.", "Alice works at Globex part-time."),
        ("Alice lives in Osaka.", "Alice moved to Lisbon for a semester."),
        ("Alice works at Acme.", "Alice started working at Globex in 2010."),
        ("Alice works at Acme.", "Alice works at Globex, apparently."),
        ("Alice lives in Osaka.", "Alice moved to the marketing team."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon according to Bob."),
        # a subject that may be another person each time
        ("My friend lives in Rome.", "My friend lives in Paris."),
        ("A friend of mine lives in Rome.", "A friend of mine lives in Paris."),
        ("One of my friends works at Acme.", "One of my friends works at Globex."),
        ("My sister lives in Osaka.", "My sister lives in Lisbon."),
        ("She lives in Osaka.", "She lives in Lisbon."),
        ("He works at Acme.", "He works at Globex."),
        ("My friends live in Osaka.", "My friends live in Lisbon."),
        ("Someone on my team lives in Rome.", "Someone on my team lives in Paris."),
        ("Her favourite food is sushi.", "Her favorite food is pho."),
        ("A colleague works at Acme.", "A colleague works at Globex."),
        # X is Y of what one has several of, or a description
        ("My hobby is chess.", "My hobby is pottery."),
        ("Alice's friend is Sam.", "Alice's friend is Tom."),
        ("Bob's neighbour is Ann.", "Bob's neighbour is Tom."),
        ("My cat is Milo.", "My cat is Luna."),
        ("My boss is Ann.", "My boss is strict."),
        ("Alice's car is a Tesla.", "Alice's car is red."),
        ("My parents are in Ohio.", "My parents are retired."),
        ("My job is at Acme.", "My job is stressful."),
        ("Alice's car is a Tesla.", "Alice's car is definitely not a Prius."),
        ("My favourite food is sushi.", "My favourite food is certainly not pizza."),
        ("My kids are Sam and Max.", "My kids are at school."),
        ("My favourite food is sushi.", "My favourite food is pizza, I think."),
        # one more of what one gathers, or for a while
        ("Alice speaks French.", "Alice speaks Spanish now too."),
        ("Alice knows Python.", "Alice knows Rust now."),
        ("Alice uses Vim.", "Alice uses Slack now."),
        ("Alice owns a Tesla.", "Alice owns a boat now."),
        ("Alice speaks French.", "Alice speaks Spanish now as well."),
        ("Alice studies math.", "Alice studies French now too."),
        ("Alice drives a Tesla.", "Alice currently drives a rental while it is repaired."),
        ("Alice plays chess.", "Alice plays tennis these days as well."),
        # a denial, a condition, a dream, a part of the old value
        ("Alice lives in Osaka.", "Alice lives in Lisbon no more."),
        ("If Alice moved to Paris she'd be happy.", "If Alice moved to Rome she'd be happy."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon in my dream."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon haha no"),
        ("Alice works at Acme.", "Alice works at Acme's Lisbon office."),
        # a second review: capitals that tell nothing
        ("Alice lives in Osaka.", "ALICE LIVES IN LISBON DURING THE SUMMER"),
        ("Alice works at Acme.", "ALICE WORKS AT GLOBEX PART-TIME"),
        ("Alice lives in Osaka.", "Alice Lives In Lisbon In The Summer"),
        ("Alice works at Acme.", "Alice Works At Globex Part-Time"),
        ("Alice lives in Osaka.", "Alice moved to Lisbon Last Year"),
        ("Alice works at Acme.", "ALICE WORKS AT GLOBEX TOO"),
        # a day, a month or a year
        ("Alice works at Acme.", "Alice works at Globex Saturdays."),
        ("Alice works at Acme.", "Alice works at Globex Mondays."),
        ("Alice works at Acme.", "Alice works at Globex Mon-Wed."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon June-August."),
        ("Alice lives in Osaka.", "Alice moved to Lisbon March 2019."),
        ("Alice lives in Osaka.", "Alice moved to Lisbon 2019."),
        ("Alice works at Acme.", "Alice works at Globex Christmas."),
        ("Alice lives in Lisbon.", "Alice lives in Porto Mon-Fri."),
        ("Alice works at Acme.", "Alice works at Globex Sundays."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Oct-Apr."),
        ("Alice works at Acme.", "Alice took a job at Globex Saturdays."),
        ("Alice works at Acme.", "Alice works at Globex 2010-2012."),
        # a number of hours, days or times; a time of day
        ("Alice works at Acme.", "Alice works at Globex 20h/week."),
        ("Alice works at Acme.", "Alice works at Globex 50%."),
        ("Alice works at Acme.", "Alice works at Globex 3x/week."),
        ("Alice works at Acme.", "Alice works at Globex 2 days a week."),
        ("Alice lives in Osaka.", "Alice moved to Lisbon 3 times."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon 6 months a year."),
        ("Alice works at Acme.", "Alice works at Globex 0.5 FTE."),
        ("Alice works at Acme.", "Alice works at 9.30."),
        ("Alice works at Acme.", "Alice works at 9.30am."),
        ("Alice works at Acme.", "Alice works at 9ish."),
        ("Alice works at Acme.", "Alice works at eight."),
        ("Alice works at Acme.", "Alice works at lunchtime."),
        ("Alice works at Acme.", "Alice works at midday."),
        ("Alice works at Acme.", "Alice works at half 8."),
        # an abbreviation, a bracket, an attribution, an emoji
        ("Alice works at Acme.", "Alice works at Globex PT."),
        ("Alice works at Acme.", "Alice works at Globex (Part-Time)."),
        ("Alice works at Acme.", "Alice works at Globex (PT)."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon JK."),
        ("Alice works at Acme.", "Alice works at Globex TBD."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon (Unconfirmed)."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon —Bob"),
        ("Alice works at Acme.", "Alice works at Globex IIRC."),
        ("Alice works at Acme.", "Alice works at Globex AFAIK."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon (Maybe)."),
        ("Alice works at Acme.", "Alice works at Globex 🎉"),
        ("Alice lives in Osaka.", "Alice moved to Lisbon 🤞"),
        # the older value restated beside another
        ("Alice lives in Osaka.", "Alice lives in Lisbon & Osaka."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon/Osaka."),
        ("Alice works at Acme.", "Alice works at Globex & Acme."),
        ("Alice works at Acme.", "Alice works at Acme/Globex."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon + Osaka."),
        # no name: a kind of place or employer, a pronoun
        ("Alice lives in Osaka.", "Alice lives in a flat."),
        ("Alice lives in Osaka.", "Alice lives in an apartment."),
        ("Alice lives in Osaka.", "Alice lives in the suburbs."),
        ("Alice lives in Osaka.", "Alice moved to a flat."),
        ("Alice lives in Osaka.", "Alice moved to the suburbs."),
        ("Alice lives in Osaka.", "Alice lives in fear."),
        ("Alice lives in Osaka.", "Alice lives in a dorm."),
        ("Alice lives in Osaka.", "Alice lives in a house."),
        ("Alice works at Acme.", "Alice works at the office."),
        ("Alice works at Acme.", "Alice works at HQ."),
        ("Alice works at Acme.", "Alice works at a startup."),
        ("Alice works at Acme.", "Alice works at a bank."),
        ("Alice works at Acme.", "Alice works for herself."),
        ("Alice works at Acme.", "Alice works for free."),
        ("Alice works at Acme.", "Alice works for a startup."),
        ("Alice works at Acme.", "Alice works at Acme HQ."),
        ("Alice works at Acme.", "Alice works for them."),
        ("Alice is dating Tom.", "Alice is dating someone."),
        ("Alice is dating Tom.", "Alice is dating him."),
        ("Alice is married to Tom.", "Alice is married to him."),
        ("Alice is dating Tom.", "Alice is dating again."),
        ("Alice works at Acme.", "Alice works for someone."),
        ("Alice lives in Osaka.", "Alice lives in the city."),
        ("Alice works at Acme.", "Alice works at Christmas."),
        ("Alice works at Acme.", "Alice works at the hospital."),
        ("Alice works at Acme.", "Alice works at Acme Inc."),
        # X is Y: where, not who; the (no one's); more of the same
        ("My boss is Ann.", "My boss is in Berlin."),
        ("My boss is Ann.", "My boss is in Tokyo."),
        ("My manager is Ann.", "My manager is in HR."),
        ("My job is at Acme.", "My job is in Lisbon."),
        ("My job is at Acme.", "My job is in IT."),
        ("My address is 1 Elm St.", "My address is in Lisbon."),
        ("My password is hunter2.", "My password is in Bitwarden."),
        ("The password is hunter2.", "The password is swordfish."),
        ("The address is 1 Elm St.", "The address is 5 Oak Rd."),
        ("My boss is Ann.", "My boss is Tom's friend."),
        ("My boss is Ann.", "My boss is Ann Smith."),
        ("My manager is Ann.", "My manager is at Microsoft now."),
        ("The number is 555-1234.", "The number is 555-9876."),
        ("My boss is Ann.", "My boss is with Tom."),
        ("My job is at Acme.", "My job is in Marketing."),
        ("My username is alice99.", "My username is on Reddit."),
        ("The manager is Tom.", "The manager is Ann."),
        ("My boss is Ann.", "My boss is at HQ."),
        # a relation one has several of
        ("My grandma lives in Rome.", "My grandma lives in Paris."),
        ("My ex lives in Rome.", "My ex lives in Paris."),
        ("My client works at Acme.", "My client works at Globex."),
        ("My stepbrother lives in Rome.", "My stepbrother lives in Paris."),
        ("My grandson lives in Rome.", "My grandson lives in Paris."),
        ("My housemate works at Acme.", "My housemate works at Globex."),
        ("My nephew lives in Rome.", "My nephew lives in Paris."),
        ("My student lives in Rome.", "My student lives in Paris."),
        ("My niece works at Acme.", "My niece works at Globex."),
        ("My grandpa lives in Rome.", "My grandpa lives in Paris."),
        ("My boyfriend's sister works at Acme.", "My boyfriend's sister works at Globex."),
        ("The intern lives in Rome.", "The intern lives in Paris."),
        ("My teammate lives in Rome.", "My teammate lives in Paris."),
        ("My patient lives in Rome.", "My patient lives in Paris."),
        # a verb of what one has several of, said to be an update
        ("Alice lives in Osaka.", "Alice lives in \u014csaka."),  # the same value, accented
        ("Alice lives in Osaka.", "Alice lives in Lisbon \u0130nstead."),  # "İ" lower-cases to two
        ("Alice loves Python.", "Alice loves Rust now."),
        ("Alice likes jazz.", "Alice likes rock now."),
        ("Alice teaches math.", "Alice teaches physics now."),
        ("Alice follows Bob.", "Alice follows Tom now."),
        ("Alice mentors Bob.", "Alice mentors Tom now."),
        ("Alice watches Netflix.", "Alice watches Hulu now."),
        ("Alice reads Dune.", "Alice reads Emma now."),
        ("Alice enjoys hiking.", "Alice enjoys climbing now."),
        ("Alice eats fish.", "Alice eats meat now."),
        ("Alice learns Spanish.", "Alice learns Italian now."),
        ("Alice writes Python.", "Alice writes Rust now."),
        ("Alice manages Bob.", "Alice manages Tom now."),
        ("Alice needs a car.", "Alice needs a bike now."),
        ("Alice wants a dog.", "Alice wants a cat now."),
        # a third review: an older statement that says more than a value
        ("My boss is strict.", "My boss is Tom."),
        ("My job is boring.", "My job is at Globex."),
        ("The wifi password is on the fridge.", "The wifi password is hunter2."),
        ("My password is in Bitwarden.", "My password is Hunter2."),
        ("My manager is in HR.", "My manager is Sam."),
        ("Alice's boss is really nice.", "Alice's boss is Tom."),
        ("My phone number is on the card.", "My phone number is 555-9876."),
        ("My address is the same as Bob's.", "My address is 5 Oak Rd."),
        ("My boss is on holiday.", "My boss is Tom."),
        ("Alice's favourite food is anything spicy.", "Alice's favourite food is sushi."),
        ("My job title is a mouthful.", "My job title is Senior Engineer."),
        ("My boss is Tom's wife.", "My boss is Tom."),
        # an older side job, a second value, a while
        ("Alice works at a cafe on weekends.", "Alice works at Globex."),
        ("Alice works at a cafe for the summer.", "Alice works at Globex."),
        ("Alice works at a bar too.", "Alice works at Globex."),
        ("Alice works at Acme and Globex.", "Alice works at Globex."),
        ("Alice lives in Osaka and Kyoto.", "Alice lives in Kyoto."),
        ("Alice lives in Osaka during the week.", "Alice lives in Kyoto."),
        ("Alice works at Acme, and at Globex on Fridays.", "Alice works at Globex."),
        ("Alice lives in Osaka part of the year.", "Alice lives in Lisbon."),
        ("Alice works at a bakery in the mornings.", "Alice works at Globex."),
        ("Alice works at Acme as a consultant.", "Alice works at Globex."),
        ("Alice works at Acme since 2019.", "Alice works at Globex."),
        ("Alice is based in London.", "Alice lives in Brighton."),
        ("Alice lives in Osaka with her husband.", "Alice lives in Lisbon."),
        ("Alice works at Acme in the evenings.", "Alice works at Globex."),
        # the older value restated with fewer words
        ("Alice is married to Tom Smith.", "Alice is married to Tom."),
        ("Alice lives in New York City.", "Alice lives in New York."),
        ("Alice lives in Osaka in a small flat.", "Alice lives in Osaka."),
        ("Alice works at Google Cloud.", "Alice works at Google."),
        ("Alice's boss is Tom Hanks.", "Alice's boss is Tom."),
        ("Alice's phone number is +1 555-9876.", "Alice's phone number is 555-9876."),
        ("Alice drives a Tesla Model 3.", "Alice drives a Tesla now."),
        ("Alice's job title is Senior Engineer.", "Alice's job title is Engineer."),
        ("Alice lives in Lisbon Portugal.", "Alice lives in Lisbon."),
        ("Alice works at Acme Labs.", "Alice works at Acme."),
        ("Alice lives in New York.", "Alice lives in York."),
        ("Alice works at the Acme Corporation.", "Alice works at Acme."),
        # a value of another kind, said to be an update
        ("Alice prefers Python.", "Alice prefers tea now."),
        ("Alice prefers Python.", "Alice prefers dogs now."),
        ("Alice prefers to work from home.", "Alice prefers Python now."),
        ("Alice drives a Tesla.", "Alice drives Uber now."),
        ("Alice drives a Tesla.", "Alice drives a bus now."),
        ("Alice studies at Oxford.", "Alice studies Law now."),
        ("Alice studies in the evenings.", "Alice studies Law now."),
        ("Alice plays in a band.", "Alice plays tennis now."),
        ("Alice attends Harvard.", "Alice attends church now."),
        ("Alice supports Arsenal.", "Alice supports Ukraine now."),
        ("Alice drives carefully.", "Alice drives a van now."),
        ("Alice plays tennis on Sundays.", "Alice plays squash now."),
        ("Alice studies law.", "Alice studies French now."),
        ("Alice drives a Tesla.", "Alice drives the kids now."),
        ("Alice plays the piano.", "Alice plays golf now."),
        ("Alice attends yoga classes.", "Alice attends Harvard now."),
        ("Alice drives a Tesla.", "Alice drives a truck for work now."),
        ("Alice studies at night.", "Alice studies Law now."),
        # a capitalised how, how often or how sure
        ("Alice works at Acme.", "Alice works at Globex Remotely."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Temporarily."),
        ("Alice works at Acme.", "Alice works at Globex Sometimes."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon ATM."),
        ("Alice works at Acme.", "Alice works at Globex I Think."),
        ("Alice works at Acme.", "Alice works at Globex TEMP."),
        ("Alice works at Acme.", "Alice works at Globex Occasionally."),
        ("Alice works at Acme.", "Alice works at Globex While Studying."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon During Term."),
        ("Alice works at Acme.", "Alice works at Globex Freelance."),
        ("Alice works at Acme.", "Alice works at Globex Mostly."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Sometimes."),
        ("Alice's favourite food is Definitely Not Sushi.", "Alice's favourite food is pho."),
        ("Alice started working at a cafe for the summer.", "Alice works at Globex."),
        # a fourth review: moved to a team, works for a person, a job, a title, a phone, plays
        ("Alice moved to Lisbon.", "Alice moved to Marketing."),
        ("Alice lives in Lisbon.", "Alice moved to Marketing."),
        ("Alice moved to Berlin.", "Alice moved to Google."),
        ("Alice lives in Berlin.", "Alice moved to Engineering."),
        ("Alice moved to Lisbon.", "Alice moved to Linux."),
        ("Alice moved to Osaka.", "Alice moved to Sales."),
        ("Alice lives in Lisbon.", "Alice has moved to Product."),
        ("Alice moved to Lisbon.", "Alice moved to Android."),
        ("Alice moved to Lisbon.", "Alice moved to Slack."),
        ("Alice moved to Paris.", "Alice moved to Accounting."),
        ("Alice relocated to Austin.", "Alice moved to Finance."),
        ("Alice moved to London.", "Alice moved to Team Phoenix."),
        ("Alice works for Acme.", "Alice works for Tom Smith."),
        ("Alice works at Acme.", "Alice works for Tom."),
        ("Alice works for Acme.", "Alice now works for Tom."),
        ("Alice works for Acme.", "Alice works for Mr Patel."),
        ("Alice works at Globex.", "Alice works for the Government."),
        ("Alice works for Acme.", "Alice works for Marketing."),
        ("Alice works at Acme.", "Alice works for Sales."),
        ("Alice works for Google.", "Alice works for Sundar Pichai."),
        ("My job is at Globex.", "My job is Product Manager."),
        ("My job is Product Manager.", "My job is at Globex."),
        ("My job is at Acme.", "My job is Nurse."),
        ("Alice's title is Dr.", "Alice's title is Head of Sales."),
        ("Alice's title is Head of Sales.", "Alice's title is Dr."),
        ("My title is Professor.", "My title is Dean of Students."),
        ("Alice's title is Dr.", "Alice's title is VP."),
        ("My job is at Acme.", "My job is Teaching."),
        ("My phone is 555-0199.", "My phone is a Pixel 8."),
        ("My phone is a Pixel 8.", "My phone is 555-0199."),
        ("Alice's phone is 555-0199.", "Alice's phone is a Samsung Galaxy."),
        ("My phone is 555-0199.", "My phone is Samsung."),
        ("My username is alice99.", "My username is AliceK."),
        ("My username is alice99.", "My new username is al_k."),
        ("My favourite foods are sushi.", "My favourite foods are ramen."),
        ("My favourite bands are Radiohead.", "My favourite bands are Coldplay."),
        ("Alice plays guitar.", "Alice plays bass now."),
        ("Alice plays chess.", "Alice plays Minecraft now."),
        ("Alice plays guitar.", "Alice plays piano now."),
        ("Bob plays Hamlet.", "Bob plays Macbeth now."),
        ("Alice plays tennis.", "Alice plays Fortnite now."),
        ("Alice plays violin.", "Alice plays tennis now."),
        ("Alice plays tennis.", "Alice plays Wordle these days."),
        ("Alice drives a Tesla.", "Alice drives an Uber now."),
        ("Alice drives a Tesla.", "Alice drives a Lyft now."),
        ("My phone is 555-0199.", "My new phone is a Pixel 8."),
        ("My phone is a Pixel 8.", "My phone is 07700 900123."),
        ("My phone number is 555-1234.", "My phone number is 5551234."),
        # a fifth review: a subject said with a modal or a how often; a second value for work;
        # an employer of record, a car driven for now; a role one may change; bare number
        ("Alice used to live in Osaka.", "Alice used to live in Lisbon."),
        ("I used to live in Osaka.", "I used to live in Berlin."),
        ("Alice would like to live in Paris.", "Alice would like to live in Rome."),
        ("I'd love to live in Tokyo.", "I'd love to live in Lisbon."),
        ("Alice could live in Lisbon.", "Alice could live in Osaka."),
        ("Alice wants to live in Paris.", "Alice wants to live in Rome."),
        ("Alice sometimes works at Acme.", "Alice sometimes works at Globex."),
        ("Alice also works at Starbucks.", "Alice also works at Uber."),
        ("Alice occasionally works at Acme.", "Alice occasionally works at Globex."),
        ("We used to live in Osaka.", "We used to live in Lisbon."),
        ("Alice sometimes lives in Lisbon.", "Alice sometimes lives in Porto."),
        ("My phone number is 555-1234.", "My phone number is 555-9876 for work."),
        ("My password is hunter2.", "My password is swordfish for work."),
        ("Alice drives a Tesla.", "Alice drives a Ford Transit for work now."),
        ("My number is 555-1234.", "My number is 555-9876 for work."),
        ("Alice lives in Osaka.", "Alice lives in Tokyo for work."),
        ("My address is 5 Oak Rd.", "My address is 12 High St for work."),
        ("Alice works at Google.", "Alice is employed by Accenture."),
        ("Alice works at Acme.", "Alice is employed by Randstad."),
        ("Alice works at Acme.", "Alice is employed by the Smiths."),
        ("Alice works at Acme.", "Alice is employed by Tom Smith."),
        ("Alice drives a Tesla.", "Alice is driving a Toyota Corolla now."),
        ("Alice drives a Tesla.", "Alice is driving a Hertz Corolla now."),
        ("My doctor works at Mercy Hospital.", "My doctor works at Kaiser Permanente."),
        ("My teacher lives in Rome.", "My teacher lives in Paris."),
        ("My lawyer works at Baker McKenzie.", "My lawyer works at Clifford Chance."),
        ("My godfather lives in Rome.", "My godfather lives in Paris."),
        ("My in-laws live in Ohio.", "My in-laws live in Texas."),
        ("My coach lives in Rome.", "My coach lives in Paris."),
        ("My therapist works at Kaiser.", "My therapist works at Headway."),
        ("Alice's number is 23.", "Alice's number is 555-0199."),
        ("The office number is 12B.", "The office number is 555-0199."),
        ("Alice often works at Acme.", "Alice often works at Globex."),
        ("Alice might live in Lisbon.", "Alice might live in Porto."),
        ("Alice will live in Lisbon.", "Alice will live in Porto."),
        ("Alice drives a Tesla.", "Alice drives a."),
        ("Alice drives a.", "Alice drives a Kia now."),
        # a sixth review: here, this, it; nobody; a word that restates or hides the value; a
        # subject that is not a name, I, we or one's mother, father or spouse
        ("My favourite dish here is the ramen.", "My favourite dish here is the pho."),
        ("My favourite drink here is the mojito.", "My favourite drink here is the negroni."),
        ("My favourite restaurant there is Nobu.", "My favourite restaurant there is Zuma."),
        ("Alice prefers Python for this project.", "Alice prefers Go for this project."),
        ("Alice prefers Slack for this.", "Alice prefers email for this."),
        ("Alice prefers Tom for it.", "Alice prefers Sam for it."),
        ("Nobody here works at Acme.", "Nobody here works at Globex."),
        ("Nobody's favourite food is liver.", "Nobody's favourite food is tofu."),
        ("Nobody lives in Pripyat.", "Nobody lives in Atlantis."),
        ("Anybody's favourite colour is beige.", "Anybody's favourite colour is grey."),
        ("My buddy lives in Leeds.", "My buddy lives in York."),
        ("My buddy works at Acme.", "My buddy works at Globex."),
        ("My pal works at Acme.", "My pal works at Globex."),
        ("My bro lives in Leeds.", "My bro lives in York."),
        ("My sis lives in Leeds.", "My sis lives in York."),
        ("My bestie works at Acme.", "My bestie works at Globex."),
        ("My granny lives in Leeds.", "My granny lives in York."),
        ("My nan lives in Leeds.", "My nan lives in York."),
        ("My nana lives in Leeds.", "My nana lives in York."),
        ("My professor works at MIT.", "My professor works at Harvard."),
        ("My assistant lives in Leeds.", "My assistant lives in York."),
        ("My nanny lives in Leeds.", "My nanny lives in York."),
        ("My boy works at Acme.", "My boy works at Globex."),
        ("My kiddo lives in Leeds.", "My kiddo lives in York."),
        ("My stepkid lives in Leeds.", "My stepkid lives in York."),
        ("My stepchild lives in Leeds.", "My stepchild lives in York."),
        ("My lodger works at Acme.", "My lodger works at Globex."),
        ("My contractor lives in Leeds.", "My contractor lives in York."),
        ("My favourite colour is blue.", "My favourite colour is still the same."),
        ("My password is hunter2.", "My password is still the same."),
        ("My password is hunter2.", "My password is unchanged."),
        ("My favourite food is sushi.", "My favourite food is unchanged."),
        ("My password is hunter2.", "My password is a secret."),
        ("My password is hunter2.", "My password is private."),
        ("My favourite band is Queen.", "My favourite band is a secret."),
        ("The wifi password is hunter2.", "The wifi password is the same."),
        ("My favourite food is sushi.", "My favourite food is the same."),
        ("My favourite food is sushi.", "My favourite food is obvious."),
        ("My favourite food is sushi.", "My favourite food is mine."),
        ("My password is hunter2.", "My password is the usual."),
        ("My password is hunter2.", "My password is the default."),
        ("My password is hunter2.", "My password is whatever."),
        ("Alice's favourite food is sushi.", "Alice's favourite food is mine."),
        ("My old boss lives in Leeds.", "My old boss lives in York."),
        ("My old boss works at Acme.", "My old boss works at Globex."),
        ("My former manager works at Acme.", "My former manager works at Globex."),
        ("My previous landlord lives in Leeds.", "My previous landlord lives in York."),
        ("My other boss works at Acme.", "My other boss works at Globex."),
        ("My boss lives in London.", "My boss lives in Paris."),
        ("My manager works at Acme.", "My manager works at Globex."),
        ("My landlord lives in Leeds.", "My landlord lives in York."),
        ("My dentist works at Smile Clinic.", "My dentist works at Bright Dental."),
        ("My vet works at PetCare.", "My vet works at VetsNow."),
        ("My accountant works at KPMG.", "My accountant works at Deloitte."),
        ("My supervisor works at Acme.", "My supervisor works at Globex."),
        ("Everybody here works at Acme.", "Everybody here works at Globex."),
        ("Ann says Bob lives in Leeds.", "Ann says Bob lives in York."),
        ("Alice or Bob lives in Leeds.", "Alice or Bob lives in York."),
        ("My family lives in Leeds.", "My family lives in York."),
        ("My password is hunter2.", "My password is saved."),
        ("My favourite one is Luna.", "My favourite one is Max."),
        ("I heard Bob works at Acme.", "I heard Bob works at Globex."),
        ("Ann thinks Bob lives in Leeds.", "Ann thinks Bob lives in York."),
        ("I hope Bob lives in Leeds.", "I hope Bob lives in York."),
    ],
)
def test_a_statement_that_says_more_than_a_new_value_supersedes_nothing(
    older: str, newer: str
) -> None:
    """Six reviews of the rule after 9561d0a found each of these superseding at MiniLM
    cosines of 0.50-0.99 (over the 0.5 default); most were read so since 7613fda. Both
    statements are now read only when each names one value of one subject and nothing else.
    """
    new = Version("n", newer, T0 + hours(24))
    assert detect(new, [Version("o", older, T0, 0.7)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Alice works at Acme on the data team.", "Alice works at Globex now."),
        ("Alice lives in Osaka but works in Kyoto.", "Alice moved to Lisbon."),
        ("Alice lives in Osaka.", "Alice moved to Lisbon, near the river."),
        ("Dan works for ON Semiconductor.", "Dan now works for Intel."),
        ("Alice drives a Tesla.", "Alice drives a van now."),
        ("Alice supports Arsenal.", "Alice supports Chelsea now."),
        ("Alice prefers Python.", "Alice prefers Rust now."),
        ("Alice studies Law.", "Alice studies Medicine now."),
        ("alice lives in osaka", "alice lives in new york now"),
        ("Bob works at Acme.", "Bob works for Globex now."),  # a person, a department too
        ("Alice lives in Osaka.", "Alice moved to Lisbon."),  # a team, a company, an app too
        ("Alice drives a Tesla.", "Alice drives the Kia now."),
    ],
)
def test_a_replacement_said_with_more_than_its_values_is_left_alone(older: str, newer: str) -> None:
    """Both statements must name one value of one subject's attribute and nothing else: a
    replacement said otherwise is missed (it costs an ordering), so that no statement that says
    more, or a value one may hold beside another, hides a true memory (rule zero).
    """
    new = Version("n", newer, T0 + hours(24))
    assert detect(new, [Version("o", older, T0, 0.7)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Also Bob works at Uber.", "Also Bob works at Lyft."),
        ("Hopefully Alice works at Globex.", "Hopefully Alice works at Initech."),
        ("Hypothetically Alice lives in Lisbon.", "Hypothetically Alice lives in Porto."),
        ("I'd live in Lisbon.", "I'd live in Kyoto."),
        ("I'd live in Paris.", "I'd live in Rome."),
        ("Ideally Alice lives in Lisbon.", "Ideally Alice lives in Porto."),
        ("Occasionally Bob works at Starbucks.", "Occasionally Bob works at WeWork."),
        ("Sometimes Alice works at Acme.", "Sometimes Alice works at Globex."),
        ("Sometimes Bob works at Starbucks.", "Sometimes Bob works at Costa."),
        ("Sometimes Mom lives in Florida.", "Sometimes Mom lives in Ohio."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Allegedly"),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Apparently"),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Haha"),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Hopefully"),
        ("Alice lives in Osaka.", "Alice lives in Lisbon LMAO"),
        ("Alice lives in Osaka.", "Alice lives in Lisbon OMG"),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Soonish"),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Tho"),
        ("Alice lives in Osaka.", "Alice lives in Lisbon XD"),
        ("Alice works at Acme.", "Alice works at Globex FWIW"),
        ("Alice works at Acme.", "Alice works at Globex IDK"),
        ("Alice works at Acme.", "Alice works at Globex Ish"),
        ("Alice works at Acme.", "Alice works at Globex NGL"),
        ("Alice works at Acme.", "Alice works at Globex RN"),
        ("Bob drives a Tesla.", "Bob drives a Greyhound now."),
        ("Bob drives a Tesla.", "Bob drives a Harley now."),
        ("Bob drives a Tesla.", "Bob drives a Hertz now."),
        ("Bob drives a Tesla.", "Bob drives a JCB now."),
        ("Bob drives a Tesla.", "Bob drives a Model 3 now."),
        ("Bob drives a Tesla.", "Bob drives a Peterbilt now."),
        ("Bob drives a Tesla.", "Bob drives a Routemaster now."),
        ("Bob drives a Tesla.", "Bob drives a Sprinter now."),
        ("Bob drives a Tesla.", "Bob drives a Vespa now."),
        ("Bob drives a Tesla.", "Bob drives a Zamboni now."),
        ("Bob drives a Tesla.", "Bob drives a Zipcar now."),
        ("Bob drives a Toyota.", "Bob drives a Prius now."),
        ("Backups live in S3.", "Backups live in Glacier."),
        ("Docs live in Notion.", "Docs live in Confluence."),
        ("Logs live in Datadog.", "Logs live in Splunk."),
        ("Photos live in Dropbox.", "Photos live in Google Photos."),
        ("Secrets live in Vault.", "Secrets live in Doppler."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon H2."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Mid-2025."),
        ("Alice lives in Osaka.", "Alice lives in Lisbon Pre-Covid."),
        ("Alice works at Acme.", "Alice works at Globex EOY."),
        ("Alice works at Acme.", "Alice works at Globex FY25."),
        ("Alice works at Acme.", "Alice works at Globex Q3."),
        ("The home address is 5 Oak Rd.", "The home address is 12 High St."),
        ("The home phone number is 555-1234.", "The home phone number is 555-9876."),
        ("The office address is 5 Oak Rd.", "The office address is 12 High St."),
        ("The office manager is Ann.", "The office manager is Tom."),
        ("The office password is hunter2.", "The office password is swordfish."),
        ("The office phone number is 555-1234.", "The office phone number is 555-9876."),
        ("The work address is 5 Oak Rd.", "The work address is 12 High St."),
        ("The work phone number is 555-1234.", "The work phone number is 555-9876."),
        ("Alice prefers Chrome for testing.", "Alice prefers Cypress for testing."),
        ("Alice prefers Delta for business trips.", "Alice prefers Marriott for business trips."),
        ("Alice prefers Heathrow for flights.", "Alice prefers Delta for flights."),
        ("Alice prefers Markdown for notes.", "Alice prefers Obsidian for notes."),
        ("Alice prefers Postgres for side projects.", "Alice prefers Rust for side projects."),
        ("Alice prefers Python for backend work.", "Alice prefers FastAPI for backend work."),
        ("Alice prefers Python for backend work.", "Alice prefers Postgres for backend work."),
        ("Alice prefers TypeScript for frontend work.", "Alice prefers React for frontend work."),
        ("Alice prefers Uber for airport runs.", "Alice prefers Heathrow for airport runs."),
        ("Alice prefers Vim for coding.", "Alice prefers Python for coding."),
        ("Alice prefers Zoom for meetings.", "Alice prefers afternoons for meetings."),
        ("Alice prefers coffee for breakfast.", "Alice prefers both for breakfast."),
        ("Alice prefers coffee for breakfast.", "Alice prefers neither for breakfast."),
        ("Alice prefers coffee for breakfast.", "Alice prefers oatmeal for breakfast."),
        ("Alice prefers tea for breakfast.", "Alice prefers eggs for breakfast."),
        ("Alice prefers wine for dinner.", "Alice prefers pasta for dinner."),
        ("User prefers Hilton for work trips.", "User prefers United for work trips."),
        ("User prefers Python for data analysis.", "User prefers Jupyter for data analysis."),
        ("User prefers Python for scripting.", "User prefers Bash for scripting."),
        ("User prefers Python for scripting.", "User prefers VS Code for scripting."),
        ("User prefers TypeScript for frontend.", "User prefers React for frontend."),
        ("User prefers United for flights.", "User prefers aisles for flights."),
        ("User prefers email for updates.", "User prefers brevity for updates."),
        ("My Boss lives in London.", "My Boss lives in Paris."),
        ("My CEO lives in London.", "My CEO lives in Paris."),
        ("My GP works at Riverside Surgery.", "My GP works at Mercy Clinic."),
        ("My Landlord lives in Leeds.", "My Landlord lives in York."),
        ("My MP lives in Leeds.", "My MP lives in York."),
        ("My Manager works at Acme.", "My Manager works at Globex."),
        ("My PA lives in Croydon.", "My PA lives in Leeds."),
        ("My PA works at Acme.", "My PA works at Globex."),
        ("My PA works at Kaiser.", "My PA works at Sutter."),
        ("My TA lives in Leeds.", "My TA lives in York."),
        ("My Uber Driver lives in Leeds.", "My Uber Driver lives in York."),
        ("My VP works at Acme.", "My VP works at Globex."),
        ("Alice lives in Leeds.", "Alice lives in Halls now."),
        ("Alice lives in Leeds.", "Alice lives in Town now."),
        ("Alice works at Acme.", "Alice works at Corporate now."),
        ("Alice works at Acme.", "Alice works at Head Office now."),
        ("Alice works at Acme.", "Alice works at Reception now."),
        ("Alice works at Acme.", "Alice works at The Office."),
        ("Alice works at Acme.", "Alice works at the Berlin Office."),
        ("Alice works at Acme.", "Alice works at the Downtown Store now."),
        ("Alice works at Acme.", "Alice works at the London Office now."),
        ("Alice works at Acme.", "Alice works at the Main Campus."),
        ("Alice lives in Lisbon.", "Alice lives in Lisb\u043en."),
        ("Alice lives in Lisbon.", "Alice lives in _Lisbon_."),
        ("Apparently Bob works at Acme.", "Apparently Bob works at Globex."),
        ("Bob drives a Tesla.", "Bob drives a Lime now."),
        ("Bob drives a Tesla.", "Bob drives a Waymo now."),
        ("Does Alice live in Lisbon", "Does Alice live in Porto"),
        ("I'll live in Lisbon.", "I'll live in Porto."),
        ("My GP works at Elm Surgery.", "My GP works at Oak Surgery."),
        ("My MA lives in Leeds.", "My MA lives in York."),
        ("Once Alice lives in Lisbon", "Once Alice lives in Porto"),
        ("The office address is 1 Elm St.", "The office address is 5 Oak Rd."),
        ("Unless Alice lives in Lisbon", "Unless Alice lives in Porto"),
        ("Alice prefers meeting for lunch.", "Alice prefers sushi for lunch."),
    ],
)
def test_a_seventh_review_s_statements_that_may_hold_beside_the_older_supersede_nothing(
    older: str, newer: str
) -> None:
    """A seventh review (of a2af225) found each superseding at MiniLM cosines of 0.54-0.99: a
    preference of another kind for one purpose ("eggs" beside "tea" for breakfast), a role
    written in capitals ("My GP", "My CEO"), a site of an employer ("the London Office", "Head
    Office"), things that "live in" a tool, "the office" or "home" of no one said, a hedge or a
    condition before the subject ("Sometimes Mom", "Hypothetically Alice", "I'd"), a chat word
    or a quarter after the value ("Lisbon XD", "Globex Q3", "Lisbon Pre-Covid"), a look-alike
    letter or markdown ("_Lisbon_"), and a vehicle that is not a car ("a Harley now").
    """
    new = Version("n", newer, T0 + hours(24))
    assert detect(new, [Version("o", older, T0, 0.7)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Hypothetically, Alice lives in Lisbon.", "Hypothetically, Alice lives in Porto."),
        ("Sometimes, Mom lives in Florida.", "Sometimes, Mom lives in Ohio."),
        ("Ideally, Alice works at Google.", "Ideally, Alice works at Stripe."),
        ("Apparently, Bob works at Acme.", "Apparently, Bob works at Globex."),
        ("Hopefully, Alice works at Globex.", "Hopefully, Alice works at Initech."),
        ("Previously, Alice lives in Osaka.", "Previously, Alice lives in Kyoto."),
        ("Probably, Bob lives in Leeds.", "Probably, Bob lives in York."),
        ("Occasionally, Bob works at Starbucks.", "Occasionally, Bob works at Costa."),
        ("Theoretically, Alice lives in Lisbon.", "Theoretically, Alice lives in Porto."),
        ("Hypothetically: Alice lives in Lisbon.", "Hypothetically: Alice lives in Porto."),
        ("Hypothetically—Alice lives in Lisbon.", "Hypothetically—Alice lives in Porto."),
        ("Sometimes, Dad works at Acme.", "Sometimes, Dad works at Globex."),
        ("Also, Bob works at Uber.", "Also, Bob works at Lyft."),
        ("Originally, Alice lives in Osaka.", "Originally, Alice lives in Kyoto."),
        ("Usually, Mom lives in Florida.", "Usually, Mom lives in Maine."),
        ("Example: Alice lives in Osaka.", "Example: Alice lives in Lisbon."),
        ("Rumour: Alice works at Globex.", "Rumour: Alice works at Initech."),
        ("Rumor: Bob works at Apple.", "Rumor: Bob works at Google."),
        ("Guess: Alice lives in Lisbon.", "Guess: Alice lives in Porto."),
        ("Scenario: Alice lives in Lisbon.", "Scenario: Alice lives in Porto."),
        ("Hypothesis: Bob works at Acme.", "Hypothesis: Bob works at Globex."),
        ("Previously: Alice lives in Osaka.", "Previously: Alice lives in Kyoto."),
        ("Draft: Alice lives in Lisbon.", "Draft: Alice lives in Porto."),
        ("Q: Alice lives in Lisbon.", "Q: Alice lives in Porto."),
        ("Test: Alice works at Acme.", "Test: Alice works at Globex."),
        ("TODO: Alice works at Acme.", "TODO: Alice works at Globex."),
        ("Unverified: Bob lives in Leeds.", "Unverified: Bob lives in York."),
        ("Character: Alice lives in Paris.", "Character: Alice lives in Rome."),
        ("Fiction: Alice lives in Paris.", "Fiction: Alice lives in Rome."),
        ("Suppose Alice lives in Lisbon.", "Suppose Alice lives in Porto."),
        ("Assume Alice lives in Lisbon.", "Assume Alice lives in Porto."),
        ("Imagine Alice lives in Lisbon.", "Imagine Alice lives in Porto."),
        ("Say Alice lives in Lisbon.", "Say Alice lives in Porto."),
        ("Pretend Alice lives in Lisbon.", "Pretend Alice lives in Porto."),
        ("Rarely Alice works at Acme.", "Rarely Alice works at Globex."),
        ("Seasonally Mom lives in Florida.", "Seasonally Mom lives in Maine."),
        ("Weekends Mom lives in Florida.", "Weekends Mom lives in Maine."),
        ("Likely Alice works at Acme.", "Likely Alice works at Globex."),
        ("Surely Alice works at Acme.", "Surely Alice works at Globex."),
        ("My favourite player is Messi.", "My favourite player is LeBron."),
        ("My favourite character is Frodo.", "My favourite character is Walter White."),
        ("My favourite episode is Ozymandias.", "My favourite episode is The Constant."),
        ("My favourite track is Airbag.", "My favourite track is Hey Jude."),
        ("My favourite part is the ending.", "My favourite part is the chorus."),
        ("My favourite scene is the ending.", "My favourite scene is the wedding."),
        ("My favourite level is World 1-1.", "My favourite level is Rainbow Road."),
        ("My favourite food today is pizza.", "My favourite food today is sushi."),
        ("My favourite drink lately is mate.", "My favourite drink lately is kombucha."),
        ("Bob drives a Tesla.", "Bob drives a Mercedes Sprinter now."),
        ("Bob drives a Tesla.", "Bob drives a Ford Transit now."),
        ("Bob drives a Tesla.", "Bob drives a Toyota Forklift now."),
        ("Bob drives a Tesla.", "Bob drives a Volvo Truck now."),
        ("Bob drives a Tesla.", "Bob drives a Mercedes Actros now."),
        ("Bob drives a Tesla.", "Bob drives a Mercedes Citaro now."),
        ("Bob drives a Tesla.", "Bob drives a Ford Police Interceptor now."),
        ("Bob drives a Tesla.", "Bob drives a Ford Ambulance now."),
        ("Bob drives a Tesla.", "Bob drives a Kia Taxi now."),
        ("Bob drives a Tesla.", "Bob drives a Honda Gold Wing now."),
        ("Bob drives a Tesla.", "Bob drives a VW Crafter now."),
        ("Bob drives a Tesla.", "Bob drives a Fiat Ducato now."),
        ("Bob drives a Tesla.", "Bob drives a Mercedes Vito now."),
        ("My address is 5 Oak Rd.", "My address is 0x71C7656EC7ab88b098defB751B7401B5f6d8976F."),
        (
            "My address is 5 Oak Rd.",
            "My address is 0x71C7656EC7ab88b098defB751B7401B5f6d8976F now.",
        ),
        (
            "My address is 0x71C7656EC7ab88b098defB751B7401B5f6d8976F.",
            "My address is 0x3fC91A3afd70395Cd496C647d5a6CC9D4B2b7FAD.",
        ),
        ("My address is 5 Oak Rd.", "My address is bc1qxy2kgdygjrsqtzq2n0yrf2493p83kkfjhx0wlh."),
        ("Alice's address is 12 High St.", "Alice's address is 10.0.0.7."),
        ("My address is 5 Oak Rd.", "My address is PO Box 12."),
        ("My address is 5 Oak Rd.", "My address is SW1A 1AA."),
        ("My address is 5 Oak Rd.", "My address is Flat 2."),
        ("My phone number is 555-1234.", "My phone number is Ext 42."),
        ("My phone number is 1-800-356-9377.", "My phone number is 1-800-FLOWERS."),
        ("My job is at Acme.", "My job is at Head Office now."),
        ("My job is at Acme.", "My job is at Home now."),
        ("My job is at Acme.", "My job is at Reception now."),
        ("My job is at Acme.", "My job is at Corporate now."),
    ],
)
def test_an_eighth_review_s_statements_that_may_hold_beside_the_older_supersede_nothing(
    older: str, newer: str
) -> None:
    """An eighth review found each superseding at MiniLM cosines over 0.5: a hedge or a label
    before the subject with a comma or a colon ("Hypothetically, Alice", "Rumour: Alice"), a
    time before it ("Weekends Mom"), a van, a lorry or a motorbike of a car's make ("a Mercedes
    Sprinter now"), an "address" that is a wallet, an IP, a postcode or a PO box, a "number"
    that is no number ("Ext 42"), a favourite within one show or day ("my favourite
    character", "my favourite food today"), and a job "at" a site ("my job is at Head Office").
    """
    new = Version("n", newer, T0 + hours(24))
    assert detect(new, [Version("o", older, T0, 0.7)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Alice took a job at Acme.", "Alice got a new job at the NHS."),
        ("Mom works at the NHS.", "Mom works at Acme now."),
        ("My wife works at Acme.", "My wife works at The Home Depot now."),
        ("My wife works at the NHS.", "My wife works at Acme now."),
        ("Alice took a job at G4S.", "Alice got a new job at Acme."),
        ("Bob Smith took a job at Cloud9.", "Bob Smith got a new job at Acme."),
        ("Alice works at Acme.", "Alice works at Channel4 now."),
        ("My wife works at Acme.", "My wife works at Plus500 now."),
        ("My wife drives a Tesla.", "My wife drives an Ineos Grenadier now."),
        ("Mom drives a Daewoo.", "Mom drives a Kia now."),
        ("Mom drives a Tesla.", "Mom drives a Fisker now."),
        ("My wife drives a Tesla.", "My wife drives a Maruti now."),
        ("My boss is Ann.", "My new boss is Jing He."),
        ("Alice is dating Jing He.", "Alice is dating Wei Zhang now."),
        ("Thu Ha lives in Osaka.", "Thu Ha lives in Lisbon now."),
        ("Alice's manager is Ann.", "Alice's manager is Jing He now."),
        ("Ann So lives in New York.", "Ann So lives in Los Angeles now."),
        ("My boss is Ann.", "My new boss is Minh Do."),
        ("My favorite song is Hey Jude.", "My new favorite song is So What."),
        ("Your favourite film is Jaws.", "Your favourite film is Do The Right Thing now."),
        ("My address is 5 Oak Dr.", "My new address is 5 Oak Rd."),
        ("Your home address is 12 Elm Dr.", "Your new home address is 12 Elm St."),
        ("Our postal address is 5 Oak Dr.", "Our new postal address is 5 Oak Rd."),
        ("Alice's postal address is 5 Oak Dr.", "Alice's postal address is 5 Oak Rd now."),
        ("Mom lives in Cape Town.", "Mom lives in CT."),
        ("Your job is at Morgan Stanley.", "Your new job is at MS."),
        ("I live in PA.", "I live in Palo Alto now."),
        ("Bob Smith works at Bank of America.", "Bob Smith works at BA now."),
        ("Alice is married to Mr Patel.", "Alice is married to Priya Patel now."),
        ("Alice is dating Jenny Kim.", "Alice is dating Mr Kim now."),
        ("Your manager is Ms Lee.", "Your manager is Mr Lee now."),
        ("Our boss is Ms Lee.", "Our boss is Mr Lee now."),
        ("Do Kwon lives in Osaka.", "Do Kwon lives in Lisbon now."),
        ("Or Cohen works at Acme.", "Or Cohen works at Globex now."),
        ("So Yeon is married to Tom.", "So Yeon is married to Sam now."),
        ("Do Kwon drives a Tesla.", "Do Kwon drives a Kia now."),
        ("Can lives in Leeds.", "Can lives in Mid-Wales now."),
        ("Will lives in New York.", "Will lives in Los Angeles now."),
        ("Can prefers Python for backend work.", "Can prefers Go for backend work now."),
        ("Will Turner is married to Tom.", "Will Turner is married to Sam now."),
        ("Mom works at Acme.", "Mom works at Mid-Day now."),
        ("Mr Kim lives in Leeds.", "Mr Kim lives in Mid-Wales now."),
        ("Bob Smith lives in Leeds.", "Bob Smith lives in Mid-Wales."),
        ("I live in Mid-Wales.", "I live in Leeds now."),
    ],
)
def test_names_that_are_also_words_still_supersede(older: str, newer: str) -> None:
    """The eighth review found the seventh round's narrowing missing these replacements: names
    that are also modals, hedges or laughs ("Will", "Do Kwon", "So Yeon", "Jing He"), an
    employer after "the" ("the NHS"), a digit in an employer's first word ("G4S", "Channel4"),
    "Mid-" opening a place ("Mid-Wales"), car makes, "Dr" as a street, two letters, titles.
    """
    new = Version("n", newer, T0 + hours(24))
    (decided,) = detect(new, [Version("o", older, T0, 0.7)], RULE)
    assert (decided.older, decided.newer) == ("o", "n")


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("The wifi password is swordfish42.", "The wifi password is formerly hunter2."),
        ("The wifi password is hunter2.", "The wifi password is previously swordfish42."),
        ("The wifi password is Hunter2.", "The wifi password is possibly Swordfish42."),
        ("My password is Tr0ub4dor.", "My password is likely Correct7Horse."),
        ("My favourite band is Radiohead.", "My favourite band is apparently Coldplay."),
        ("Alice's favourite author is Tolkien.", "Alice's favourite author is allegedly Rowling."),
        ("Speaker A lives in Osaka.", "Speaker A lives in Lisbon."),
        ("Caller lives in Leeds.", "Caller lives in York."),
        ("Candidate lives in Leeds.", "Candidate lives in York."),
        ("Witness lives in Leeds.", "Witness lives in York."),
        ("Landlord lives in Leeds.", "Landlord lives in York."),
        ("Former Boss works at Acme.", "Former Boss works at Globex."),
        ("Gf works at Acme.", "Gf works at Globex."),
        ("Mein Bruder works at Siemens.", "Mein Bruder works at Bosch."),
        ("Mon Frère lives in Paris.", "Mon Frère lives in Lyon."),
        ("Caller's phone number is 555-1234.", "Caller's phone number is 555-9876."),
        ("Guest's phone number is 555-1234.", "Guest's phone number is 555-9876."),
        ("Recipient's address is 5 Oak Rd.", "Recipient's address is 12 High St."),
        ("Candidate's phone number is 555-1234.", "Candidate's phone number is 555-9876."),
        (
            "Interviewee's job title is Senior Engineer.",
            "Interviewee's job title is Product Manager.",
        ),
        ("Confirm Alice lives in Lisbon.", "Confirm Alice lives in Porto."),
        ("Check Alice lives in Lisbon.", "Check Alice lives in Porto."),
        ("Verify Bob works at Acme.", "Verify Bob works at Globex."),
        ("Whether Alice lives in Lisbon", "Whether Alice lives in Porto"),
        ("Why Alice works at Acme", "Why Alice works at Globex"),
        ("My address is 12 Oak Rd.", "My address is Room 204."),
        ("My address is 12 Oak Rd.", "My address is Box 12."),
        ("My address is 12 Oak Rd.", "My address is Ste 200."),
        ("My address is 12 Oak Rd.", "My address is Dorm 5."),
        ("My address is 12 Oak Rd.", "My address is Desk 14."),
        ("My favourite drink is Coke.", "My favourite drink is typically Pepsi."),
    ],
)
def test_a_ninth_review_s_statements_that_may_hold_beside_the_older_supersede_nothing(
    older: str, newer: str
) -> None:
    """A ninth review found each superseding at MiniLM cosines of 0.64-1.00: a role or a
    tool's label as the subject, or as an attribute's owner ("Speaker A", "Caller", "Former
    Boss", "Mein Bruder", "Guest's phone number"), a request or a question ("Confirm Alice
    lives in", "Whether Alice"), an address inside an address ("Room 204", "Desk 14"), and a
    lower-case hedge opening a value that may open with any word ("formerly hunter2",
    "typically Pepsi").
    """
    new = Version("n", newer, T0 + hours(24))
    assert detect(new, [Version("o", older, T0, 0.7)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Alice's job title is Senior Engineer.", "Alice's job title is Unknown."),
        ("Alice's boss is Tom Baker.", "Alice's boss is Unknown."),
        ("My job title is Senior Engineer.", "My job title is Unchanged."),
        ("My manager is Tom Baker.", "My manager is TBA."),
        ("My boss is Tom Baker.", "My boss is Vacant now."),
        ("Alice's job title is Senior Engineer.", "Alice's job title is Confidential."),
        ("Alice works at Globex.", "Alice works at Undisclosed."),
        ("Alice's boss is Tom Baker.", "Alice's boss is Same."),
        ("Alice's job title is Senior Engineer.", "Alice's job title is NA."),
        ("Alice's manager is Tom Baker.", "Alice's manager is Pending."),
        ("Alice lives in Lisbon.", "Alice lives in REDACTED."),
        ("Alice works at Globex.", "Alice works at REDACTED."),
        ("Alice is married to Tom Baker.", "Alice is married to REDACTED."),
        ("Alice's boss is Tom Baker.", "Alice's boss is XXX."),
        ("Alice lives in Lisbon.", "Alice lives in XXXX."),
        ("Alice works at Globex.", "Alice works at ACME-REDACTED."),
        ("My address is 5 Oak Rd.", "My address is XXX XXXX."),
        ("Alice lives in Lisbon.", "Alice lives in CITY."),
        ("Alice's boss is Ann Lee.", "Alice's boss is a Woman."),
        ("Alice is married to Tom Baker.", "Alice is married to a Doctor."),
        ("Alice is dating Tom Baker.", "Alice is dating a Musician now."),
        ("Alice works at Barclays.", "Alice works at a Bank now."),
        ("Alice works at Globex.", "Alice works at a Startup now."),
        ("My job is at Barclays.", "My job is at a Bank."),
        ("Alice lives in Lisbon.", "Alice lives in a Capital City."),
        ("Alice's manager is Tom Baker.", "Alice's manager is an Engineer."),
        ("My password is hunter2.", "My password is XXXX."),
        ("Bae Bae lives in Leeds.", "Bae Bae lives in York now."),  # one's partner
        ("Hey Bae lives in Leeds.", "Hey Bae lives in York now."),
    ],
)
def test_a_placeholder_or_a_description_supersedes_nothing(older: str, newer: str) -> None:
    """A tenth review found each superseding at MiniLM cosines of 0.54-0.80: a placeholder or
    a scrubber's mark where a name was ("Unknown", "TBA", "REDACTED", "XXXX", "CITY"), and a
    capitalised description after "a" ("married to a Doctor", "works at a Bank now"), which
    may be of the older value itself.
    """
    new = Version("n", newer, T0 + hours(24))
    assert detect(new, [Version("o", older, T0, 0.7)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Alice lives in Mt Pleasant.", "Alice lives in Mount Pleasant."),
        ("Alice lives in NYC.", "Alice lives in New York City."),
        ("Alice lives in Saint Louis.", "Alice lives in St Louis."),
        ("Alice lives in St Petersburg.", "Alice lives in Saint Petersburg."),
        ("Alice lives in Washington DC.", "Alice lives in Washington D.C."),
        ("Alice works at AWS.", "Alice works at Amazon Web Services."),
        ("Alice works at Acme Corp.", "Alice works at Acme Corporation."),
        ("Alice works at Acme Inc.", "Alice works at Acme Incorporated."),
        ("Alice works at Acme Ltd.", "Alice works at Acme Limited."),
        ("Alice works at DoorDash.", "Alice works at Door Dash."),
        ("Alice works at IBM.", "Alice works at International Business Machines."),
        ("Alice works at JPMorgan.", "Alice works at JP Morgan."),
        ("Alice works at McDonald's.", "Alice works at McDonalds."),
        ("Alice works at Sainsbury's.", "Alice works at Sainsburys now."),
        ("Alice works at Walmart.", "Alice works at Wal-Mart."),
        ("My address is 1600 Pennsylvania Ave.", "My address is 1600 Pennsylvania Avenue."),
        ("My address is 5 Oak Rd SW1A 1AA.", "My address is 5 Oak Rd SW1A1AA."),
        ("My address is 5 Oak Rd.", "My address is 5 Oak Road."),
        ("My phone number is 020 7946 0958.", "My phone number is 0044 20 7946 0958."),
        ("My phone number is 07700 900123.", "My phone number is 447700900123."),
        ("My phone number is 555-123-4567.", "My phone number is 15551234567."),
        ("The wifi password is Hunter2.", "The wifi password is hunter 2."),
        ("Alice lives in Zürich.", "Alice lives in Zuerich."),
    ],
)
def test_the_same_value_spelt_otherwise_supersedes_nothing(older: str, newer: str) -> None:
    """The newer statement says what the older does: spaced, marked or abbreviated otherwise,
    as initials, with a title, or the same number with a country code (seventh review)."""
    new = Version("n", newer, T0 + hours(24))
    assert detect(new, [Version("o", older, T0, 0.7)], RULE) == []


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Alice lives in Palo Alto.", "Alice lives in PA now."),
        ("Alice lives in Cape Town.", "Alice lives in CT now."),
        ("Alice works at Morgan Stanley.", "Alice works at MS now."),
        ("Alice works at Bank of America.", "Alice works at BA now."),
        ("My boss is Mr Kim.", "My boss is Jenny Kim now."),
        ("Alice is married to Mr Patel.", "Alice is married to Priya Patel now."),
        ("Alice is married to Emma Davis.", "Alice is married to Ed now."),
        ("Alice is dating Ann Lee.", "Alice is dating Al now."),
        ("Alice is dating Jo Ann Lee.", "Alice is dating Jal now."),
        ("My address is 5 Oak Dr.", "My new address is 5 Oak Rd."),
        ("My boss is Ms Lee.", "My boss is Mr Lee now."),
    ],
)
def test_two_letters_a_title_or_a_person_s_initials_are_another_value(
    older: str, newer: str
) -> None:
    """A review of the seventh round's restatements found each of these missed: two letters
    may be initials of another name ("PA": Pennsylvania), a title may be of another person,
    "Dr" of "5 Oak Dr" was dropped as a title, and a person's initials are a name ("Al").
    """
    new = Version("n", newer, T0 + hours(24))
    (decided,) = detect(new, [Version("o", older, T0, 0.7)], RULE)
    assert (decided.older, decided.newer) == ("o", "n")


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("Alice lives in New York City.", "Alice lives in Los Angeles now."),
        ("My job title is Senior Engineer.", "My job title is Staff Engineer."),
        ("My phone number is 555-1234.", "My phone number is 555-1235."),
        ("Bob drives a Tesla.", "Bob drives a Ford Focus now."),
        ("Bob drives a Toyota Corolla.", "Bob drives a Mercedes-Benz C-Class now."),
        ("Alice prefers tea for breakfast.", "Alice prefers coffee for breakfast now."),
        ("The wifi password is hunter2.", "The wifi password is swordfish."),
        ("May Chen works at Acme.", "May Chen works at Globex."),
        ("Jan Novak lives in Brno.", "Jan Novak lives in Prague now."),
        ("Alice lives in Zürich.", "Alice lives in Geneva now."),
        ("My mum lives in Leeds.", "My mum lives in York now."),
        ("Alice's husband works at Acme.", "Alice's husband works at Globex."),
        ("We live in Leeds.", "We live in York now."),
        ("Alice works at IBM.", "Alice works at Intel now."),
        ("My job is at Globex.", "My job is at the BBC now."),  # as "works at the BBC"
        ("My favourite band is Queen.", "My favourite band is Imagine Dragons."),
        ("Alice works at Acme.", "Alice works at Say Media now."),
        ("Alice lives in Leeds.", "Alice lives in Mid-Wales now."),
        ("Bae Doona lives in Seoul.", "Bae Doona lives in Busan now."),  # "bae" alone is a role
        ("Ji-woo Bae works at Samsung.", "Ji-woo Bae works at LG now."),
        ("My favourite animal is a dog.", "My favourite animal is a cat now."),  # after "a"
        ("Alice lives in Lisbon.", "Alice lives in A Coruña now."),  # names, not "a", "an"
        ("Alice works at Globex.", "Alice works at An Post now."),
        ("Alice is dating Tom Baker.", "Alice is dating An Nguyen now."),
        ("Alice works at Globex.", "Alice works at City now."),  # blanks only in capitals
        ("My favourite band is Queen.", "My favourite band is The xx now."),
        ("My favourite musical is Cats.", "My favourite musical is Company now."),
    ],
)
def test_a_replacement_still_supersedes_after_the_seventh_review(older: str, newer: str) -> None:
    """What the seventh review's narrowing keeps: names that are also months ("May", "Jan"),
    initials alike ("Senior Engineer", "Staff Engineer"), one's own mother or spouse, a car make,
    a preference said to be an update."""
    new = Version("n", newer, T0 + hours(24))
    (decided,) = detect(new, [Version("o", older, T0, 0.7)], RULE)
    assert (decided.older, decided.newer) == ("o", "n")


def test_a_value_of_a_many_valued_relation_supersedes_when_said_to_be_an_update() -> None:
    tesla = Version("tesla", "Alice drives a Tesla.", T0, 0.8)
    assert detect(Version("kia", "Alice drives a Kia.", T0 + hours(24)), [tesla], RULE) == []
    (found,) = detect(Version("kia", "Alice drives a Kia now.", T0 + hours(24)), [tesla], RULE)
    assert (found.older, found.newer) == ("tesla", "kia")
    (moved,) = detect(
        Version("globex", "Alice works at Globex.", T0 + hours(24)),
        [Version("acme", "Alice works at Acme.", T0, 0.8)],
        RULE,
    )
    assert moved.older == "acme"  # one employer at a time: no marker needed


@pytest.mark.parametrize(
    "answer",
    [
        None,
        "",
        "no idea",
        '{"replaces": 1}',
        '{"answer": [1]}',
        "{broken json",
        '{"replaces": ' + "[" * 100_000 + "}",  # nested deeper than the JSON parser goes
        "{" * 100_000,
    ],
)
def test_no_usable_llm_answer_falls_back_to_the_rule(answer: str | None) -> None:
    assert [s.older for s in decide(LISBON, [OSAKA], RULE, answer)] == ["osaka"]
    assert decide(PHONE_NEW, [PHONE_OLD], RULE, answer) == []  # the rule cannot read this one
    assert decide(LISBON, [OSAKA], SupersessionPolicy(enabled=False), '{"replaces": [1]}') == []


def test_an_llm_answer_of_true_names_no_neighbour() -> None:
    """JSON ``true`` is no index: read as 1, it superseded the first neighbour."""
    assert [s.older for s in decide(PHONE_NEW, [PHONE_OLD], RULE, '{"replaces": [1]}')]
    assert decide(PHONE_NEW, [PHONE_OLD], RULE, '{"replaces": [true]}') == []


@pytest.mark.parametrize("entry", ["true", "null", "1.0", '"one"', '"1.5"', '"-1"', "[1]", "{}"])
def test_an_llm_answer_listing_what_is_no_number_is_left_to_the_rule(entry: str) -> None:
    """Read as "replaces nothing", such an answer turned supersession off for the write."""
    answer = f'{{"replaces": [{entry}]}}'
    assert [s.older for s in decide(LISBON, [OSAKA], RULE, answer)] == ["osaka"]
    assert [s.older for s in decide(LISBON, [OSAKA], RULE, f'{{"replaces": [1, {entry}]}}')] == [
        "osaka"
    ]
    assert decide(LISBON, [OSAKA], RULE, '{"replaces": []}') == []  # the LLM's own "nothing"


@pytest.mark.parametrize("number", ['"1"', '" 1 "', '"01"', '"1\\u001f"', '"\\u001c1"'])
def test_an_llm_answer_may_quote_its_numbers(number: str) -> None:
    answer = f'{{"replaces": [{number}]}}'
    assert [s.reason for s in decide(PHONE_NEW, [PHONE_OLD], RULE, answer)] == [
        "llm: a newer value of the same fact"
    ]
    assert decide(PHONE_NEW, [PHONE_OLD], RULE, '{"replaces": ["2"]}') == []  # not listed


def test_a_neighbour_listed_twice_is_decided_once() -> None:
    assert [s.older for s in detect(LISBON, [OSAKA, OSAKA], RULE)] == ["osaka"]
    assert llm_candidates(PHONE_NEW, [PHONE_OLD, PHONE_OLD], RULE) == [PHONE_OLD]


def test_a_neighbour_whose_cosine_is_not_a_number_is_not_close() -> None:
    """``NaN < min_cosine`` is false: it passed as close (the LLM's candidates left it out)."""
    nan = dataclasses.replace(OSAKA, similarity=float("nan"))
    assert detect(LISBON, [nan], RULE) == []
    assert (
        llm_candidates(PHONE_NEW, [dataclasses.replace(PHONE_OLD, similarity=nan.similarity)], RULE)
        == []
    )


@pytest.mark.parametrize("words", [16, 64])
def test_a_long_text_is_refused_before_it_is_read(
    words: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 64 KB write with four words, or a policy of 10**9 words, was normalised whole for each
    of its up to 1,024 neighbours: seconds of the worker's loop for one write.
    """
    policy = SupersessionPolicy(max_words=words)
    long_name = "A" * (words * MAX_WORD_CHARS)
    read: list[str] = []
    real = supersession._normalised

    def counted(text: str, *, cased: bool = False) -> str:
        read.append(text)
        return real(text, cased=cased)

    monkeypatch.setattr(supersession, "_normalised", counted)
    assert fact_of(f"{long_name} lives in Lisbon", words) is None
    assert read == []  # not even lower-cased
    assert fact_of("Alice lives in Lisbon", words) is not None
    spaced = "Alice lives in" + " " * (words * MAX_WORD_CHARS) + "Lisbon"
    assert fact_of(spaced, words) is None
    huge = SupersessionPolicy(max_words=10**9)
    assert fact_of("A" * (MAX_WORDS * MAX_WORD_CHARS) + " lives in Lisbon", huge.max_words) is None
    employer = "Alice works at " + " ".join(["Acme"] * MAX_WORDS)
    assert fact_of(employer, huge.max_words) is None
    assert [s.older for s in detect(LISBON, [OSAKA], policy)] == ["osaka"]


def test_a_write_that_states_no_fact_reads_none_of_its_neighbours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its own text was parsed again for every neighbour (and each neighbour's with it)."""
    read: list[str] = []
    real = supersession.fact_of

    def counted(content: str, max_words: int = 16, *, generic: bool = False) -> Fact | None:
        read.append(content)
        return real(content, max_words, generic=generic)

    monkeypatch.setattr(supersession, "fact_of", counted)
    chat = Version("chat", "We talked about the weather for a while.", T0 + hours(24))
    neighbours = [dataclasses.replace(OSAKA, memory_id=f"o{i}") for i in range(50)]
    assert detect(chat, neighbours, RULE) == []
    assert read == [chat.content]
    read.clear()
    assert len(detect(LISBON, neighbours, RULE)) == 50
    assert read.count(LISBON.content) <= 2
    assert read.count(OSAKA.content) == 50


def test_a_neighbour_at_exactly_min_cosine_is_close_enough() -> None:
    """SPEC: a cosine of at least ``min_cosine``."""
    older = dataclasses.replace(OSAKA, similarity=RULE.min_cosine)
    assert [s.older for s in detect(LISBON, [older], RULE)] == ["osaka"]
    below = dataclasses.replace(OSAKA, similarity=RULE.min_cosine - 1e-9)
    assert detect(LISBON, [below], RULE) == []


# -- a version whose successor leaves recall (SPEC section 6, rule zero) ----------------------------


def step(
    states: dict[str, MemoryState], target: str, event: Event
) -> tuple[list[tuple[str, Event]], list[Notice]]:
    """Apply ``event`` to ``target`` as the worker does; returns the decisions it sends, not yet
    delivered: the supersessions passed on (relink, bypass; a write's reassertion and revival),
    then the notices (reinstatements, succession).
    """
    before = states[target]
    new, effects = apply(before, event, Policy())
    assert new is not None
    states[target] = new
    passed: list[Relink] = []
    if isinstance(event, Supersede):
        passed += [*relink(before, event), *bypass(before, event)]
    if isinstance(event, Write):
        reasserted = reassertion(new, event.at)
        passed += [*([reasserted] if reasserted is not None else []), *revival(new, event.at)]
    notices = [*reinstatements(before, new, event, effects[0])]
    successor = succession(new, event, effects[0])
    notices += [successor] if successor is not None else []
    return [(p.target, p.event) for p in passed], notices


def carry(states: dict[str, MemoryState], steps: list[tuple[str, Event]]) -> list[Notice]:
    """Apply ``steps`` (memory id, event) in order as the worker does, each followed by the
    decisions it sends (:func:`step`), until none is left; returns every notice sent.
    """
    queue: deque[tuple[str, Event]] = deque(steps)
    sent: list[Notice] = []
    while queue:
        passed, notices = step(states, *queue.popleft())
        queue.extend(passed)
        sent += notices
        queue.extend((n.target, n.event) for n in notices)
    return sent


def versions(*names_at: tuple[str, float]) -> dict[str, MemoryState]:
    return {m: created(0.5, memory_id=m, at=T0 + hours(h)) for m, h in names_at}


def current(states: dict[str, MemoryState]) -> dict[str, str | None]:
    return {m: s.superseded_by for m, s in states.items()}


DELETE = Retire(T0 + hours(50), Lifecycle.DELETED, "deleted through the API")


def test_deleting_the_newer_version_makes_the_older_current_again() -> None:
    states = versions(("osaka", 0), ("lisbon", 10))
    sent = carry(states, [("osaka", Supersede(T0 + hours(10), "lisbon", "rule"))])
    assert [(n.target, type(n.event)) for n in sent] == [("lisbon", Succeeds)]
    assert states["lisbon"].predecessors == ("osaka",)
    assert states["osaka"].valid_to == T0 + hours(10)
    sent = carry(states, [("lisbon", DELETE), ("lisbon", Purge(T0 + hours(51), "purged"))])
    (reinstate,) = sent  # the purge of a memory deleted already sends nothing again
    assert reinstate.target == "osaka"
    assert isinstance(reinstate.event, Reinstate)
    assert (reinstate.event.by, reinstate.event.successor) == ("lisbon", None)
    osaka = states["osaka"]
    assert (osaka.valid_to, osaka.superseded_by, osaka.state) == (None, None, Lifecycle.ACTIVE)
    again, effects = apply(osaka, reinstate.event, Policy())  # a copy, delivered again
    assert (again, effects[0].kind) == (osaka, EffectKind.IGNORED)


def test_a_reinstated_version_is_audited_and_a_redelivered_reinstate_is_skipped() -> None:
    states = versions(("osaka", 0), ("lisbon", 10))
    carry(states, [("osaka", Supersede(T0 + hours(10), "lisbon", "rule"))])
    event = Reinstate(T0 + hours(50), "lisbon", "lisbon is deleted", position=Position("w/0", 7))
    osaka, effects = apply(states["osaka"], event, Policy())
    assert osaka is not None
    assert osaka.valid_to is None
    assert [e.kind for e in effects] == [EffectKind.REINSTATED]
    assert "lisbon" in effects[0].reason
    again, effects = apply(osaka, event, Policy())
    assert (again, effects[0].kind) == (osaka, EffectKind.SKIPPED)


def test_deleting_the_end_of_a_chain_reinstates_only_the_version_before_it() -> None:
    states = versions(("a", 0), ("n", 10), ("p", 20))
    carry(
        states,
        [("a", Supersede(T0 + hours(10), "n", "rule")), ("n", Supersede(T0 + hours(20), "p", "r"))],
    )
    assert (states["n"].predecessors, states["p"].predecessors) == (("a",), ("n",))
    carry(states, [("p", DELETE)])
    assert current(states) == {"a": "n", "n": None, "p": None}
    assert (states["a"].valid_to, states["n"].valid_to) == (T0 + hours(10), None)


def test_deleting_the_middle_of_a_chain_passes_its_predecessor_to_its_successor() -> None:
    states = versions(("a", 0), ("n", 10), ("p", 20))
    carry(
        states,
        [("a", Supersede(T0 + hours(10), "n", "rule")), ("n", Supersede(T0 + hours(20), "p", "r"))],
    )
    carry(states, [("n", DELETE)])
    # as if n had never been: a is valid until p, which now records it
    assert current(states) == {"a": "p", "n": "p", "p": None}
    assert states["a"].valid_to == T0 + hours(20)
    assert states["p"].predecessors == ("n", "a")
    carry(states, [("p", DELETE)])  # then the last one: a is current again
    a = states["a"]
    assert (a.superseded_by, a.valid_to) == (None, None)
    assert states["n"].state is Lifecycle.DELETED  # a deleted version is not touched


def test_a_version_relinked_or_rewritten_since_is_left_as_it_is() -> None:
    states = versions(("osaka", 0), ("porto", 5), ("lisbon", 10))
    carry(states, [("osaka", Supersede(T0 + hours(10), "lisbon", "rule"))])
    # porto, earlier than lisbon, arrives late: the chain puts it between osaka and lisbon
    carry(states, [("osaka", Supersede(T0 + hours(5), "porto", "rule"))])
    assert current(states) == {"osaka": "porto", "porto": "lisbon", "lisbon": None}
    assert states["lisbon"].predecessors == ("osaka", "porto")  # osaka's is stale now
    carry(states, [("lisbon", DELETE)])
    assert current(states) == {"osaka": "porto", "porto": None, "lisbon": None}
    assert states["osaka"].valid_to == T0 + hours(5)
    # a version written again after its successor is current already: a reinstate is a copy
    rewritten, _ = apply(states["osaka"], write("osaka", at=T0 + hours(30)), Policy())
    assert rewritten is not None
    kept, effects = apply(rewritten, Reinstate(T0 + hours(50), "porto", "gone"), Policy())
    assert (kept, effects[0].kind) == (rewritten, EffectKind.IGNORED)


@pytest.mark.parametrize("to", [Lifecycle.DELETED, Lifecycle.FORGOTTEN])
def test_a_deleted_or_forgotten_predecessor_is_not_reinstated(to: Lifecycle) -> None:
    states = versions(("osaka", 0), ("lisbon", 10))
    carry(states, [("osaka", Supersede(T0 + hours(10), "lisbon", "rule"))])
    carry(states, [("osaka", Retire(T0 + hours(20), to, "asked"))])
    gone = states["osaka"]
    carry(states, [("lisbon", DELETE)])
    assert states["osaka"] == gone


def test_a_successor_gone_before_it_learns_its_predecessor_reinstates_it_at_once() -> None:
    states = versions(("osaka", 0), ("lisbon", 10))
    carry(states, [("lisbon", Retire(T0 + hours(10), Lifecycle.DELETED, "deleted"))])
    # the rule's decision reaches osaka after lisbon was deleted
    sent = carry(states, [("osaka", Supersede(T0 + hours(10), "lisbon", "rule"))])
    assert [type(n.event) for n in sent] == [Succeeds, Reinstate]
    assert states["lisbon"].predecessors == ()
    assert (states["osaka"].valid_to, states["osaka"].superseded_by) == (None, None)


def test_a_successor_merged_away_passes_its_predecessor_to_the_survivor() -> None:
    states = versions(("osaka", 0), ("lisbon", 10), ("lisbon-copy", 12))
    carry(states, [("osaka", Supersede(T0 + hours(10), "lisbon", "rule"))])
    merged = Retire(T0 + hours(40), Lifecycle.DELETED, "merged", "lisbon-copy")
    carry(states, [("lisbon", merged)])
    # the survivor holds the newer value's words: the older stays superseded, by it
    assert current(states) == {"osaka": "lisbon-copy", "lisbon": None, "lisbon-copy": None}
    assert states["osaka"].valid_to == T0 + hours(10)
    assert states["lisbon-copy"].predecessors == ("osaka",)


def test_versions_deleted_in_a_cycle_leave_their_predecessor_current() -> None:
    states = versions(("osaka", 0), ("a", 10), ("b", 20))
    carry(states, [("osaka", Supersede(T0 + hours(10), "a", "rule"))])
    # two deleted versions that supersede each other (one rewritten back): no end to pass to
    states["a"] = dataclasses.replace(
        states["a"], state=Lifecycle.DELETED, superseded_by="b", valid_to=T0 + hours(20)
    )
    states["b"] = dataclasses.replace(
        states["b"], state=Lifecycle.DELETED, superseded_by="a", valid_to=T0 + hours(30)
    )
    sent = carry(states, [("a", Succeeds(T0 + hours(10), "osaka", "again"))])
    assert len(sent) <= 2 * (MAX_RELINKS + 1)
    assert (states["osaka"].superseded_by, states["osaka"].valid_to) == (None, None)


def test_a_memory_forgotten_by_an_access_reinstates_what_it_superseded() -> None:
    policy = Policy.build(decay="powermem", lifecycle="powermem")
    lisbon = dataclasses.replace(created(0.2, memory_id="lisbon"), predecessors=("osaka",))
    forgotten, effects = apply(lisbon, Access(T0 + hours(24 * 30)), policy)
    assert forgotten is not None
    assert forgotten.state is Lifecycle.FORGOTTEN
    (notice,) = reinstatements(lisbon, forgotten, Access(T0 + hours(720)), effects[0])
    assert (notice.target, notice.event) == (
        "osaka",
        Reinstate(T0 + hours(720), "lisbon", "lisbon is forgotten"),
    )


def test_a_successor_keeps_its_newest_predecessors_each_once() -> None:
    state = created(0.5, memory_id="new")
    for i in range(MAX_PREDECESSORS + 2):
        new, effects = apply(state, Succeeds(T0 + hours(1), f"v{i}", "rule"), Policy())
        assert new is not None
        state = new
        assert effects[0].kind is EffectKind.SUCCEEDS
    assert len(state.predecessors) == MAX_PREDECESSORS
    assert state.predecessors[-1] == f"v{MAX_PREDECESSORS + 1}"
    again, effects = apply(state, Succeeds(T0 + hours(2), "v9", "rule"), Policy())
    assert (again, effects[0].kind) == (state, EffectKind.IGNORED)


# -- a supersession that races its target's deletion, and a forgotten version written again -------


@pytest.mark.parametrize("reinstate_first", [True, False])
@pytest.mark.parametrize("to", [Lifecycle.DELETED, Lifecycle.FORGOTTEN])
def test_a_version_checked_against_one_being_deleted_supersedes_the_one_reinstated(
    to: Lifecycle, reinstate_first: bool
) -> None:
    """n superseded by p; q's check found p current and sent p a supersede, which reached it after
    p left recall. p's reinstate made n current and the supersede was ignored: n and q were both
    current. It is passed on to n in p's place, with the same outcome in either order.
    """
    states = versions(("n", 0), ("p", 10), ("q", 20))
    carry(states, [("n", Supersede(T0 + hours(10), "p", "rule"))])
    _, (reinstate,) = step(states, "p", Retire(T0 + hours(30), to, "asked"))
    late = Supersede(T0 + hours(20), "q", "rule")
    passed, _ = step(states, "p", late)
    held = (reinstate.target, reinstate.event)
    carry(states, [held, *passed] if reinstate_first else [*passed, held])
    assert current(states) == {"n": "q", "p": None, "q": None}
    assert states["n"].valid_to == late.at
    assert states["q"].predecessors == ("n",)
    assert states["p"].state is to
    assert [(m, e.by, e.at, e.replaces, e.hops) for m, e in passed if isinstance(e, Supersede)] == [
        ("n", "q", late.at, "p", 1)
    ]


@pytest.mark.parametrize("reinstate_first", [True, False])
def test_a_supersession_that_meets_a_deleted_middle_version_keeps_one_chain(
    reinstate_first: bool,
) -> None:
    """a -> n -> p, n deleted (a is passed to p) while q, between n and p in time, is passed to n
    by its check: whichever reaches a first, the chain is a -> q -> p.
    """
    states = versions(("a", 0), ("n", 10), ("q", 15), ("p", 20))
    carry(
        states,
        [("a", Supersede(T0 + hours(10), "n", "rule")), ("n", Supersede(T0 + hours(20), "p", "r"))],
    )
    _, (reinstate,) = step(states, "n", DELETE)
    passed, _ = step(states, "n", Supersede(T0 + hours(15), "q", "rule"))
    held = (reinstate.target, reinstate.event)
    carry(states, [held, *passed] if reinstate_first else [*passed, held])
    assert current(states) == {"a": "q", "n": "p", "q": "p", "p": None}
    assert (states["a"].valid_to, states["q"].valid_to) == (T0 + hours(15), T0 + hours(20))
    assert states["q"].predecessors == ("a",)
    # the end of the chain deleted while a later version's decision reaches it: a -> q -> r
    states["r"] = created(0.5, memory_id="r", at=T0 + hours(30))
    carry(states, [("p", DELETE), ("p", Supersede(T0 + hours(30), "r", "rule"))])
    assert current(states) == {"a": "q", "n": "p", "q": "r", "p": None, "r": None}


def test_a_supersession_met_again_past_a_deleted_version_passes_the_same_on() -> None:
    states = versions(("n", 0), ("p", 10), ("q", 20))
    carry(states, [("n", Supersede(T0 + hours(10), "p", "rule"))])
    carry(states, [("p", DELETE)])
    assert current(states) == {"n": None, "p": None, "q": None}
    late = Supersede(T0 + hours(20), "q", "rule", position=Position("w/0", 7))
    first, _ = step(states, "p", late)
    again, _ = step(states, "p", late)  # its first delivery died before its decisions were sent
    assert again == first
    assert [m for m, _ in first] == ["n"]
    carry(states, first)
    n = states["n"]
    assert (n.superseded_by, n.valid_to) == ("q", late.at)
    carry(states, again)  # a copy
    assert states["n"] == n
    # nothing passed past a memory in recall, by itself, too often passed, or merged away
    gone = states["p"]
    assert bypass(states["q"], Supersede(T0 + hours(30), "r", "rule")) == ()
    assert bypass(gone, Supersede(T0 + hours(30), "p", "rule")) == ()
    assert bypass(gone, Supersede(T0 + hours(30), "r", "rule", hops=MAX_RELINKS)) == ()
    merged = dataclasses.replace(gone, merged_into="p-copy")
    assert bypass(merged, Supersede(T0 + hours(30), "r", "rule")) == ()
    # an LLM's decision is passed on as it came (not chained)
    (llm,) = bypass(gone, Supersede(T0 + hours(30), "r", "llm", chains=False))
    assert (llm.target, llm.event.chains, llm.event.replaces) == ("n", False, "p")


@pytest.mark.parametrize("words", ["p", "p, in other words"])
def test_a_forgotten_version_written_again_supersedes_the_one_it_reinstated(words: str) -> None:
    """n superseded by p, p forgotten (n current again), then p written again: p is current, and
    n was left current beside it (same words are not checked for supersession again).
    """
    states = versions(("n", 0), ("p", 10))
    carry(states, [("n", Supersede(T0 + hours(10), "p", "rule"))])
    carry(states, [("p", Retire(T0 + hours(30), Lifecycle.FORGOTTEN, "faded"))])
    assert current(states) == {"n": None, "p": None}
    carry(states, [("p", write("p", at=T0 + hours(40), content=words))])
    assert states["p"].state is Lifecycle.ACTIVE
    assert current(states) == {"n": "p", "p": None}
    assert states["n"].valid_to == T0 + hours(40)
    assert states["p"].predecessors == ("n",)


def test_a_revival_is_sent_again_on_redelivery_and_not_for_other_writes() -> None:
    states = versions(("n", 0), ("p", 10), ("r", 20))
    carry(states, [("n", Supersede(T0 + hours(10), "p", "rule"))])
    assert revival(states["p"], T0 + hours(10)) == ()  # created: nothing to supersede again
    carry(states, [("p", write("p", at=T0 + hours(12)))])  # written again while current
    assert revival(states["p"], T0 + hours(12)) == ()
    n = states["n"]
    # brought back from archived (which reinstates nothing): a copy, which n ignores
    carry(states, [("p", Retire(T0 + hours(14), Lifecycle.ARCHIVED, "faded"))])
    carry(states, [("p", write("p", at=T0 + hours(16)))])
    assert [(r.target, r.event.at) for r in revival(states["p"], T0 + hours(16))] == [
        ("n", T0 + hours(16))
    ]
    assert states["n"] == n
    carry(states, [("p", Retire(T0 + hours(30), Lifecycle.FORGOTTEN, "faded"))])
    # n reinstated, then superseded by r: p written again after r supersedes r in turn
    carry(states, [("n", Supersede(T0 + hours(20), "r", "rule"))])
    rewrite = dataclasses.replace(write("p", at=T0 + hours(40)), position=Position("w/0", 9))
    first, _ = step(states, "p", rewrite)
    again, _ = step(states, "p", rewrite)  # skipped by offset, decided on the state it left
    assert again == first
    assert [(m, e.at) for m, e in first] == [("n", rewrite.at)]
    carry(states, first)
    assert current(states) == {"n": "r", "p": None, "r": "p"}
    kept = dict(states)
    carry(states, again)  # copies
    assert states == kept


def test_a_supersession_meeting_versions_gone_in_a_cycle_is_passed_on_a_bounded_number_of_times() -> (
    None
):
    """Versions written back and forth list each other as predecessors; all forgotten (each
    reinstated before it left), a supersede reaching one was passed to the others, which passed
    it back, multiplying the decisions at every hop: 131,071 for three versions.
    """
    gone = {"state": Lifecycle.FORGOTTEN}
    states = versions(("m1", 0), ("m2", 1), ("m3", 2), ("m4", 30))
    for m in ("m1", "m2", "m3"):
        others = tuple(o for o in ("m1", "m2", "m3") if o != m)
        states[m] = dataclasses.replace(states[m], predecessors=others, **gone)  # type: ignore[arg-type]
    queue: deque[tuple[str, Event]] = deque([("m1", Supersede(T0 + hours(30), "m4", "rule"))])
    applied = 0
    while queue and applied < 1_000:
        passed, notices = step(states, *queue.popleft())
        applied += 1
        queue.extend([*passed, *((n.target, n.event) for n in notices)])
    assert applied == 3  # m1, then m2 and m3 once each
    assert all(states[m].superseded_by is None for m in ("m1", "m2", "m3"))


FORGET = Retire(T0 + hours(50), Lifecycle.FORGOTTEN, "forgotten")


@pytest.mark.parametrize("deleted_first", [False, True])
def test_a_supersession_passed_on_from_a_gone_successor_goes_past_a_gone_middle_version(
    deleted_first: bool,
) -> None:
    """m1 < m2 < m3 chained, m4 checked against m3 while m3 was being forgotten and m2 deleted:
    the supersede passed from m3 to m2 stopped there (m2 superseded by m3 before m4), since
    relink would hand it to m2's successor, which was m3 itself: m1 and m4 both current.
    """
    states = versions(("m1", 0), ("m2", 10), ("m3", 20), ("m4", 30))
    carry(
        states,
        [
            ("m1", Supersede(T0 + hours(10), "m2", "rule")),
            ("m2", Supersede(T0 + hours(20), "m3", "rule")),
        ],
    )
    newer = Supersede(T0 + hours(30), "m4", "rule")
    steps: list[tuple[str, Event]] = [("m3", FORGET), ("m3", newer), ("m2", DELETE)]
    carry(states, [steps[2], *steps[:2]] if deleted_first else steps)
    assert current(states) == {"m1": "m4", "m2": "m3", "m3": None, "m4": None}
    assert states["m3"].state is Lifecycle.FORGOTTEN


def test_a_restatement_at_the_instant_of_a_newer_version_wins_the_tie_with_no_cycle() -> None:
    """m4 written again at the instant m5 was written (client times in whole seconds): m5's
    supersede of m4 applied (not before the restatement), and m3's chain passed m4's to m5,
    so m4 and m5 superseded each other and no version of the fact was current.
    """
    t = T0 + hours(5)
    states = versions(("m3", 3), ("m4", 4), ("m5", 5))
    states["m4"], _ = apply(states["m4"], write("m4", at=t), Policy())  # type: ignore[assignment]
    assert states["m4"].stated_at == t
    carry(
        states,
        [
            ("m3", Supersede(t, "m5", "m5's check")),
            ("m3", Supersede(t, "m4", "m4's restatement's check")),
            ("m4", Supersede(t, "m5", "m5's check")),
        ],
    )
    assert current(states) == {"m3": "m5", "m4": None, "m5": "m4"}


def test_a_version_supersedes_the_memory_its_write_names_while_it_is_in_recall() -> None:
    """An update's version sends the memory its write ``supersedes`` a ``supersede`` from the
    write's time, decided on the state the write left: none when the write names none or the
    version itself, or when the version is out of recall (deleted before its write was met
    again: what it superseded was reinstated then).
    """
    version = created(0.5, memory_id="lisbon", at=T0 + hours(10))
    at = T0 + hours(10)
    sent = versioning(version, "osaka", at)
    assert sent is not None
    assert (sent.target, sent.event.by, sent.event.at) == ("osaka", "lisbon", at)
    assert sent.event.chains
    assert versioning(version, None, at) is None
    assert versioning(version, "lisbon", at) is None
    for gone in (Lifecycle.DELETED, Lifecycle.FORGOTTEN):
        assert versioning(dataclasses.replace(version, state=gone), "osaka", at) is None
    archived = dataclasses.replace(version, state=Lifecycle.ARCHIVED)
    assert versioning(archived, "osaka", at) is not None
    # deleted, then written anew by another write: the update's write met again is not its life's
    anew = dataclasses.replace(version, created_at=at + hours(1))
    assert versioning(anew, "osaka", at) is None
    osaka = created(0.5, memory_id="osaka")
    superseded, effects = apply(osaka, sent.event, Policy())
    assert superseded is not None
    assert (superseded.superseded_by, superseded.valid_to, effects[0].kind) == (
        "lisbon",
        at,
        EffectKind.SUPERSEDED,
    )


def test_a_pair_counts_for_the_stem_when_its_newer_side_says_its_value_is_new() -> None:
    """Whichever of the two is the statement: what the worker keeps of a fact stem's hits."""
    t8, t10 = T0, T0 + hours(2)
    old, new = "I live in Toronto.", "I live in Hanoi now."
    assert newer_says_new(t10, new, t8, old)  # a marked statement, an older hit
    assert newer_says_new(t8, old, t10, new)  # an older value written last, a marked newer hit
    assert not newer_says_new(t10, "I live in Hanoi.", t8, old)
    assert not newer_says_new(t8, new, t10, "I live in Hanoi.")  # the newer side is unmarked
    assert not newer_says_new(t8, new, t8, "I live in Lima now.")  # one time: neither is newer
