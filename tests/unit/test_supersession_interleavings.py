"""Seeded interleavings of supersession decisions keep rule zero: forgetting never costs recall.

A worker meets the records about one fact's versions in any order across memories (each memory's
own records stay in order: one FIFO queue per key): supersedes sent by each version's check,
restatements (some at the very instant another version was written), deletes, forgets,
rewrites, purges, API updates (one write naming what it supersedes, dead-lettered or applied,
its version deleted and the update sent again; and, as logs from before 2026-12-07 hold them, a
supersede whose version's write comes late), and consolidation rechecks planned on a
store that may have moved on by the time they land. Only orderings a worker can meet are made: a
supersede is dated at the newer version's statement, never after it. Once rechecks find nothing
more, no version in recall may hide behind one out of recall, purged or unknown; every group of
versions with one in recall keeps a current one in recall; and the decisions stay few (no storm).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from datetime import datetime

import orjson

from memcore import Lifecycle
from memcore.consolidation import orphaned_versions, to_events
from memcore.state import Access, Write
from storage import MemoryRow
from storage.records import decision_value
from streams.consolidation import item_of

from .test_streams_unit import Tables, decision_bytes, write_bytes

Record = tuple[bytes, bytes]
IN_RECALL = (Lifecycle.ACTIVE, Lifecycle.ARCHIVED)
IDS = ["m1", "m2", "m3", "m4", "m5"]
LATE = "m9"  # an API update's new version, whose write may come after a recheck (logs before 12-07)
UPD = ["u1", "u2"]  # versions of API updates since 2026-12-07: one write naming what it supersedes
DAYS = {m: i + 1 for i, m in enumerate(IDS)} | {LATE: 6, "u1": 6, "u2": 7}
ALL = [*IDS, LATE, *UPD]
MAX_DECISIONS = 500
SEEDS = range(40)
RUNS_PER_SEED = 6


def at(day: int) -> str:
    return f"2026-06-{day:02d}T12:00:00+00:00"


def key(memory: str) -> bytes:
    return f"acme/{memory}".encode()


def write(memory: str, day: int, supersedes: str | None = None) -> Record:
    # an update's words state no fact the rule reads: only its write supersedes what it updates
    content = f"Alice lives in {memory}" if memory not in UPD else f"See the notes of {memory}"
    return key(memory), write_bytes(
        memory_id=memory, content=content, at=at(day), supersedes=supersedes
    )


def supersede(memory: str, by: str, day: int, chains: bool = True) -> Record:
    raw = decision_bytes(memory_id=memory, decision="supersede", to=None, by=by, at=at(day))
    return key(memory), raw if chains else orjson.dumps(orjson.loads(raw) | {"chains": False})


def retire(memory: str, to: str, day: int) -> Record:
    return key(memory), decision_bytes(memory_id=memory, to=to, at=at(day))


def describe(record: Record) -> str:
    doc = orjson.loads(record[1])
    other = doc.get("by") or doc.get("predecessor") or doc.get("to") or ""
    return f"{doc['memory_id']} {doc.get('decision', 'write')} {other} @{doc['at'][8:10]}".strip()


@dataclass(frozen=True)
class Action:
    kind: str  # "queue", "restate" (then its checks), "purge", "recheck", "late-write"
    records: tuple[Record, ...] = ()
    memory: str = ""
    lag: bool = False  # a recheck planned now and queued later


def checks(rng: random.Random, newer: str, day: int, chains: bool) -> tuple[Record, ...]:
    """The supersedes a statement of ``newer`` at ``day`` sends: some versions created before."""
    older = [m for m in IDS if m != newer and DAYS[m] < day]
    picked = rng.sample(older, rng.randint(1, len(older))) if older else []
    return tuple(supersede(m, newer, day, chains) for m in picked)


def scenario(rng: random.Random) -> tuple[list[Record], list[Action]]:
    """Writes and supersedes applied at once, then the actions met in a random interleaving."""
    setup = [write(m, DAYS[m]) for m in IDS]
    for _ in range(rng.randint(1, 4)):
        a, b = rng.sample(IDS, 2)
        if DAYS[a] < DAYS[b]:
            setup.append(supersede(a, b, DAYS[b], rng.random() < 0.7))
    if rng.random() < 0.4:
        setup.append(retire(rng.choice(IDS), "forgotten", 6))
    actions: list[Action] = []
    for _ in range(rng.randint(3, 8)):
        k = rng.random()
        if k < 0.2:  # a version's check, sent after its write
            newer = rng.choice(IDS[1:])
            actions += [Action("queue", (r,)) for r in checks(rng, newer, DAYS[newer], True)]
        elif k < 0.4:  # stated again, often at the instant another version was written
            b = rng.choice(IDS[:-1])
            day = rng.choice([DAYS[b] + 1, *(d for d in DAYS.values() if d > DAYS[b])])
            found = checks(rng, b, day, rng.random() < 0.7)
            actions.append(Action("restate", (write(b, day), *found)))
        elif k < 0.55:
            to = rng.choice(["deleted", "forgotten"])
            actions.append(
                Action("queue", (retire(rng.choice([*IDS, LATE]), to, 7 + rng.randint(0, 2)),))
            )
        elif k < 0.65:
            actions.append(
                Action("queue", (write(rng.choice([*IDS, LATE]), 10 + rng.randint(0, 2)),))
            )
        elif k < 0.73:
            actions.append(Action("purge", memory=rng.choice([*IDS, LATE])))
        elif k < 0.8:
            actions.append(Action("recheck", lag=rng.random() < 0.5))
        elif k < 0.9:  # an API update: one write naming what it supersedes, or dead-lettered
            version = rng.choice(UPD)
            updated = rng.choice([IDS[-1], *(m for m in IDS if DAYS[m] < DAYS[version])])
            if rng.random() < 0.5:  # applied (else nothing of it is ever applied)
                actions.append(Action("queue", (write(version, DAYS[version], updated),)))
            if rng.random() < 0.3:  # the user deletes the version; the update maybe sent again
                actions.append(Action("queue", (retire(version, "deleted", 8),)))
                if rng.random() < 0.5:
                    actions.append(Action("queue", (write(version, DAYS[version], updated),)))
        else:  # an API update before 12-07: the old version superseded, the new one's write queued
            actions.append(Action("queue", (supersede(rng.choice(IDS), LATE, DAYS[LATE]),)))
            if rng.random() < 0.8:
                actions.append(Action("late-write"))
    return setup, actions


class World:
    def __init__(self, setup: list[Record]) -> None:
        self.tables = Tables()
        self.queues: dict[bytes, deque[bytes]] = {}
        self.after: dict[Record, list[Record]] = {}  # a restatement's checks, sent once it lands
        self.steps: list[str] = []
        self.applied = 0
        self.updates: dict[str, str] = {}  # an applied update's version -> the memory it updated
        for k, v in setup:
            self.tables.carry_out(self.tables.write(v, k).out)

    def enqueue(self, record: Record) -> None:
        self.queues.setdefault(record[0], deque()).append(record[1])
        self.steps.append(f"queue {describe(record)}")

    def ready(self) -> list[bytes]:
        return [k for k, q in self.queues.items() if q]

    def apply(self, k: bytes) -> None:
        record = (k, self.queues[k].popleft())
        self.applied += 1
        updated = orjson.loads(record[1]).get("supersedes")
        if updated is not None:
            self.updates[k.decode().split("/")[1]] = updated
        self.steps.append(f"apply {describe(record)}")
        for out in self.tables.write(record[1], k).out:
            if out.role == "memory-writes" and out.key is not None:
                self.queues.setdefault(out.key, deque()).append(out.value)
        for found in self.after.pop(record, []):
            self.enqueue(found)

    def recheck(self) -> list[Record]:
        """The records of a consolidation's recheck of orphaned versions, planned on the store."""
        items = []
        for m in ALL:
            loaded = self.tables.processor.load(f"acme/{m}")
            if loaded is not None and not loaded[0].purged:
                items.append(item_of(MemoryRow.of(*loaded)))
        by_id = {i.memory_id: i for i in items}
        planned = datetime.fromisoformat(at(20))
        records = []
        for decision in orphaned_versions(items):
            for target, event in to_events(decision, by_id, planned):
                assert not isinstance(event, Write | Access)  # a recheck only relinks
                records.append((key(target), orjson.dumps(decision_value("acme", target, event))))
        return records

    def purge(self, memory: str) -> None:
        state = self.tables.processor.state(f"acme/{memory}")
        if state is not None:
            changed = state.state_changed_at.isoformat()
            raw = decision_bytes(
                memory_id=memory, decision="purge", to=None, at=at(15), state_changed_at=changed
            )
            self.enqueue((key(memory), raw))


def interleave(setup: list[Record], actions: list[Action], rng: random.Random) -> World:
    world = World(setup)
    todo, lagging = deque(actions), deque[list[Record]]()
    while (todo or world.ready() or lagging) and world.applied < MAX_DECISIONS:
        ready, roll = world.ready(), rng.random()
        if todo and (not ready or roll < 0.35):
            action = todo.popleft()
            if action.kind == "queue":
                for record in action.records:
                    world.enqueue(record)
            elif action.kind == "restate":
                world.enqueue(action.records[0])
                world.after.setdefault(action.records[0], []).extend(action.records[1:])
            elif action.kind == "late-write":
                world.enqueue(write(LATE, DAYS[LATE]))
            elif action.kind == "purge":
                world.purge(action.memory)
            elif action.lag:
                lagging.append(world.recheck())
                world.steps.append("plan recheck")
            else:
                for record in world.recheck():
                    world.enqueue(record)
        elif lagging and (not ready or roll > 0.9):
            for record in lagging.popleft():
                world.enqueue(record)
        elif ready:
            world.apply(rng.choice(ready))
    for _ in range(10):  # rechecks until quiescent
        found = world.recheck()
        if not found or world.applied >= MAX_DECISIONS:
            break
        for record in found:
            world.enqueue(record)
        while world.ready() and world.applied < MAX_DECISIONS:
            world.apply(rng.choice(world.ready()))
    else:
        world.steps.append("rechecks did not quiesce")
    return world


def rule_zero_violations(world: World) -> list[str]:
    states = {m: world.tables.processor.state(f"acme/{m}") for m in ALL}
    live = {m: s for m, s in states.items() if s is not None and not s.purged}
    in_recall = {m: s for m, s in live.items() if s.state in IN_RECALL}
    bad = []
    for m, s in in_recall.items():
        if s.superseded_by is not None and s.superseded_by not in in_recall:
            where = live[s.superseded_by].state if s.superseded_by in live else "purged or unknown"
            bad.append(f"{m} hidden behind {s.superseded_by} ({where})")
    group = {m: m for m in states}

    def root(m: str) -> str:
        while group[m] != m:
            m = group[m]
        return m

    for m, s in live.items():
        for other in (s.superseded_by, *s.predecessors):
            if other in group:
                group[root(other)] = root(m)
    for r in {root(m) for m in in_recall}:
        members = sorted(m for m in in_recall if root(m) == r)
        if all(in_recall[m].superseded_by is not None for m in members):
            bad.append(f"versions {members} in recall: none current")
    for version, updated in world.updates.items():  # an applied update leaves one of them current
        v, u = in_recall.get(version), in_recall.get(updated)
        if v is None or u is None or v.superseded_by is not None or u.superseded_by is not None:
            continue
        if (u.stated_at or u.created_at) < v.created_at:  # not stated again since the update
            bad.append(f"{updated} current beside {version}, which updated it")
    if world.steps[-1:] == ["rechecks did not quiesce"] or world.applied >= MAX_DECISIONS:
        bad.append(f"{world.applied} decisions applied, rechecks still finding more")
    return bad


def test_any_interleaving_of_supersession_decisions_keeps_a_current_version_in_recall() -> None:
    for seed in SEEDS:
        setup, actions = scenario(random.Random(seed))
        for run in range(RUNS_PER_SEED):
            world = interleave(setup, actions, random.Random(seed * 1000 + run))
            bad = rule_zero_violations(world)
            steps = "\n  ".join([*map(describe, setup), "--", *world.steps])
            assert not bad, f"seed {seed} run {run}: {bad}\n  {steps}"
