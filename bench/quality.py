"""Recall quality measured through the service's HTTP API: LoCoMo and a knowledge-update workload.

Against ``make up`` (the service reads its tenant registry once, at start-up)::

    .venv/bin/python -m bench.quality tenants     # adds the bench's tenants and keys to var/tenants.json
    make down && make up                          # restart so that the service sees them
    .venv/bin/python -m bench.quality locomo      # [--data ../shared/data/locomo10.json] [--json]
    .venv/bin/python -m bench.quality updates     # [--seed 7] [--json]

``tenants`` keeps what the file already holds (the ``demo`` tenant, its key) and adds one tenant per
LoCoMo conversation (``locomo-conv-26``, ...) and the update workload's (``upd-0`` .. ``upd-3``),
each with a fresh key. Another file: ``--tenants-file F`` here and ``MNEMO_TENANTS_FILE=F make up``.
Keys come from that file; ``--key TENANT=KEY`` overrides one. ``--base-url`` (default
http://127.0.0.1:8080). Start from a fresh state
(``make down && rm -rf var/worker var/milvus.db var/kafka/data && make up``; the worker's tables are
restored from Kafka, so all three go): LoCoMo writes carry their own ids, so a rerun rewrites the same
memories, but ``updates`` refuses a tenant that already holds its memories (its explicit accesses
would count twice) unless ``--force``.

**locomo**: one memory per turn, written as ``bench.quality_study.SERVICE_VARIANT`` (the offline
study's choice, ``docs/quality-study.md``): content "Caroline: <text> [shares a photo: <caption>]",
context "[8 May 2023] previous: Melanie: <previous turn>" (the service embeds and indexes the context
with the content and returns the content alone; ``--representation`` picks another variant, e.g.
``date+spk+cap+prev`` with everything inline in the content), ``at`` = the session's date,
``memory_id`` = ``<sample>-<dia_id>``, ``session_id`` = ``session_<n>``; writes in batches of 1,000.
Each question (categories 1-4) is one recall: k 10, ``at`` one hour after the conversation's last
session, ``track`` false; the tenant's first recall carries the write tokens as ``after``
(read-your-writes; a server that gives no token or refuses the field gets every written id polled
with ``GET /v1/memories/{id}`` until it answers 200 instead). Metrics as in ``bench.quality_study``
(R@10 per category, the old slice, Hit@10) plus results returned per question and leaks (a result
that is not one of the tenant's own writes). The same table has the offline baselines (cosine, BM25,
and the service's blend computed offline) on turn text only and on the written content.

**updates**: a seeded generator (``updates_workload``) of tenants that reuse the same person names:
changing facts ("Alice lives in Osaka." ... "Alice lives in Lisbon now.", five attributes, 2-4
versions weeks to months apart), old critical facts (importance 0.9, 200-300 days old) under recent
chatter about the same person, paraphrase sets of which one is accessed explicitly later, and
general chatter. Probes and their metrics:

* ``current``: "Where does Alice live?" after every write: newest-first (top 1 is the newest
  version), stale-above-newest (an older version ranks above the newest, or is returned without it);
* ``as-of``: the same question with ``at`` between two versions: as-of P@1 (top 1 is the version
  valid then);
* ``before``: "Where did Alice live before Lisbon?" with ``include_history`` true: before R@10 =
  the named version's predecessor is among the results (with history the service lists them in
  time order, so no rank is read; until 2026-12-05 this figure was called "before P@1", but it
  always measured this);
* ``critical``: "What is Bob allergic to?": critical R@5;
* ``re-accessed``: the paraphrase that received explicit accesses is top 1: re-accessed P@1;
* every result of every probe: leaks (a memory id or content that is not the tenant's own write).

``--unmarked`` and ``--paraphrased`` state the later versions otherwise (:data:`PHRASINGS`);
a fact that ends in an addition is asked as ``current-both`` (many-valued newest and kept R@10,
stale returned); ``--paraphrased`` follows a single-valued fact's last version with a look-alike
that replaces nothing (kept past look-alike R@10: the last version is among the 10).

Per tenant: the writes (in time order; ``--shuffled``: in a seeded random order, 50 at a time,
each 50 applied before the next, an import that often writes a fact's newer version before its
older), the explicit accesses, then the probes, the first of them ``after`` the tokens of those
writes and accesses. Offline baselines (cosine and BM25 over the
tenant's memories written up to the probe's ``at``, ties in a seeded random order) go in the same
table. Output: Markdown on stdout; ``--json`` for machine output.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.quality_study import (
    BY_NAME,
    COLUMNS,
    DEFAULT_CACHE,
    DEFAULT_DATA,
    SERVICE_VARIANT,
    CachedEmbedder,
    Conversation,
    K,
    Matrix,
    Report,
    Signals,
    Variant,
    blend,
    bm25_matrix,
    load_locomo,
    render_all,
    top_k,
    write_parts,
)
from memcore.supersession import SupersessionPolicy, Version, detect

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TENANTS = Path("var/tenants.json")
BATCH = 1000
UPDATE_TENANTS = ("upd-0", "upd-1", "upd-2", "upd-3")
TEXT_ONLY = Variant("text", speaker=False)


def locomo_tenant(sample_id: str) -> str:
    return f"locomo-{sample_id}"


# -- tenants ------------------------------------------------------------------------------------------


def bench_tenants(data: Path) -> list[str]:
    samples = [s["sample_id"] for s in json.loads(data.read_text(encoding="utf-8"))]
    return [*(locomo_tenant(s) for s in samples), *UPDATE_TENANTS]


def add_tenants(path: Path, tenant_ids: Sequence[str]) -> list[str]:
    """Add the tenants the file lacks, each with a new key; returns the ids added."""
    spec: dict[str, Any] = {"tenants": {}}
    if path.exists():
        spec = json.loads(path.read_text(encoding="utf-8"))
    tenants: dict[str, Any] = spec.setdefault("tenants", {})
    if not tenants:
        tenants["demo"] = {"api_keys": [f"mk-{secrets.token_hex(16)}"]}
    added = [t for t in tenant_ids if t not in tenants]
    for tenant_id in added:
        tenants[tenant_id] = {"api_keys": [f"mk-{secrets.token_hex(16)}"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    return added


def api_keys(path: Path, overrides: Sequence[str]) -> dict[str, str]:
    """Tenant id -> its first key, from the registry file, then ``TENANT=KEY`` overrides."""
    keys: dict[str, str] = {}
    if path.exists():
        for tenant_id, entry in json.loads(path.read_text(encoding="utf-8"))["tenants"].items():
            if (entry or {}).get("api_keys"):
                keys[tenant_id] = entry["api_keys"][0]
    for item in overrides:
        tenant_id, _, key = item.partition("=")
        keys[tenant_id] = key
    return keys


def require_keys(keys: Mapping[str, str], tenant_ids: Sequence[str], path: Path) -> None:
    missing = [t for t in tenant_ids if t not in keys]
    if missing:
        msg = (
            f"no API key for {', '.join(missing)} in {path}: run `python -m bench.quality tenants` "
            "and restart the service (`make down && make up`), or pass --key TENANT=KEY"
        )
        raise SystemExit(msg)


# -- HTTP -----------------------------------------------------------------------------------------------


@dataclass
class Api:
    """The service's HTTP API as the bench uses it; retries 429 and 5xx answers."""

    base_url: str
    timeout_s: float = 60.0
    supports_after: bool | None = None  # None until the first recall with a token tells
    supports_history: bool | None = None
    _client: httpx.Client | None = field(default=None, repr=False)

    def __enter__(self) -> Api:
        self._client = httpx.Client(base_url=self.base_url, timeout=self.timeout_s)
        return self

    def __exit__(self, *_: object) -> None:
        if self._client is not None:
            self._client.close()

    def _call(
        self, method: str, path: str, key: str, body: Mapping[str, Any] | None = None
    ) -> httpx.Response:
        assert self._client is not None, "use Api as a context manager"
        for attempt in range(8):
            reply = self._client.request(
                method, path, json=body, headers={"Authorization": f"Bearer {key}"}
            )
            if reply.status_code != 429 and reply.status_code < 500:
                return reply
            time.sleep(float(reply.headers.get("Retry-After", 0.2 * 2**attempt)))
        return reply

    @staticmethod
    def _ok(reply: httpx.Response) -> dict[str, Any]:
        if reply.status_code >= 400:
            msg = f"{reply.request.method} {reply.request.url.path}: HTTP {reply.status_code} {reply.text}"
            raise SystemExit(msg)
        out: dict[str, Any] = reply.json()
        return out

    def write(self, key: str, memories: Sequence[Mapping[str, Any]]) -> str | None:
        """Write in batches of 1,000; returns the last read-your-writes token (None: no tokens)."""
        token = None
        for start in range(0, len(memories), BATCH):
            body = {"memories": list(memories[start : start + BATCH])}
            token = self._ok(self._call("POST", "/v1/memories", key, body)).get("token") or token
        return token

    def access(self, key: str, memory_ids: Sequence[str], at: datetime) -> str | None:
        """Explicit accesses; returns the read-your-writes token (None: no tokens)."""
        body = {"memory_ids": list(memory_ids), "kind": "explicit", "at": at.isoformat()}
        token: str | None = self._ok(self._call("POST", "/v1/access", key, body)).get("token")
        return token

    def get(self, key: str, memory_id: str) -> dict[str, Any] | None:
        """A memory read without counting as an access (the bench polls with it)."""
        reply = self._call("GET", f"/v1/memories/{memory_id}?track=false", key)
        return None if reply.status_code == 404 else self._ok(reply)

    def wait_for(self, key: str, memory_ids: Sequence[str], timeout_s: float = 300.0) -> None:
        """Poll every id until it is readable (the fallback when the server takes no token)."""
        deadline = time.monotonic() + timeout_s
        for memory_id in reversed(memory_ids):
            while self.get(key, memory_id) is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{memory_id} not readable after {timeout_s:.0f} s")
                time.sleep(0.2)

    def recall(self, key: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One recall; a 422 that names ``include_history`` is remembered and retried without it."""
        reply = self._call("POST", "/v1/recall", key, body)
        if (
            reply.status_code == 422
            and "include_history" in reply.text
            and "include_history" in body
        ):
            self.supports_history = False
            reply = self._call("POST", "/v1/recall", key, _without(body, "include_history"))
        elif "include_history" in body and reply.status_code < 400:
            self.supports_history = True
        results: list[dict[str, Any]] = self._ok(reply)["results"]
        return results

    def settled(self, key: str, body: Mapping[str, Any], tokens: Sequence[str | None]) -> bool:
        """Recall once ``after`` the tokens of the writes and accesses just made (read-your-writes).
        False when the server gave no tokens or refuses the field: the caller polls instead.
        """
        if None in tokens or not tokens or self.supports_after is False:
            self.supports_after = False
            return False
        reply = self._call("POST", "/v1/recall", key, {**body, "after": list(tokens)})
        self.supports_after = not (reply.status_code == 422 and "after" in reply.text)
        if self.supports_after:
            self._ok(reply)
        return self.supports_after


def _without(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != name}


# -- LoCoMo --------------------------------------------------------------------------------------------


def locomo_memories(conversation: Conversation, variant: Variant) -> list[dict[str, Any]]:
    """One write per turn: content, and the context (date, previous turn) when the variant splits."""
    out = []
    for index, turn in enumerate(conversation.turns):
        content, context = write_parts(conversation.turns, index, variant)
        memory: dict[str, Any] = {
            "memory_id": f"{conversation.sample_id}-{turn.dia_id}",
            "content": content,
            "at": turn.at.isoformat(),
            "session_id": f"session_{turn.session}",
            "metadata": {"dia_id": turn.dia_id, "speaker": turn.speaker},
        }
        if context is not None:
            memory["context"] = context
        out.append(memory)
    return out


@dataclass
class Served:
    """What the service returned for one conversation's questions, as dia_ids."""

    returned: list[list[str]]
    leaks: int


def recall_conversation(api: Api, key: str, conversation: Conversation, variant: Variant) -> Served:
    memories = locomo_memories(conversation, variant)
    token = api.write(key, memories)
    own = {m["memory_id"]: m["metadata"]["dia_id"] for m in memories}
    at = (conversation.last_at + timedelta(hours=1)).isoformat()
    served = Served([], 0)
    for n, question in enumerate(conversation.questions):
        body = {"query": question.text, "k": K, "at": at, "track": False}
        if n == 0 and not api.settled(key, body, [token]):
            api.wait_for(key, list(own))
        results = api.recall(key, body)
        served.leaks += sum(r["memory_id"] not in own for r in results)
        served.returned.append([own[r["memory_id"]] for r in results if r["memory_id"] in own])
    return served


def offline_rows(
    conversations: Sequence[Conversation], embedder: CachedEmbedder, written: Variant
) -> list[tuple[str, Report]]:
    """Cosine, BM25 and the blend computed offline, on turn text and on the written content; BM25
    on stemmed tokens without stop words, as the service's keyword index keeps them.
    """
    questions = embedder.embed([q.text for c in conversations for q in c.questions])
    rows: list[tuple[str, Report]] = []
    for variant in (TEXT_ONLY, written):
        texts = [render_all(c, variant) for c in conversations]
        turns = embedder.embed([t for chunk in texts for t in chunk])
        rankers: dict[str, Callable[[Signals], Any]] = {
            "cosine": lambda s: top_k(s.cosine),
            "bm25": lambda s: top_k(s.bm25),
            "blend .5": blend(0.5),
        }
        reports = {name: Report() for name in rankers}
        q0 = t0 = 0
        for conversation, chunk in zip(conversations, texts, strict=True):
            nq, nt = len(conversation.questions), len(chunk)
            cosine: Matrix = questions[q0 : q0 + nq] @ turns[t0 : t0 + nt].T
            bm25 = bm25_matrix([q.text for q in conversation.questions], chunk, stemmed=True)
            signals = Signals(cosine, bm25, np.full(nt, 0.5))
            for name, ranker in rankers.items():
                for question, top in zip(conversation.questions, ranker(signals), strict=True):
                    ids = [conversation.turns[i].dia_id for i in top]
                    reports[name].add(conversation, question, ids)
            q0, t0 = q0 + nq, t0 + nt
        rows += [(f"offline {name} on {variant.name}", report) for name, report in reports.items()]
    return rows


LOCOMO_COLUMNS = (*COLUMNS, "returned")


def run_locomo(args: argparse.Namespace) -> dict[str, Any]:
    data = load_locomo(args.data)
    variant = BY_NAME[args.representation]
    conversations = data.conversations[: args.conversations or None]
    keys = api_keys(args.tenants_file, args.key)
    tenants = [locomo_tenant(c.sample_id) for c in conversations]
    require_keys(keys, tenants, args.tenants_file)
    offline = offline_rows(conversations, CachedEmbedder(args.cache), variant)  # first: fails fast
    service = Report()
    leaks = 0
    with Api(args.base_url) as api:
        for conversation, tenant in zip(conversations, tenants, strict=True):
            served = recall_conversation(api, keys[tenant], conversation, variant)
            leaks += served.leaks
            for question, ids in zip(conversation.questions, served.returned, strict=True):
                service.add(conversation, question, ids)
            print(f"  {tenant}: {len(conversation.questions)} questions", file=sys.stderr)
        after = api.supports_after
    rows = [("service (HTTP API)", service), *offline]
    return {
        "content": variant.name,
        "questions": sum(len(c.questions) for c in conversations),
        "leaks": leaks,
        "read_your_writes": "token (after)" if after else "polled GET /v1/memories/{id}",
        "rows": {name: report.summary() for name, report in rows},
    }


def locomo_markdown(result: Mapping[str, Any]) -> str:
    lines = [
        f"LoCoMo through the API: {result['questions']} questions (categories 1-4), content "
        f"`{result['content']}`, leaks {result['leaks']}, settle: {result['read_your_writes']}",
        "",
        "| ranking | " + " | ".join(LOCOMO_COLUMNS) + " |",
        "|---|" + "---:|" * len(LOCOMO_COLUMNS),
    ]
    for name, summary in result["rows"].items():
        cells = [
            f"{summary[c]:.3f}" if c != "returned" else f"{summary[c]:.2f}" for c in LOCOMO_COLUMNS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- the knowledge-update workload -------------------------------------------------------------------


@dataclass(frozen=True)
class Attribute:
    name: str
    first: str  # "{p} lives in {v}."
    later: str  # "{p} lives in {v} now."
    question: str  # "Where does {p} live?"
    before: str  # "Where did {p} live before {v}?"
    values: tuple[str, ...]
    updates: tuple[str, ...] = ()  # ``--paraphrased``: other ways people state a replacement
    additions: tuple[str, ...] = ()  # ``--paraphrased``: a value held beside the last one
    # ``--paraphrased``: a statement after the last version that reads like a replacement and is
    # none (someone else's, a side job, the past): the last version stays current
    lookalikes: tuple[str, ...] = ()
    # ``--first-person``: first, later, question and before as the user says them ("I live in
    # {v}."), written under the user's id; none: not read in the first person (plays)
    first_person: tuple[str, str, str, str] | None = None


ATTRIBUTES = (
    Attribute(
        "city",
        "{p} lives in {v}.",
        "{p} lives in {v} now.",
        "Where does {p} live?",
        "Where did {p} live before {v}?",
        (
            "Osaka",
            "Lisbon",
            "Toronto",
            "Nairobi",
            "Oslo",
            "Lima",
            "Hanoi",
            "Dublin",
            "Perth",
            "Quito",
        ),
        (
            "{p} moved to {v}.",
            "{p} relocated to {v}.",
            "{p} has moved to {v}.",
            "{p} just moved to {v}.",
            "{p} now lives in {v}.",
            "{p}'s new home is in {v}.",
            "{p} settled in {v}.",
            "{p} has relocated to {v} for work.",
        ),
        lookalikes=(
            "{p}'s new friend lives in {v}.",
            "{p}'s sister moved to {v}.",
            "{p} settled in quickly at the new office.",
            "{p} moved to {v} in 2012.",
        ),
        first_person=(
            "I live in {v}.",
            "I live in {v} now.",
            "Where do I live?",
            "Where did I live before {v}?",
        ),
    ),
    Attribute(
        "employer",
        "{p} works at {v}.",
        "{p} works at {v} now.",
        "Where does {p} work?",
        "Where did {p} work before {v}?",
        (
            "Acme",
            "Globex",
            "Initech",
            "Umbrella",
            "Hooli",
            "Tyrell",
            "Cyberdyne",
            "Soylent",
            "Vandelay",
        ),
        (
            "{p} got a job at {v}.",
            "{p} started working at {v}.",
            "{p} took a job at {v}.",
            "{p} started a new job at {v}.",
            "{p} got hired by {v}.",
            "{p} works for {v} now.",
            "{p} is now employed by {v}.",
            "{p} changed jobs and works at {v}.",
        ),
        lookalikes=(
            "{p}'s brother works at {v}.",
            "{p} took a job at a cafe for the summer.",
            "{p} got hired by a client for a side project.",
            "{p} was hired by {v} in 2015.",
        ),
        first_person=(
            "I work at {v}.",
            "I work at {v} now.",
            "Where do I work?",
            "Where did I work before {v}?",
        ),
    ),
    Attribute(
        "food",
        "{p}'s favourite food is {v}.",
        "{p}'s favourite food is {v} now.",
        "What is {p}'s favourite food?",
        "What was {p}'s favourite food before {v}?",
        ("sushi", "ramen", "tacos", "paella", "pierogi", "falafel", "lasagne", "pho", "curry"),
        (
            "{p}'s favourite food is {v} now.",
            "{p}'s new favourite food is {v}.",
            "These days {p}'s favourite food is {v}.",
            "{p}'s favorite food is {v} now.",
            "{v} is {p}'s favourite food now.",
        ),
        lookalikes=(
            "{p}'s new friend's favourite food is {v}.",
            "{p}'s sister's favourite food is {v} now.",
            "{v} is {p}'s dog's favourite food now.",
        ),
        first_person=(
            "My favourite food is {v}.",
            "My favourite food is {v} now.",
            "What is my favourite food?",
            "What was my favourite food before {v}?",
        ),
    ),
    Attribute(
        "car",
        "{p} drives a {v}.",
        "{p} drives a {v} now.",
        "What car does {p} drive?",
        "What car did {p} drive before the {v}?",
        (
            "Toyota Corolla",
            "Honda Civic",
            "Tesla Model 3",
            "Volvo XC60",
            "Ford Focus",
            "Mazda 3",
            "Kia Niro",
        ),
        (
            "{p} drives a {v} now.",
            "{p} now drives a {v}.",
            "{p} switched to a {v}.",
            "{p} traded in the old car for a {v}.",
            "{p}'s car is a {v} now.",
            "{p} drives a {v} these days.",
        ),
        ("{p} also drives a {v}.", "{p} bought a {v} as a second car."),
        first_person=(
            "I drive a {v}.",
            "I drive a {v} now.",
            "What car do I drive?",
            "What car did I drive before the {v}?",
        ),
    ),
    Attribute(
        "sport",
        "{p} plays {v}.",
        "{p} plays {v} now.",
        "Which sport does {p} play?",
        "Which sport did {p} play before {v}?",
        (
            "tennis",
            "squash",
            "football",
            "volleyball",
            "cricket",
            "basketball",
            "rugby",
            "badminton",
        ),
        (
            "{p} plays {v} now.",
            "{p} now plays {v}.",
            "{p} switched to {v}.",
            "{p} gave up the old sport for {v}.",
            "{p} plays {v} these days instead.",
        ),
        ("{p} also plays {v}.", "{p} took up {v} as well."),
    ),
)
PEOPLE = ("Alice", "Bob", "Carol", "Dave")
CRITICAL = (
    ("{p} is allergic to penicillin.", "What is {p} allergic to?"),
    ("{p} has type 1 diabetes.", "Does {p} have a medical condition?"),
    ("{p}'s blood type is O negative.", "What is {p}'s blood type?"),
    ("{p} is allergic to peanuts.", "Which food is {p} allergic to?"),
)
CHATTER = (
    "{p} took some cold medicine on {d}.",
    "{p} had a routine check-up at the doctor on {d}.",
    "{p} complained about the pollen on {d}; hay fever season has started.",
    "{p} cooked dinner for friends on {d}.",
    "{p} went hiking near the lake on {d}.",
    "{p} watched a documentary about {t} on {d}.",
    "{p} is reading a book about {t}.",
    "{p} said the team lunch on {d} was great.",
    "{p} had a headache after the meeting on {d}.",
    "{p} bought new running shoes on {d}.",
    "{p} talked about {t} over coffee on {d}.",
    "{p} visited the pharmacy on {d} to pick up vitamins.",
)
TOPICS = (
    "volcanoes",
    "jazz",
    "bees",
    "the Roman empire",
    "sailing",
    "chess",
    "mushrooms",
    "tea",
    "rockets",
)
PARAPHRASES = (
    (
        "What is {p}'s gym locker code?",
        (
            "{p}'s gym locker code is {n}.",
            "The code of {p}'s gym locker is {n}.",
            "{p} uses {n} as the gym locker code.",
            "At the gym, {p}'s locker code is {n}.",
        ),
    ),
    (
        "Which parking spot does {p} use at the office?",
        (
            "{p} parks in spot B{n} at the office.",
            "{p}'s parking spot at the office is B{n}.",
            "At the office, {p} parks in spot B{n}.",
        ),
    ),
)
START = datetime(2024, 1, 8, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Write:
    memory_id: str
    content: str
    at: datetime
    importance: float | None = None
    user_id: str | None = None  # ``--first-person``: the user who said it

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"memory_id": self.memory_id, "content": self.content}
        out["at"] = self.at.isoformat()
        if self.importance is not None:
            out["importance"] = self.importance
        if self.user_id is not None:
            out["user_id"] = self.user_id
        return out


@dataclass(frozen=True)
class Probe:
    # current, current-many (--unmarked), current-both (--paraphrased), as-of, before, critical,
    # re-accessed
    kind: str
    query: str
    at: datetime
    expected: str  # memory id
    versions: tuple[str, ...] = ()  # the fact's versions, oldest first (current, as-of, before)
    named: str = ""  # before: the version the question names
    history: bool = False
    lookalike: str = ""  # current (--paraphrased): a look-alike written after the last version
    user_id: str | None = None  # --first-person: asked by that user, of that user's memories


@dataclass
class Workload:
    tenant: str
    writes: list[Write] = field(default_factory=list)
    accesses: list[tuple[str, datetime]] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)


def _days(rng: random.Random, low: int, high: int) -> timedelta:
    return timedelta(days=rng.randint(low, high), hours=rng.randint(0, 9))


PHRASINGS = ("marked", "unmarked", "paraphrased", "first-person")
"""How the workload states a fact's later versions: ``marked`` as the first plus "now" ("Alice
lives in Lisbon now."), ``unmarked`` as the first ("Alice lives in Lisbon."), ``paraphrased`` in
one of the attribute's other ways of stating a replacement ("Alice relocated to Lisbon."), and
for a many-valued attribute (drives, plays) a last value held beside the others ("Alice also
drives a Kia Niro."); ``first-person`` as ``marked``, said by each person of themselves under
their own ``user_id`` ("I live in Lisbon now.", asked "Where do I live?" of that user's
memories; the facts the rule does not read in the first person, a sport, are left out)."""


def _sentence(template: str, person: str, value: str) -> str:
    text = template.format(p=person, v=value)
    return text[0].upper() + text[1:]


def _fact_versions(
    rng: random.Random, w: Workload, person: str, attribute: Attribute, phrasing: str
) -> tuple[list[Write], list[str]]:
    """The fact's versions, oldest first, and their values; ``paraphrased``, an addition (if the
    attribute has any) is the last of them.
    """
    values = rng.sample(attribute.values, rng.randint(2, 4))
    if phrasing == "paraphrased" and attribute.additions:
        values.append(rng.choice([v for v in attribute.values if v not in values]))
    at = START + _days(rng, 0, 60)
    versions: list[Write] = []
    user = person.lower() if phrasing == "first-person" else None
    for n, value in enumerate(values):
        if phrasing == "first-person" and attribute.first_person is not None:
            template = attribute.first_person[0 if n == 0 else 1]
        elif n == 0 or phrasing == "unmarked":
            template = attribute.first
        elif phrasing == "marked":
            template = attribute.later
        elif attribute.additions and n == len(values) - 1:
            template = rng.choice(attribute.additions)
        else:
            template = rng.choice(attribute.updates)
        memory_id = f"{w.tenant}-{person.lower()}-{attribute.name}-{n + 1}"
        text = _sentence(template, person, value)
        versions.append(Write(memory_id, text, at, user_id=user))
        at += _days(rng, 21, 120)
    return versions, values


def kept_current(attribute: Attribute) -> bool:
    """Memcore's supersession rule keeps a fact's older version current when the newer one is
    stated as the first was, without an update marker: a relation someone may hold several
    values of at once (drives, plays), as :func:`memcore.supersession.detect` decides it.
    """
    old, new = (attribute.first.format(p=PEOPLE[0], v=v) for v in attribute.values[:2])
    newer = Version("new", new, START + timedelta(days=1))
    return not detect(newer, [Version("old", old, START, 1.0)], SupersessionPolicy())


def _current_kind(attribute: Attribute, phrasing: str) -> str:
    """The kind of a fact's "current" question: ``current-both`` when its last version is an
    addition (it and the version before it are current), ``current-many`` when an unmarked
    many-valued fact keeps every version current (SPEC 6's marker rule), else ``current``.
    """
    if phrasing == "paraphrased" and attribute.additions:
        return "current-both"
    if phrasing == "unmarked" and kept_current(attribute):
        return "current-many"
    return "current"


def _add_facts(rng: random.Random, w: Workload, end: datetime, phrasing: str) -> None:
    first_person = phrasing == "first-person"
    for person in PEOPLE:
        user = person.lower() if first_person else None
        for attribute in ATTRIBUTES:
            if first_person and attribute.first_person is None:
                continue
            asked, asked_before = attribute.question, attribute.before
            if first_person and attribute.first_person is not None:
                asked, asked_before = attribute.first_person[2:]
            versions, values = _fact_versions(rng, w, person, attribute, phrasing)
            w.writes += versions
            ids = tuple(v.memory_id for v in versions)
            question = asked.format(p=person)
            kind = _current_kind(attribute, phrasing)
            like = _lookalike(rng, w, person, attribute, values, versions[-1].at, phrasing)
            w.probes.append(Probe(kind, question, end, ids[-1], ids, lookalike=like, user_id=user))
            for n in range(1, len(versions)):
                older, newer = versions[n - 1], versions[n]
                middle = older.at + (newer.at - older.at) / 2
                w.probes.append(
                    Probe("as-of", question, middle, older.memory_id, ids, user_id=user)
                )
                if kind == "current-both" and n == len(versions) - 1:
                    continue  # an addition replaces nothing: nothing was held "before" it
                before = asked_before.format(p=person, v=values[n])
                w.probes.append(
                    Probe(
                        "before",
                        before,
                        end,
                        older.memory_id,
                        ids,
                        newer.memory_id,
                        True,
                        user_id=user,
                    )
                )


def _lookalike(
    rng: random.Random,
    w: Workload,
    person: str,
    attribute: Attribute,
    values: Sequence[str],
    last: datetime,
    phrasing: str,
) -> str:
    """``--paraphrased``: writes a look-alike of a replacement after the fact's last version
    (:attr:`Attribute.lookalikes`, of a value the fact never held) and returns its id; "" for
    another phrasing or an attribute without look-alikes.
    """
    if phrasing != "paraphrased" or not attribute.lookalikes:
        return ""
    value = rng.choice([v for v in attribute.values if v not in values])
    template = rng.choice(attribute.lookalikes)
    memory_id = f"{w.tenant}-{person.lower()}-{attribute.name}-like"
    w.writes.append(Write(memory_id, _sentence(template, person, value), last + _days(rng, 5, 20)))
    return memory_id


def _add_critical(rng: random.Random, w: Workload, end: datetime) -> None:
    for n, person in enumerate(rng.sample(PEOPLE, 2)):
        fact, question = CRITICAL[rng.randrange(len(CRITICAL))]
        memory_id = f"{w.tenant}-{person.lower()}-critical-{n}"
        w.writes.append(Write(memory_id, fact.format(p=person), end - _days(rng, 200, 300), 0.9))
        w.probes.append(Probe("critical", question.format(p=person), end, memory_id))
        for m, template in enumerate(CHATTER * 3):
            at = end - timedelta(days=30) + _days(rng, 0, 29)
            text = template.format(p=person, d=f"{at:%A %d %B}", t=rng.choice(TOPICS))
            w.writes.append(Write(f"{w.tenant}-{person.lower()}-recent-{n}-{m}", text, at))


def _add_paraphrases(rng: random.Random, w: Workload, end: datetime) -> None:
    for n, (question, forms) in enumerate(PARAPHRASES):
        person = rng.choice(PEOPLE)
        number = rng.randint(10, 9999)
        at = end - _days(rng, 120, 180)
        ids = []
        for m, form in enumerate(forms):
            ids.append(f"{w.tenant}-{person.lower()}-para-{n}-{m}")
            w.writes.append(Write(ids[-1], form.format(p=person, n=number), at + timedelta(days=m)))
        chosen = rng.choice(ids)
        w.accesses += [(chosen, end - timedelta(days=d)) for d in (20, 10, 2)]
        w.probes.append(Probe("re-accessed", question.format(p=person), end, chosen, tuple(ids)))


def _add_chatter(rng: random.Random, w: Workload, end: datetime, count: int) -> None:
    for n in range(count):
        at = START + (end - START) * rng.random()
        template = rng.choice(CHATTER)
        text = template.format(p=rng.choice(PEOPLE), d=f"{at:%A %d %B %Y}", t=rng.choice(TOPICS))
        w.writes.append(Write(f"{w.tenant}-chatter-{n}", text, at))


CROWD = (
    "I like {t}.",
    "I hate {t}.",
    "I am allergic to {t}.",
    "I visited {c} last year.",
    "I went to {c} for a conference.",
    "I grew up in {c}.",
    "I studied in {c}.",
    "I want to visit {c}.",
    "I was born in {c}.",
    "I lived in {c} as a kid.",
    "I have a trip to {c} next month.",
    "My {r} lives in {c}.",
    "I met my {r} in {c}.",
    "My {r} works at {e}.",
    "I had an interview at {e} last year.",
    "I used to intern at {e}.",
    "I bought shares of {e}.",
    "I cooked {f} last night.",
    "I tried {f} in {c}.",
    "My {r} drives a {car}.",
    "I rented a {car} on holiday.",
)
"""``--crowded``: what a user also says of themselves, near their facts' words and stating none
of them (another subject, a past, a wish), in the year before the workload's facts: a user with
many memories, as an assistant keeps."""
CROWD_KIN = ("sister", "brother", "mother", "father", "cousin", "aunt", "uncle", "best friend")


def _add_crowd(rng: random.Random, w: Workload, count: int) -> None:
    """Up to ``count`` statements of :data:`CROWD` per person (the workload keeps one of each
    user's repeats: ~70 % of 200 at seed 7), under their ``user_id``; each relative
    named once per template, so none restates another's fact.
    """
    values = {a.name: a.values for a in ATTRIBUTES}
    for person in PEOPLE:
        kin: dict[str, list[str]] = {}
        for n in range(count):
            template = CROWD[n % len(CROWD)]
            free = kin.setdefault(template, list(CROWD_KIN))
            relative = free.pop(rng.randrange(len(free))) if "{r}" in template and free else ""
            if "{r}" in template and not relative:
                template = "I like {t}."
            text = template.format(
                t=rng.choice(TOPICS),
                c=rng.choice(values["city"]),
                r=relative,
                e=rng.choice(values["employer"]),
                f=rng.choice(values["food"]),
                car=rng.choice(values["car"]),
            )
            at = START - timedelta(days=365) * rng.random()  # the year before: an old user
            memory_id = f"{w.tenant}-{person.lower()}-crowd-{n}"
            w.writes.append(Write(memory_id, text, at, user_id=person.lower()))


def updates_workload(
    seed: int,
    tenants: Sequence[str] = UPDATE_TENANTS,
    *,
    phrasing: str = "marked",
    crowded: int = 0,
) -> list[Workload]:
    """The whole workload, a pure function of ``seed`` and ``phrasing`` (:data:`PHRASINGS`);
    writes sorted by time, contents unique. ``unmarked``: a fact's later versions are stated as
    its first, without the "now" that marks an update (SPEC 6's marker rule): only single-valued
    relations then supersede (lives in, works at, favourite food; not drives, plays).
    ``paraphrased``: every later version replaces the one before it, whatever the words (the
    truth a reader would take, not what memcore's rule decides), but an addition.
    ``crowded`` (``first-person`` only): up to that many more statements per user (:data:`CROWD`),
    drawn from their own generator, so the rest of the workload is drawn as without them.
    """
    if phrasing not in PHRASINGS:
        raise ValueError(f"phrasing: {phrasing!r} is not one of {PHRASINGS}")
    if crowded and phrasing != "first-person":
        raise ValueError(f"crowded: {crowded} needs the first-person phrasing, not {phrasing!r}")
    rng = random.Random(seed)
    crowd = random.Random(f"crowd-{seed}")
    out = []
    end = START + timedelta(days=540)
    for tenant in tenants:
        w = Workload(tenant)
        _add_facts(rng, w, end, phrasing)
        _add_critical(rng, w, end)
        _add_paraphrases(rng, w, end)
        _add_chatter(rng, w, end, 120)
        _add_crowd(crowd, w, crowded)
        seen: set[str] = set()
        w.writes = [
            x
            for x in sorted(w.writes, key=lambda x: x.at)
            if not _dup(seen, f"{x.user_id or ''}\x00{x.content}")  # "I live in Oslo." of two users
        ]
        out.append(w)
    return out


def _dup(seen: set[str], content: str) -> bool:
    if content in seen:
        return True
    seen.add(content)
    return False


@dataclass
class Outcome:
    """Per probe kind: hits and counts; plus leaks over every result."""

    hits: dict[str, list[float]] = field(default_factory=dict)
    leaks: int = 0
    results: int = 0

    def add(self, metric: str, value: bool) -> None:
        self.hits.setdefault(metric, []).append(float(value))

    def summary(self) -> dict[str, float]:
        out = {name: float(np.mean(v)) for name, v in sorted(self.hits.items())}
        out["leaks"] = float(self.leaks)
        return out


def score_probe(outcome: Outcome, probe: Probe, ranked: Sequence[str]) -> None:
    """Adds the probe's metrics for ``ranked`` (memory ids, best first)."""
    top = ranked[0] if ranked else ""
    if probe.kind == "current":
        outcome.add("newest-first", top == probe.expected)
        stale = [m for m in ranked if m in probe.versions and m != probe.expected]
        newest = ranked.index(probe.expected) if probe.expected in ranked else len(ranked)
        outcome.add("stale-above-newest", any(ranked.index(m) < newest for m in stale))
        outcome.add("stale returned", bool(stale))  # SPEC 6: superseded versions left out
        if probe.lookalike:  # a false supersession by the look-alike hides the newest
            outcome.add("kept past look-alike R@10", probe.expected in ranked)
    elif probe.kind == "current-many":
        outcome.add("many-valued newest R@10", probe.expected in ranked)
    elif probe.kind == "current-both":
        # the last version is an addition: it and the one before it are current, the rest not
        outcome.add("many-valued newest R@10", probe.expected in ranked)
        outcome.add("many-valued kept R@10", probe.versions[-2] in ranked)
        outcome.add("stale returned", any(m in probe.versions[:-2] for m in ranked))
    elif probe.kind == "as-of":
        outcome.add("as-of P@1", top == probe.expected)
    elif probe.kind == "before":
        # the named version's predecessor is among the versions listed: history mode found the
        # chain (an answer listing every version scores 1; which one is "before" is the reader's)
        outcome.add("before R@10", probe.expected in ranked)
    elif probe.kind == "critical":
        outcome.add("critical R@5", probe.expected in ranked[:5])
    else:
        outcome.add("re-accessed P@1", top == probe.expected)


def probe_body(probe: Probe) -> dict[str, Any]:
    body: dict[str, Any] = {
        "query": probe.query,
        "k": K,
        "at": probe.at.isoformat(),
        "track": False,
    }
    if probe.history:
        body["include_history"] = True
    if probe.user_id is not None:
        body["filters"] = {"user_id": probe.user_id}
    return body


def wait_for_accesses(api: Api, key: str, accesses: Sequence[tuple[str, datetime]]) -> None:
    """Poll until every explicitly accessed memory shows its accesses (they have no token)."""
    wanted: dict[str, int] = {}
    for memory_id, _ in accesses:
        wanted[memory_id] = wanted.get(memory_id, 0) + 1
    deadline = time.monotonic() + 120
    for memory_id, count in wanted.items():
        while ((api.get(key, memory_id) or {}).get("access_count") or 0) < count:
            if time.monotonic() > deadline:
                print(
                    f"  warning: accesses of {memory_id} not applied after 120 s", file=sys.stderr
                )
                return
            time.sleep(0.2)


SHUFFLED_CHUNK = 50
"""``--shuffled``: how many writes an import sends at a time (each applied before the next)."""


def sent_in(w: Workload, seed: int, shuffled: bool) -> list[list[Write]]:
    """The workload's writes as the bench sends them: all at once in time order, or
    ``shuffled`` (an import of a user's history in no order) in chunks of
    :data:`SHUFFLED_CHUNK`, in an order drawn from ``seed`` and the tenant (each chunk is
    applied before the next is sent: a fact's newer version is often written before its older).
    """
    if not shuffled:
        return [list(w.writes)]
    order = list(w.writes)
    random.Random(f"shuffle-{seed}-{w.tenant}").shuffle(order)
    return [order[i : i + SHUFFLED_CHUNK] for i in range(0, len(order), SHUFFLED_CHUNK)]


def serve_workload(
    api: Api, key: str, w: Workload, force: bool, chunks: Sequence[Sequence[Write]] = ()
) -> Outcome:
    """Send ``chunks`` (default: every write at once), then the accesses, and score the probes."""
    if not force and api.get(key, w.writes[0].memory_id) is not None:
        msg = f"{w.tenant} already holds this workload: reset the service state or pass --force"
        raise SystemExit(msg)
    chunks = chunks or [w.writes]
    for chunk in chunks[:-1]:
        token = api.write(key, [x.body() for x in chunk])
        if not api.settled(key, probe_body(w.probes[0]), [token]):
            api.wait_for(key, [x.memory_id for x in chunk])
    tokens = [api.write(key, [x.body() for x in chunks[-1]])]
    tokens += [api.access(key, [memory_id], at) for memory_id, at in w.accesses]
    own = {x.memory_id: x.content for x in w.writes}
    if not api.settled(key, probe_body(w.probes[0]), tokens):
        api.wait_for(key, list(own))
        wait_for_accesses(api, key, w.accesses)
    outcome = Outcome()
    for probe in w.probes:
        results = api.recall(key, probe_body(probe))
        outcome.results += len(results)
        outcome.leaks += sum(own.get(r["memory_id"]) != r["content"] for r in results)
        score_probe(outcome, probe, [r["memory_id"] for r in results])
    return outcome


def offline_updates(
    workloads: Sequence[Workload], embedder: CachedEmbedder, seed: int
) -> dict[str, Outcome]:
    """Cosine and BM25 (stemmed, as the service's keyword index) over the tenant's memories
    written up to each probe's ``at``.
    """
    out = {"offline cosine": Outcome(), "offline bm25": Outcome()}
    rng = np.random.default_rng(seed)
    for w in workloads:
        vectors = embedder.embed([x.content for x in w.writes])
        queries = embedder.embed([p.query for p in w.probes])
        for probe, qv in zip(w.probes, queries, strict=True):
            visible = [
                i
                for i, x in enumerate(w.writes)
                if x.at <= probe.at and (probe.user_id is None or x.user_id == probe.user_id)
            ]
            texts = [w.writes[i].content for i in visible]
            scores = {
                "offline cosine": vectors[visible] @ qv,
                "offline bm25": bm25_matrix([probe.query], texts, stemmed=True)[0],
            }
            for name, s in scores.items():
                order = np.lexsort((rng.random(len(s)), -s))[:K]  # ties in a seeded random order
                score_probe(out[name], probe, [w.writes[visible[i]].memory_id for i in order])
    return out


UPDATE_COLUMNS = (
    "newest-first",
    "stale-above-newest",
    "stale returned",
    "as-of P@1",
    "before R@10",
    "critical R@5",
    "re-accessed P@1",
    "many-valued newest R@10",
    "many-valued kept R@10",
    "kept past look-alike R@10",
    "leaks",
)


def run_updates(args: argparse.Namespace) -> dict[str, Any]:
    workloads = updates_workload(args.seed, phrasing=args.phrasing, crowded=args.crowded)
    keys = api_keys(args.tenants_file, args.key)
    require_keys(keys, [w.tenant for w in workloads], args.tenants_file)
    service = Outcome()
    with Api(args.base_url) as api:
        for w in workloads:
            chunks = sent_in(w, args.seed, args.shuffled)
            got = serve_workload(api, keys[w.tenant], w, args.force, chunks)
            for name, values in got.hits.items():
                service.hits.setdefault(name, []).extend(values)
            service.leaks += got.leaks
            service.results += got.results
            print(f"  {w.tenant}: {len(w.writes)} writes, {len(w.probes)} probes", file=sys.stderr)
        history = api.supports_history
    offline = offline_updates(workloads, CachedEmbedder(args.cache), args.seed)
    rows = {"service (HTTP API)": service, **offline}
    counts: dict[str, int] = {}
    for probe in (p for w in workloads for p in w.probes):
        counts[probe.kind] = counts.get(probe.kind, 0) + 1
    return {
        "seed": args.seed,
        "phrasing": args.phrasing,
        "crowded": args.crowded,
        "shuffled": args.shuffled,
        "tenants": len(workloads),
        "writes": sum(len(w.writes) for w in workloads),
        "probes": counts,
        "results": service.results,
        "include_history": "accepted" if history else "refused (recalled without it)",
        "read_your_writes": "token (after)"
        if api.supports_after
        else "polled GET /v1/memories/{id}",
        "rows": {name: outcome.summary() for name, outcome in rows.items()},
    }


def _cell(column: str, value: float | None) -> str:
    """A table cell: "-" for a metric the run had no probe of (many-valued: ``--unmarked`` or
    ``--paraphrased``).
    """
    if value is None:
        return "-"
    return f"{value:.0f}" if column == "leaks" else f"{value:.3f}"


def updates_markdown(result: Mapping[str, Any]) -> str:
    lines = [
        f"Knowledge updates (seed {result['seed']}"
        + ("" if result["phrasing"] == "marked" else f", updates {result['phrasing']}")
        + (f", crowded {result['crowded']}" if result.get("crowded") else "")
        + (", shuffled" if result.get("shuffled") else "")
        + f"): {result['tenants']} tenants, {result['writes']} "
        f"writes, probes {result['probes']}, {result['results']} results checked for leaks; "
        f"include_history {result['include_history']}, settle: {result['read_your_writes']}",
        "",
        "| ranking | " + " | ".join(UPDATE_COLUMNS) + " |",
        "|---|" + "---:|" * len(UPDATE_COLUMNS),
    ]
    for name, summary in result["rows"].items():
        cells = [_cell(c, summary.get(c)) for c in UPDATE_COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- command line -----------------------------------------------------------------------------------


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Recall quality through the HTTP API")
    parser.add_argument("mode", choices=("tenants", "locomo", "updates"))
    parser.add_argument("--base-url", default=DEFAULT_URL)
    parser.add_argument("--tenants-file", type=Path, default=DEFAULT_TENANTS)
    parser.add_argument("--key", action="append", default=[], metavar="TENANT=KEY")
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="locomo10.json (never in the repo)"
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="embedding cache folder")
    parser.add_argument("--conversations", type=int, default=0, help="locomo: the first N only")
    parser.add_argument(
        "--representation",
        choices=list(BY_NAME),
        default=SERVICE_VARIANT.name,
        help="locomo: what each turn's write carries (bench.quality_study variants)",
    )
    parser.add_argument("--seed", type=int, default=7, help="updates: the generator's seed")
    parser.add_argument(
        "--force", action="store_true", help="updates: write into non-empty tenants"
    )
    phrasing = parser.add_mutually_exclusive_group()
    phrasing.add_argument(
        "--unmarked",
        action="store_const",
        const="unmarked",
        dest="phrasing",
        help='updates: later versions without "now" (on fresh tenants: the ids are the same)',
    )
    phrasing.add_argument(
        "--paraphrased",
        action="store_const",
        const="paraphrased",
        dest="phrasing",
        help="updates: later versions in other words, and additions (on fresh tenants)",
    )
    phrasing.add_argument(
        "--first-person",
        action="store_const",
        const="first-person",
        dest="phrasing",
        help='updates: each person says it of themselves ("I live in Lisbon now."), under their'
        " user_id (on fresh tenants)",
    )
    parser.set_defaults(phrasing="marked")
    parser.add_argument(
        "--crowded",
        type=int,
        default=0,
        metavar="N",
        help="updates --first-person: up to N more statements each user says of themselves, of other"
        " things (a user with many memories)",
    )
    parser.add_argument(
        "--shuffled",
        action="store_true",
        help=f"updates: the writes sent in a seeded random order, {SHUFFLED_CHUNK} at a time, each"
        " chunk applied before the next (an import: newer versions often come first)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.mode == "tenants":
        added = add_tenants(args.tenants_file, bench_tenants(args.data))
        print(f"{args.tenants_file}: added {len(added)} tenants; restart the service to load them")
        return
    runners: dict[
        str, tuple[Callable[[argparse.Namespace], dict[str, Any]], Callable[..., str]]
    ] = {
        "locomo": (run_locomo, locomo_markdown),
        "updates": (run_updates, updates_markdown),
    }
    run, markdown = runners[args.mode]
    result = run(args)
    print(json.dumps(result, indent=1) if args.json else markdown(result))


if __name__ == "__main__":
    main()
