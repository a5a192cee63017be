"""Consolidation on a real Kafka broker and Milvus server: requests in, decisions applied by the
state agent, Milvus following the table."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson
import pytest

from memcore import Supersede
from storage import Filters, MemoryRow, MilvusStore, to_us
from storage.milvus import ANY_STATE
from storage.records import decision_value
from storage.rows import live_values, with_live
from tests.infra import ROOT
from tests.integration.harness import (
    Stack,
    WorkerProcess,
    dead_letters,
    eventually,
    produce,
    read_all,
    table_states,
)
from tests.integration.test_streams import T0, access_msg, at, write_msg

pytestmark = pytest.mark.integration


def basis(*values: float) -> list[float]:
    return [*values, *([0.0] * (8 - len(values)))]


MEMORIES: dict[str, tuple[list[float], str]] = {
    "dup1": (basis(0, 1), "the same words"),
    "dup2": (basis(0, 1), "the same words"),
    "near1": (basis(0, 0, 1), "Alice prefers Python"),
    "near2": (basis(0, 0, 1, 0.2), "Alice likes Python best"),  # cosine 0.981 to near1
    "c1": (basis(0, 0, 0, 0, 1), "Standup is at nine."),
    "c2": (basis(0, 0, 0, 0, 1, 0.5), "Standup ran long today."),  # 0.894 to c1
    "c3": (basis(0, 0, 0, 0, 1, 0, 0.5), "We talked about standup notes."),  # 0.894 to c1
    "lone": (basis(0, 0, 0, 0, 0, 0, 0, 1), "Unrelated fact"),
}
ACCESSES = {"dup1": 1, "dup2": 3, "near1": 2, "near2": 4}


def load(stack: Stack, tenant: str) -> None:
    writes = [
        write_msg(tenant, m, vec, content=text, memory_type="semantic", at=at(i))
        for i, (m, (vec, text)) in enumerate(MEMORIES.items())
    ]
    produce(stack.bootstrap, stack.topic("memory-writes"), writes)
    accesses = [
        access_msg(tenant, m, 60 + n, "recall")
        for m, count in ACCESSES.items()
        for n in range(count)
    ]
    produce(stack.bootstrap, stack.topic("access-events"), accesses)


def rows(stack: Stack, store: MilvusStore, tenant: str) -> dict[str, MemoryRow]:
    """A tenant's Milvus rows with their live fields (counters, importance, clock) from the
    worker's table, as the ranker's state view lays them over the rows: an access writes no row.
    """
    live = {k: live_values(s) for k, s in table_states(stack).items()}
    return {
        r.memory_id: with_live(r, live[r.key]) if r.key in live else r
        for r in store.query(tenant, ANY_STATE)
    }


def request(stack: Stack, request_id: str, **kw: object) -> None:
    body = {
        "v": 1,
        "tenant_id": "acme",
        "at": (T0 + timedelta(hours=1)).isoformat(),
        "request_id": request_id,
    }
    body.update(kw)
    produce(stack.bootstrap, stack.topic("consolidation"), [(b"acme", orjson.dumps(body))])


def reports(stack: Stack, request_id: str) -> list[dict[str, Any]]:
    found = [orjson.loads(v) for _, v in read_all(stack.bootstrap, stack.topic("audit"))]
    return [
        r for r in found if r.get("kind") == "consolidation" and r.get("request_id") == request_id
    ]


def test_consolidation_end_to_end(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    stack = make_stack(("acme", "globex"))
    workers.append(worker := WorkerProcess(stack).start())
    load(stack, "acme")
    load(stack, "globex")
    store = stack.store()
    loaded = sum(ACCESSES.values())

    def settled(tenant: str) -> bool:
        found = rows(stack, store, tenant)
        return len(found) == len(MEMORIES) and sum(r.access_count for r in found.values()) == loaded

    eventually(lambda: settled("acme") and settled("globex"), 120, "memories and accesses", worker)
    before = rows(stack, store, "acme")
    globex_before = rows(stack, store, "globex")

    # a dry run reports the plan and changes nothing
    request(stack, "dry", dry_run=True)
    eventually(lambda: len(reports(stack, "dry")) == 1, 60, "dry-run report", worker)
    (plan,) = reports(stack, "dry")
    kinds = sorted((d["kind"], d["target"], tuple(d["sources"])) for d in plan["decisions"])
    summary_id = next(d["target"] for d in plan["decisions"] if d["kind"] == "summarise")
    assert kinds == sorted(
        [
            ("merge", "dup1", ("dup2",)),
            ("merge", "near1", ("near2",)),
            ("summarise", summary_id, ("c1", "c2", "c3")),
        ]
    )
    assert rows(stack, store, "acme") == before

    # the real run: duplicates collapse with counters conserved, summary sources archived
    request(stack, "first")
    eventually(lambda: summary_id in rows(stack, store, "acme"), 60, "summary written", worker)

    def applied() -> bool:
        now = rows(stack, store, "acme")
        return (
            now["dup2"].state == "deleted"
            and now["near2"].state == "deleted"
            and all(now[c].state == "archived" for c in ("c1", "c2", "c3"))
            and now["dup1"].access_count == 4
            and now["near1"].access_count == 6
        )

    eventually(applied, 60, "decisions applied", worker, show=lambda: rows(stack, store, "acme"))
    after = rows(stack, store, "acme")
    assert (after["dup1"].access_count, after["dup1"].recall_count) == (4, 4)
    assert (after["near1"].access_count, after["near1"].recall_count) == (6, 6)
    assert after["dup1"].write_count == 2
    assert after["dup2"].merged_into == "dup1"
    assert sum(r.access_count for r in after.values() if r.state == "active") == loaded
    summary = after[summary_id]
    assert summary.state == "active"
    assert sorted(summary.summary_of) == ["c1", "c2", "c3"]
    assert "Standup is at nine." in summary.content
    assert {after[c].merged_into for c in ("c1", "c2", "c3")} == {summary_id}
    archived = store.search(
        "acme", [MEMORIES["c1"][0]], k=5, filters=Filters(states=("archived",))
    )[0]
    assert {h.row.memory_id for h in archived} == {"c1", "c2", "c3"}
    active = store.search("acme", [MEMORIES["c1"][0]], k=10)[0]
    assert not {"c1", "c2", "c3", "dup2", "near2"} & {h.row.memory_id for h in active}
    assert rows(stack, store, "globex") == globex_before  # another tenant is never touched

    # the same consolidation again changes nothing
    request(stack, "second")
    eventually(lambda: len(reports(stack, "second")) == 1, 60, "second report", worker)
    assert reports(stack, "second")[0]["decisions"] == []
    assert rows(stack, store, "acme") == after

    # the CLI asks for a dry run and prints the (now empty) plan
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "streams",
            "consolidate",
            "--tenant",
            "acme",
            "--dry-run",
            "--at",
            (T0 + timedelta(hours=1)).isoformat(),
        ],
        cwd=ROOT,
        env=stack.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "acme: 0 decisions (dry run)" in cli.stdout

    # every summarised memory read again (back in recall beside the summary that holds its
    # words): the next run archives them into that summary again, and never merges or
    # summarises the summary with its own sources
    sources = ("c1", "c2", "c3")
    revived = [access_msg("acme", c, 3 * 3600, "get") for c in sources]
    produce(stack.bootstrap, stack.topic("access-events"), revived)
    eventually(
        lambda: all(rows(stack, store, "acme")[c].state == "active" for c in sources),
        60,
        "sources back in recall",
        worker,
    )
    request(stack, "third", at=(T0 + timedelta(hours=4)).isoformat())
    eventually(lambda: len(reports(stack, "third")) == 1, 60, "third report", worker)
    third = [
        (d["kind"], d["target"], tuple(d["sources"]))
        for d in reports(stack, "third")[0]["decisions"]
    ]
    assert ("summarise", summary_id, sources) in third, third
    assert all(summary_id not in found for _, _, found in third), third

    def archived_again() -> bool:
        now = rows(stack, store, "acme")
        return now[summary_id].state == "active" and all(
            (now[c].state, now[c].merged_into) == ("archived", summary_id) for c in sources
        )

    eventually(archived_again, 60, "sources archived into their summary again", worker)

    # a malformed request goes to dead-letter, the agent goes on
    request(stack, "bad", strategies=["shred"])
    request(stack, "after-bad", dry_run=True)
    eventually(
        lambda: len(reports(stack, "after-bad")) == 1, 60, "agent alive after bad input", worker
    )
    (letter,) = dead_letters(stack)
    assert letter["field"].startswith("strategies")
    assert letter["topic"] == stack.topic("consolidation")


def test_a_version_left_superseded_by_a_memory_never_stored_is_current_after_a_recheck(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    """A supersession whose successor left without reinstating it (recorded before successors
    kept their predecessors, then purged; here: never written) hid the older version for good.
    The `successors` step asks the successor, and the worker, which does not hold it, answers.
    """
    stack = make_stack(("acme",))
    workers.append(worker := WorkerProcess(stack).start())
    vec, text = basis(1), "Alice lives in Osaka"
    produce(
        stack.bootstrap,
        stack.topic("memory-writes"),
        [write_msg("acme", "n", vec, content=text, at=at(0))],
    )
    hidden = decision_value("acme", "n", Supersede(T0 + timedelta(minutes=5), "p", "newer value"))
    produce(stack.bootstrap, stack.topic("memory-writes"), [(b"acme/n", orjson.dumps(hidden))])
    store = stack.store()

    def superseded_by() -> str | None:
        found = rows(stack, store, "acme")
        return found["n"].superseded_by if "n" in found else None

    eventually(lambda: superseded_by() == "p", 120, "n superseded by p", worker)
    current = Filters(current_at_us=to_us(T0 + timedelta(hours=1)))
    assert store.search("acme", [vec], k=5, filters=current)[0] == []

    request(stack, "recheck", strategies=["successors"])
    eventually(lambda: superseded_by() == "", 60, "n current again", worker, show=superseded_by)
    (report,) = reports(stack, "recheck")
    assert [(d["kind"], d["target"]) for d in report["decisions"]] == [("recheck", "n")]
    (hit,) = store.search("acme", [vec], k=5, filters=current)[0]
    assert (hit.row.memory_id, hit.row.content) == ("n", text)
