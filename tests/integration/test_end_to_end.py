"""End to end: `python -m server` (worker + ranker + embedded Milvus Lite) on a real broker, via the SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from mnemostream import Client, MnemostreamError
from tests.infra import ROOT, free_port
from tests.integration.harness import Stack, eventually, produce, wait_for_http
from tests.integration.test_streams import T0

pytestmark = pytest.mark.integration
KEY = "e2e-key-0123456789abcdef"
DIM = 8


@pytest.fixture
def stack(make_stack: Callable[..., Stack]) -> Stack:
    return make_stack(("acme",), dim=DIM)


@pytest.fixture
def server(stack: Stack, tmp_path: Path) -> Iterator[str]:
    yield from serve(stack, tmp_path)


def serve(
    stack: Stack, tmp_path: Path, overrides: dict[str, Any] | None = None, /, **extra: str
) -> Iterator[str]:
    """``python -m server`` on the stack's broker and a Milvus Lite file; ``overrides``: the
    tenant's policy overrides; ``extra``: more env.
    """
    tenants = tmp_path / "tenants.json"
    acme = {"api_keys": [KEY], "overrides": overrides or {}}
    tenants.write_text(json.dumps({"tenants": {"acme": acme}}))
    port = free_port()
    env = {
        **stack.env(),
        "MNEMO_MILVUS_URI": str(tmp_path / "milvus.db"),
        "MNEMO_MILVUS_PARTITION_KEY": "true",
        "MNEMO_TENANTS_FILE": str(tenants),
        "MNEMO_TENANTS": "",
        "MNEMO_PORT": str(port),
        **extra,
    }
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "server"], cwd=ROOT, env=env, stdout=log, stderr=log
        )
    url = f"http://127.0.0.1:{port}"
    wait_for_http(url, proc, log_path)
    yield url
    proc.terminate()
    proc.wait(60)


def test_write_recall_and_recall_counts_grow(server: str) -> None:
    query = [1.0, *([0.0] * (DIM - 1))]
    with Client(server, KEY) as client:
        ids = [
            client.remember(
                f"note {i}",
                embedding=[1.0, i / 10, *([0.0] * (DIM - 2))],
                importance=0.6,
                memory_type="semantic",
                at=T0,
            )
            for i in range(3)
        ]
        eventually(
            lambda: len(client.recall(vector=query, k=5, at=T0, track=False)) == 3, 60, "written"
        )
        first = client.recall(vector=query, k=2, at=T0)
        assert [m.memory_id for m in first] == ids[:2]  # most similar first, equal otherwise

        def recalls() -> list[int]:
            found = [client.get(i, track=False) for i in ids]
            return [m.recall_count if m is not None else -1 for m in found]

        eventually(lambda: recalls() == [1, 1, 0], 60, "recall access events applied")
    # no retry loop with a recall's token: a read that passes it counts that recall
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {KEY}"}) as http:
        body = {"vector": query, "k": 1, "at": T0.isoformat()}
        token = http.post("/v1/recall", json=body).json()["token"]
        counted = http.get(f"/v1/memories/{ids[0]}", params={"after": token}).json()
        untracked = http.post("/v1/recall", json={**body, "track": False}).json()
    assert (counted["recall_count"], untracked["token"]) == (2, None)


def e(*head: float) -> list[float]:
    return [*head, *([0.0] * (DIM - len(head)))]


def test_remember_then_recall_reads_its_writes_without_waiting(server: str) -> None:
    with Client(server, KEY) as client:
        for i in range(3):
            memory_id = client.remember(f"fresh thought number {i}", embedding=e(1.0, i), at=T0)
            found = client.recall(vector=e(1.0, i), k=3, at=T0, track=False)
            assert memory_id in {m.memory_id for m in found}  # no sleep, no retry loop
        client.access([memory_id], "explicit", T0)
        got = client.get(memory_id, track=False)
        assert got is not None
        assert got.access_count == 1


def test_an_old_unimportant_memory_answers_its_question(server: str) -> None:
    at = T0 + timedelta(days=200)
    with Client(server, KEY) as client:
        answer = client.remember("Bob is allergic to penicillin", importance=0.1, at=T0)
        chatter = [
            {"content": f"Bob said hello to the team on day {d}", "importance": 0.9, "at": at}
            for d in range(15)
        ]
        client.remember_many(chatter)
        (top, *_) = client.recall("What is Bob allergic to?", k=10, at=at, track=False)
        assert top.memory_id == answer


def test_superseded_values_history_and_as_of(server: str) -> None:
    t1, t2 = T0, T0 + timedelta(days=90)
    with Client(server, KEY) as client:
        osaka = client.remember("Alice lives in Osaka.", embedding=e(1.0, 0.3), at=t1)
        lisbon = client.remember("Alice lives in Lisbon now.", embedding=e(1.0, 0.4), at=t2)
        now = t2 + timedelta(days=1)
        current = client.recall("Where does Alice live?", k=5, at=now, track=False)
        assert [m.memory_id for m in current] == [lisbon]
        history = client.recall(
            "Where does Alice live?", k=5, at=now, track=False, include_history=True
        )
        assert [m.memory_id for m in history] == [osaka, lisbon]  # in time order
        assert (history[0].superseded_by, history[0].valid_to) == (lisbon, t2.isoformat())
        # Osaka's own vector: the older words match best, and the fact's current version leads
        (first,) = client.recall(vector=e(1.0, 0.3), k=1, at=now, track=False, include_history=True)
        assert first.memory_id == lisbon
        then = client.recall("Where does Alice live?", k=5, at=t1 + timedelta(days=1), track=False)
        assert [m.memory_id for m in then] == [osaka]  # Lisbon was written after `at`


def test_a_fact_a_user_states_of_themselves_supersedes_however_far_apart_its_vectors(
    server: str,
) -> None:
    """MiniLM puts "I live in Toronto." and "I live in Hanoi now." at cosine .234: under the
    0.5 asked of named subjects both stayed current, Toronto first for its own words. Given
    vectors at cosine .25 here, on a real broker and Milvus.
    """
    t1, t2 = T0, T0 + timedelta(days=30)
    zoe = {"user_id": "zoe"}
    with Client(server, KEY) as client:
        toronto = client.remember("I live in Toronto.", embedding=e(1.0), at=t1, **zoe)
        hanoi = client.remember("I live in Hanoi now.", embedding=e(0.25, 0.968), at=t2, **zoe)
        now = t2 + timedelta(days=1)
        current = client.recall(vector=e(1.0), k=5, at=now, track=False, filters=zoe)
        assert [m.memory_id for m in current] == [hanoi]
        history = client.recall(
            vector=e(1.0), k=5, at=now, track=False, filters=zoe, include_history=True
        )
        in_time_order = [(toronto, hanoi), (hanoi, None)]
        assert [(m.memory_id, m.superseded_by) for m in history] == in_time_order


@pytest.fixture
def near_two(make_stack: Callable[..., Stack], tmp_path: Path) -> Iterator[str]:
    """A server that embeds texts itself, each in 384 hashed dimensions (two texts' cosine is
    their shared words'), and compares a write with its two nearest memories only.
    """
    stack = make_stack(("acme",), dim=384)
    yield from serve(stack, tmp_path, {"supersession": {"neighbours": 2}})


TORONTO, HANOI = "I live in Toronto.", "I live in Hanoi now."
NEAR_HANOI = ("Do I live in Hanoi now?", "Can I live in Hanoi now?", "Should I live in Hanoi now?")
NEAR_TORONTO = (
    "Do I really live in Toronto?",
    "Did I ever live in Toronto?",
    "Will I still live in Toronto?",
)


@pytest.mark.parametrize(
    "writes",
    [
        pytest.param((TORONTO, *NEAR_HANOI, HANOI), id="in-order"),
        pytest.param((HANOI, *NEAR_TORONTO, TORONTO), id="older-value-written-last"),
    ],
)
def test_a_value_crowded_out_of_a_statement_s_nearest_is_found_by_its_fact_s_stem(
    near_two: str, writes: tuple[str, ...]
) -> None:
    """Three questions share more words with the statement written last than its fact's other
    value does (.91 or .82 against .67): its own search (its 2 nearest) missed that value, and
    Toronto stayed current. The stem "i lives in" is nearer the other value (.58 or .52) than
    the questions (.47), and the worker searches Milvus (or the hot cache in front of it) by
    the stem as well: in order, and when the older value is written after the newer one (an
    import, two partitions applied out of order; "I live in Hanoi now." found nothing when
    written).
    """
    zed = {"user_id": "zed"}
    dated = {TORONTO: T0, HANOI: T0 + timedelta(days=30)}
    with Client(near_two, KEY) as client:
        ids = {
            text: client.remember(text, at=dated.get(text, T0 + timedelta(days=1)), **zed)
            for text in writes
        }
        now = T0 + timedelta(days=31)
        found = client.recall("live", k=10, at=now, track=False, filters=zed, include_history=True)
        by_id = {m.memory_id: m.superseded_by for m in found}
        expected = dict.fromkeys(ids.values()) | {ids[TORONTO]: ids[HANOI]}
        assert by_id == expected
        current = client.recall("Where do I live?", k=10, at=now, track=False, filters=zed)
        assert ids[TORONTO] not in {m.memory_id for m in current}


class StandInLlm(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint: importance 0.5 for every text; a new statement about a
    Pixel replaces the older statement about an iPhone (which no rule could tell).
    """

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt: str = body["messages"][0]["content"]
        answer: dict[str, object] = {"importance_score": 0.5}
        if "\nNEW: " in prompt:
            new, _, older = prompt.partition("\nNEW: ")[2].partition("\nOLDER:\n")
            lines = [line.split(". ", 1) for line in older.strip().splitlines()]
            replaced = [int(n) for n, text in lines if "Pixel" in new and "iPhone" in text]
            answer = {"replaces": replaced, "reason": "a new phone"}
        payload = json.dumps({"choices": [{"message": {"content": json.dumps(answer)}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def llm_server(stack: Stack, tmp_path: Path) -> Iterator[str]:
    llm = ThreadingHTTPServer(("127.0.0.1", free_port()), StandInLlm)
    thread = threading.Thread(target=llm.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{llm.server_address[1]}/v1"
        yield from serve(
            stack, tmp_path, MNEMO_LLM_URL=url, MNEMO_LLM_TIMEOUT_S="5", MNEMO_LOG_FORMAT="json"
        )
    finally:
        llm.shutdown()
        llm.server_close()
        thread.join()


def test_the_llm_decides_supersession_when_configured(llm_server: str, tmp_path: Path) -> None:
    t1, t2 = T0, T0 + timedelta(days=30)
    with Client(llm_server, KEY) as client:
        iphone = client.remember("Alice has an iPhone 12.", embedding=e(1.0, 0.3), at=t1)
        pixel = client.remember("Alice got a Pixel 8 phone.", embedding=e(1.0, 0.4), at=t2)
        now = t2 + timedelta(days=1)
        current = client.recall("Which phone does Alice have?", k=5, at=now, track=False)
        assert [m.memory_id for m in current] == [pixel]
        history = client.recall(
            "Which phone does Alice have?", k=5, at=now, track=False, include_history=True
        )
        assert [(m.memory_id, m.superseded_by) for m in history] == [(iphone, pixel), (pixel, None)]
    # MNEMO_LOG_FORMAT=json (this server's): the worker's lines and the request lines alike
    lines = (tmp_path / "server.log").read_text().splitlines()
    logged = [orjson.loads(line) for line in lines if line.startswith("{")]
    recalls = [r for r in logged if r.get("route") == "/v1/recall" and r.get("status") == 200]
    assert len(recalls) == 2, lines[-20:]
    assert {(r["tenant_id"], len(r["request_id"])) for r in recalls} == {("acme", 32)}
    loggers = {r["logger"] for r in logged}
    # the start-up (before Faust), the worker and uvicorn's own lines are JSON too
    assert {"streams.__main__", "streams.app", "uvicorn.error"} <= loggers, sorted(loggers)


def test_batch_get_forget_and_purge(server: str) -> None:
    near = e(0.0, 0.0, 1.0)
    with Client(server, KEY) as client:
        keep = client.remember("a plan to keep", embedding=e(0.0, 0.0, 1.0, 0.2), at=T0)
        gone = client.remember("a plan to drop", embedding=near, at=T0)
        assert set(client.get_many([keep, gone, "never-written"])) == {keep, gone}
        client.forget(gone)
        found = client.recall(vector=near, k=5, at=T0, track=False)
        assert [m.memory_id for m in found] == [keep]  # deleted: never recalled again
        deleted = client.get(gone, track=False)
        assert deleted is not None
        assert deleted.state == "deleted"
        client.forget(gone, purge=True)
        assert client.get(gone, track=False) is None  # purged: out of the serving store
        assert set(client.get_many([keep, gone])) == {keep}
        with pytest.raises(MnemostreamError) as missing:
            client.forget("never-written")
        assert missing.value.status == 404
    # the recall above was answered from the ranker's hot cache, kept fresh by the state view
    (hot,) = [
        line
        for line in httpx.get(f"{server}/metrics", timeout=10).text.splitlines()
        if line.startswith('mnemostream_vector_searches_total{source="hot"}')
    ]
    assert float(hot.split()[-1]) >= 1


def test_an_access_revives_an_archived_memory(server: str, stack: Stack) -> None:
    with Client(server, KEY) as client:
        memory_id = client.remember("an old plan", embedding=e(0.0, 1.0), at=T0)
        decision = {
            "v": 1,
            "kind": "decision",
            "decision": "retire",
            "to": "archived",
            "tenant_id": "acme",
            "memory_id": memory_id,
            "at": (T0 + timedelta(days=1)).isoformat(),
            "reason": "test: archived by an operator",
        }
        key = f"acme/{memory_id}".encode()
        produce(stack.bootstrap, stack.topic("memory-writes"), [(key, orjson.dumps(decision))])

        def state() -> str | None:
            found = client.get(memory_id, track=False)
            return None if found is None else found.state

        eventually(lambda: state() == "archived", 60, "archived by the decision")
        archived = client.recall(vector=e(0.0, 1.0), k=1, at=T0 + timedelta(days=2), track=False)
        assert [(m.memory_id, m.state) for m in archived] == [(memory_id, "archived")]
        client.access([memory_id], "get", T0 + timedelta(days=3))
        assert state() == "active"
        # reading it by id is an access too (SPEC section 5): archived again, a GET brings it
        # back (shown as it was, archived; its access applied after)
        produce(
            stack.bootstrap,
            stack.topic("memory-writes"),
            [(key, orjson.dumps({**decision, "at": (T0 + timedelta(days=4)).isoformat()}))],
        )
        eventually(lambda: state() == "archived", 60, "archived again")
        read = client.get(memory_id)
        assert read is not None
        assert read.state == "archived"
        eventually(lambda: state() == "active", 60, "brought back by the GET")


def test_ready_once_the_worker_recovered(server: str) -> None:
    """``/readyz`` in ``python -m server`` checks the worker's table recovery besides the ranker's
    own dependencies (polled: recovery may end after the API starts).
    """
    deadline = time.monotonic() + 120
    while True:
        reply = httpx.get(f"{server}/readyz", timeout=10)
        if reply.status_code == 200 or time.monotonic() > deadline:
            break
        assert reply.json()["status"] == "not ready"
        time.sleep(0.5)
    assert reply.status_code == 200, reply.text
    checks = {
        "batcher": True,
        "kafka": True,
        "milvus": True,
        "state_view": True,
        "tenants": True,
        "worker": True,
        "hot_cache": True,
        "token_key": True,
    }
    assert reply.json() == {"status": "ready", "checks": checks}
    assert httpx.get(f"{server}/healthz", timeout=10).status_code == 200


def test_update_writes_a_new_version_and_history_tells_it(server: str) -> None:
    t1, t2 = T0, T0 + timedelta(days=10)
    with Client(server, KEY) as client:
        old = client.remember("Carol works at Initech.", embedding=e(0.0, 1.0), tags=["job"], at=t1)
        new = client.update(old, content="Carol works at Globex.", at=t2)
        assert new != old
        got = client.get_many([old, new])
        assert (got[old].superseded_by, got[old].valid_to) == (new, t2.isoformat())
        assert got[new].tags == ["job"]  # kept from the old version
        # sent again (as after no reply came), once applied: the same version, not a 409
        assert client.update(old, content="Carol works at Globex.", at=t2) == new
        current = client.recall("Where does Carol work?", k=5, at=t2, track=False)
        assert [m.memory_id for m in current] == [new]
        with pytest.raises(MnemostreamError) as refused:
            client.update(old, content="Carol works at Hooli.")
        assert refused.value.status == 409  # only the current version can be updated
        eventually(lambda: len(client.history(old)) >= 2, 60, "both decisions audited")
        kinds = [(h["kind"], h["at"]) for h in client.history(old)]
        assert kinds[0][1] == t1.isoformat()
        assert ("superseded", t2.isoformat()) in kinds
        assert client.history(new)[0]["at"] == t2.isoformat()
        with pytest.raises(MnemostreamError) as missing:
            client.history("never-written")
        assert missing.value.status == 404
        racing_updates_make_one_chain(server, client, new, t2)


def racing_updates_make_one_chain(server: str, client: Client, current: str, t: datetime) -> None:
    """Two clients update ``current`` at once (each passes the API's check before either's
    supersede is applied); the worker chains them in time order: one version stays current.
    """
    chain, times = raced(server, current, t)
    eventually(
        lambda: superseders(client, chain) == [*chain[1:], None],
        60,
        "the racing versions chained in time order",
    )
    assert client.get_many(chain)[chain[1]].valid_to == times[1].isoformat()
    found = client.recall("Carol's onboarding notes", k=5, at=times[1], track=False)
    assert found[0].memory_id == chain[2]


def raced(server: str, current: str, t: datetime) -> tuple[list[str], list[datetime]]:
    """Pairs of updates of the current version, until both of a pair pass the check: the
    version they both updated and the two new ones, in time order, and their times.
    """
    for attempt in range(5):
        times = [t + timedelta(days=2 * attempt + 1), t + timedelta(days=2 * attempt + 2)]
        # no statement of a fact: the supersession rule would chain them by itself
        words = [f"Draft {attempt}{v} of the onboarding notes for Carol." for v in "ab"]
        replies = race(server, current, times, words)
        assert all(isinstance(r, str) or r == 409 for r in replies), replies
        if 409 not in replies:
            return [current, *map(str, replies)], times
        current = str(next(r for r in replies if isinstance(r, str)))  # no race this time
        t = times[1]
    pytest.fail("five pairs of updates never raced past the check")


def race(server: str, memory_id: str, times: list[datetime], words: list[str]) -> list[str | int]:
    """``update(memory_id)`` with ``words[i]`` at ``times[i]`` from two clients at once: the new
    ids, or the status of a refusal.
    """
    replies: list[str | int] = [0, 0]
    start = threading.Barrier(2)

    def update(i: int) -> None:
        with Client(server, KEY) as racer:
            start.wait()
            try:
                replies[i] = racer.update(memory_id, content=words[i], at=times[i])
            except MnemostreamError as exc:
                replies[i] = exc.status

    racers = [threading.Thread(target=update, args=(i,)) for i in (1, 0)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    return replies


def superseders(client: Client, ids: list[str]) -> list[str | None]:
    """What supersedes each of ``ids`` ("unknown" for one not applied yet)."""
    got = client.get_many(ids)
    return [got[m].superseded_by if m in got else "unknown" for m in ids]


def test_list_and_export_every_memory(server: str) -> None:
    with Client(server, KEY) as client:
        ids = client.remember_many(
            [{"content": f"fact {i}", "embedding": e(1.0, i), "at": T0} for i in range(12)]
        )
        client.forget(ids[0])
        listed = [m.memory_id for m in client.list_memories(page_size=5)]
        assert listed == sorted(ids[1:])  # deleted memories are not listed by default
        deleted = [m.memory_id for m in client.list_memories(state=["deleted"])]
        assert deleted == [ids[0]]
        exported = list(client.export(vectors=True))
        assert sorted(d["memory_id"] for d in exported) == sorted(ids)
        assert {d["state"] for d in exported} == {"active", "deleted"}
        assert all(len(d["embedding"]) == DIM for d in exported)


def test_a_session_end_moves_its_working_memories_to_episodic(server: str) -> None:
    """SPEC sections 5 and 7: working -> episodic when the session ends, not after 4 h idle;
    only that session's (and user's) memories, each promotion audited with the session's name.
    """
    ended = T0 + timedelta(minutes=5)
    with Client(server, KEY) as client:

        def working(content: str, session: str, user: str, at: datetime = T0) -> str:
            return client.remember(
                content, session_id=session, user_id=user, memory_type="working", at=at
            )

        said = working("Booked the dentist for Tuesday", "chat-9", "ann")
        asked = working("Asked about parking near the clinic", "chat-9", "ann")
        other = working("Wants a window seat", "chat-10", "ann")
        bobs = working("Booked the dentist for Tuesday", "chat-9", "bob")
        later = working("Will bring the x-rays", "chat-9", "ann", ended + timedelta(minutes=1))
        # the session's writes are waited for: the last one said is among those promoted
        promoted = client.end_session("chat-9", user_id="ann", at=ended)
        assert sorted(promoted) == sorted([said, asked])
        got = client.get_many([said, asked, other, bobs, later])
        assert {m: got[m].memory_type for m in got} == {
            said: "episodic",
            asked: "episodic",
            other: "working",
            bobs: "working",
            later: "working",  # written after the end: a session resumed
        }
        eventually(lambda: len(client.history(said)) >= 2, 60, "the promotion audited")
        last = client.history(said)[-1]
        assert (last["kind"], last["at"]) == ("promoted", ended.isoformat())
        assert "session 'chat-9' ended" in last["reason"]
        assert client.end_session("chat-9", user_id="ann", at=ended) == []  # none left working
    # over HTTP with no token: the end waits for every write the topics hold as it arrives
    headers = {"Authorization": f"Bearer {KEY}"}
    turn = {"content": "Last words of chat-11", "session_id": "chat-11", "memory_type": "working"}
    written = httpx.post(f"{server}/v1/memories", json={"memories": [turn]}, headers=headers)
    (last,) = written.json()["ids"]
    reply = httpx.post(f"{server}/v1/sessions/end", json={"run_id": "chat-11"}, headers=headers)
    assert reply.status_code == 200, reply.text
    assert reply.json()["promoted"] == [last]


def test_scopes_keep_the_same_sentence_of_two_agents_and_two_users_apart(
    server: str, stack: Stack
) -> None:
    with Client(server, KEY) as client:
        mine = client.remember("Prefers dark mode", agent_id="bot-1", run_id="r1", at=T0)
        theirs = client.remember("Prefers dark mode", agent_id="bot-2", session_id="r2", at=T0)
        assert mine != theirs  # one sentence, two scopes, two memories
        found = client.recall("dark mode", k=5, at=T0, track=False, filters={"run_id": "r1"})
        assert [(m.memory_id, m.agent_id, m.session_id) for m in found] == [(mine, "bot-1", "r1")]
        listed = [m.memory_id for m in client.list_memories(agent_id="bot-2")]
        assert listed == [theirs]
        ann, bob = (
            client.remember("Prefers dark mode", user_id=u, agent_id="bot-3", run_id="r3", at=T0)
            for u in ("ann", "bob")
        )
        assert len({mine, theirs, ann, bob}) == 4  # one sentence, two users: two memories
        by_user = client.recall(
            "dark mode", k=5, at=T0, track=False, filters={"user_id": "ann", "agent_id": "bot-3"}
        )
        assert [(m.memory_id, m.user_id, m.agent_id, m.session_id) for m in by_user] == [
            (ann, "ann", "bot-3", "r3")
        ]
        bobs = [(m.memory_id, m.user_id) for m in client.list_memories(user_id="bob")]
        assert bobs == [(bob, "bob")]
        raw = httpx.get(
            f"{server}/v1/memories",
            params={"user_id": "ann", "run_id": "r3"},
            headers={"Authorization": f"Bearer {KEY}"},
        ).json()["memories"]
        assert [(m["memory_id"], m["user_id"], m["run_id"]) for m in raw] == [(ann, "ann", "r3")]
        unscoped = client.get(mine, track=False)
        assert unscoped is not None
        assert unscoped.user_id is None
        # a caller-chosen id is one user's: another's words under it are refused, not mixed in
        mia: dict[str, Any] = {"content": "Mia's address is 1 Rua Nova", "user_id": "mia", "at": T0}
        ned: dict[str, Any] = {"content": "Ned's address is 9 Elm St", "user_id": "ned", "at": T0}
        client.remember(memory_id="card", **mia)
        assert client.get("card", track=False) is not None  # applied: the API sees it
        with pytest.raises(MnemostreamError) as refused:
            client.remember(memory_id="card", **ned)
        assert (refused.value.status, "memories[0].user_id" in str(refused.value)) == (409, True)
        with pytest.raises(MnemostreamError) as elsewhere:  # the card's session is kept too
            client.remember(memory_id="card", session_id="chat-2", **mia)
        assert (elsewhere.value.status, "memories[0].session_id" in str(elsewhere.value)) == (
            409,
            True,
        )
        # one request giving one id two users is refused whole
        with pytest.raises(MnemostreamError) as clash:
            client.remember_many([{**mia, "memory_id": "card2"}, {**ned, "memory_id": "card2"}])
        assert (clash.value.status, "memories[1].user_id" in str(clash.value)) == (409, True)
        # writes the API never saw (another producer's): the worker keeps the first user's words
        docs = [
            {**w, "v": 1, "tenant_id": "acme", "memory_id": "card2", "at": T0.isoformat()}
            for w in (mia, ned)
        ]
        produce(
            stack.bootstrap,
            stack.topic("memory-writes"),
            [(b"acme/card2", orjson.dumps(doc)) for doc in docs],
        )
        eventually(lambda: len(client.history("card2")) >= 2, 60, "both writes audited")
        for card_id in ("card", "card2"):
            card = client.get(card_id, track=False)
            assert card is not None
            assert (card.content, card.user_id) == (mia["content"], "mia")
        assert [h["kind"] for h in client.history("card2")] == ["created", "ignored"]
        # deleted, the id is free: the write waits for the deletion before it checks
        client.forget("card")
        client.remember(memory_id="card", after=client.token(), **ned)
        card = client.get("card", track=False)
        assert card is not None
        assert (card.content, card.user_id) == (ned["content"], "ned")
