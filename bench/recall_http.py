"""Recall through the HTTP API of a running service (``make up``): the issue-12 measurement.

    .venv/bin/python -m bench.recall_http tenants          # adds bench-t000 .. to var/tenants.json
    make down && rm -rf var/worker var/milvus.db var/kafka/data && make up
    .venv/bin/python -m bench.recall_http run [--memories 100000] [--tenants 100] [--concurrency 32]
                                              [--requests 4000] [--base-url http://127.0.0.1:8080]
                                              [--raw-milvus 400]

(``make up STACK_EDGES=1`` serves the port from two processes: docs/benchmarks.md.)

``run`` writes ``--memories`` memories spread over ``--tenants`` tenants through
``POST /v1/memories`` with given vectors (``bench.recall``'s generator: unit vectors clustered
around 16 centres per tenant, random importance), waits until the worker has applied them (the
read-your-writes token of each tenant's last write, as ``after`` of one recall), then sends
``--requests`` recalls (``vector``, k 10, ``track`` false, a random tenant each) from
``--concurrency`` asyncio clients, each on its own keep-alive connection with a minimal HTTP/1.1
client (:class:`Connection`: httpx costs ~4 ms of CPU a request, as much as the service, on the
same two cores; bodies are encoded before the clock starts; an answer other than 200 ends the
run), after a warm-up that loads every tenant.

Prints QPS, p50/p99 latency, and exact top 10: the share of the first 200 answers equal to the
top 10 of the default score computed by brute force over every memory the bench wrote for the
tenant (``memcore.rank`` with the default policy over all of them, not only 100 candidates),
and the service's CPU milliseconds per recall during the timed phase (``--server-pid``, default
``make up``'s ``var/worker.pid`` and ``var/edge-*.pid`` (``STACK_EDGES``), read when
``--base-url`` is this machine; every thread of those processes summed, their background work
included, their child processes not).
Client and service share the machine's cores. ``--raw-milvus N`` then searches Milvus directly
with the first N of the same queries (:func:`compare_raw`) and prints the ratio of the two QPS.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import orjson

from bench.quality import DEFAULT_TENANTS, add_tenants, api_keys, require_keys
from bench.recall import AT, CLUSTERS, K, around, unit
from bench.stats import p50_p99
from memcore import Candidate, RankParams, rank
from memcore.policy import RecallPolicy

WRITE_BATCH = 500


def tenant_names(n: int) -> list[str]:
    return [f"bench-t{j:03d}" for j in range(n)]


class Corpus:
    """What the bench wrote for each tenant: ids, unit vectors, importance."""

    def __init__(self, tenants: list[str], per_tenant: int, dim: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.centres = {t: unit(rng.standard_normal((CLUSTERS, dim))) for t in tenants}
        self.vectors = {t: around(self.centres[t], per_tenant, rng) for t in tenants}
        self.importance = {t: rng.uniform(0.05, 1.0, per_tenant) for t in tenants}
        self.ids = {t: [f"{t}-m{i:06d}" for i in range(per_tenant)] for t in tenants}

    def exact_top(self, tenant: str, query: np.ndarray) -> list[str]:
        """The default policy's top k over every memory of the tenant (``memcore.rank``: never
        accessed, so decay and tier do not enter; no keywords for a vector query).
        """
        cosine = (self.vectors[tenant] @ query).tolist()
        candidates = [
            Candidate(memory_id, sim, float(imp), AT, AT, 24.0)
            for memory_id, sim, imp in zip(
                self.ids[tenant], cosine, self.importance[tenant], strict=True
            )
        ]
        return [s.memory_id for s in rank(candidates, AT, RankParams(k=K, policy=RecallPolicy()))]


async def write_all(
    client: httpx.AsyncClient,
    keys: dict[str, str],
    corpus: Corpus,
    concurrency: int,
    facts: bool = False,
) -> dict[str, list[str]]:
    """Write every tenant's memories; every reply's token per tenant (its batches go out from
    several writers at once, and one reply's token covers its own records only). ``facts``:
    each content states a fact of its own subject (``<id> lives in city <n>``), so every write is
    checked for the memories it supersedes (SPEC section 6) and none is found.
    """
    said = "{} lives in city {}" if facts else "memory {}: something worth keeping"
    tokens: dict[str, list[str]] = {}
    todo = [(t, start) for t in corpus.ids for start in range(0, len(corpus.ids[t]), WRITE_BATCH)]
    it = iter(todo)

    async def writer() -> None:
        for tenant, start in it:
            stop = start + WRITE_BATCH
            memories = [
                {
                    "memory_id": memory_id,
                    "content": said.format(memory_id, i % 97),
                    "embedding": vector.tolist(),
                    "importance": float(imp),
                    "at": AT.isoformat(),
                }
                for i, (memory_id, vector, imp) in enumerate(
                    zip(
                        corpus.ids[tenant][start:stop],
                        corpus.vectors[tenant][start:stop],
                        corpus.importance[tenant][start:stop],
                        strict=True,
                    )
                )
            ]
            reply = await call(client, "/v1/memories", keys[tenant], {"memories": memories})
            tokens.setdefault(tenant, []).append(str(reply["token"]))

    await asyncio.gather(*(writer() for _ in range(concurrency)))
    return tokens


async def call(
    client: httpx.AsyncClient, path: str, key: str, body: dict[str, object], patience_s: float = 60
) -> dict[str, object]:
    """POST, retrying 429 and 5xx answers (Retry-After, else backing off) for ``patience_s``."""
    deadline = time.monotonic() + patience_s
    attempt = 0
    while time.monotonic() < deadline:
        reply = await client.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
        if reply.status_code == 429 or reply.status_code >= 500:
            await asyncio.sleep(float(reply.headers.get("Retry-After", min(0.1 * 2**attempt, 5))))
            attempt += 1
            continue
        if reply.status_code >= 400:
            raise SystemExit(f"POST {path}: HTTP {reply.status_code} {reply.text[:500]}")
        out: dict[str, object] = reply.json()
        return out
    raise SystemExit(f"POST {path}: still refused after {patience_s:.0f} s")


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs and reads ``Content-Length`` answers."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: bytes) -> tuple[int, bytes]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n"
        ).encode()
        self.writer.write(head + headers + b"\r\n" + body)
        status_line, _, rest = (await self.reader.readuntil(b"\r\n\r\n")).partition(b"\r\n")
        length = 0
        for line in rest.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def recall_body(vector: np.ndarray) -> dict[str, object]:
    return {"vector": vector.tolist(), "k": K, "at": AT.isoformat(), "track": False}


async def run(args: argparse.Namespace) -> None:
    tenants = tenant_names(args.tenants)
    keys = api_keys(args.tenants_file, [])
    require_keys(keys, tenants, args.tenants_file)
    corpus = Corpus(tenants, args.memories // args.tenants, args.dim, args.seed)
    limits = httpx.Limits(
        max_connections=args.concurrency, max_keepalive_connections=args.concurrency
    )
    async with httpx.AsyncClient(base_url=args.base_url, timeout=120, limits=limits) as client:
        start = time.perf_counter()
        tokens: dict[str, list[str]] = {}
        if not args.skip_write:
            tokens = await write_all(client, keys, corpus, 4, args.facts)
            written = time.perf_counter() - start
            rate = args.memories / written
            print(f"wrote {args.memories:,} memories in {written:.1f} s ({rate:,.0f}/s)")
        for tenant in tenants:  # read-your-writes: each tenant's writes applied, then loaded
            body = recall_body(corpus.centres[tenant][0])
            if tenant in tokens:
                body["after"] = tokens[tenant]  # the API merges a list of tokens
            await call(client, "/v1/recall", keys[tenant], body, patience_s=args.apply_patience_s)
        applied = time.perf_counter() - start
        print(f"applied and searchable after {applied:.1f} s")
        rng = np.random.default_rng(args.seed + 1)
        picks = [tenants[int(i)] for i in rng.integers(0, len(tenants), args.requests)]
        queries = [(t, around(corpus.centres[t], 1, rng)[0]) for t in picks]
        latencies: list[float] = []
        answers: dict[int, list[str]] = {}
        # encoded before the clock starts: the client shares the cores with the service
        bodies = [
            (
                orjson.dumps(recall_body(v)),
                f"Authorization: Bearer {keys[t]}\r\nContent-Type: application/json\r\n".encode(),
            )
            for t, v in queries
        ]
        it = iter(enumerate(bodies))
        url = httpx.URL(args.base_url)

        async def client_loop() -> None:
            connection = Connection(url.host, url.port or 80)
            try:
                for n, (content, headers) in it:
                    t = time.perf_counter()
                    status, answer = await connection.post("/v1/recall", content, headers)
                    latencies.append(time.perf_counter() - t)
                    if status != 200:
                        raise SystemExit(f"POST /v1/recall: HTTP {status} {answer[:500]!r}")
                    if n < 200:
                        answers[n] = [r["memory_id"] for r in orjson.loads(answer)["results"]]
            finally:
                connection.close()

        before = cpu_now(args.server_pid)
        start = time.perf_counter()
        await asyncio.gather(*(client_loop() for _ in range(args.concurrency)))
        wall = time.perf_counter() - start
        cpu = per_recall(before, cpu_now(args.server_pid), len(queries))
    exact = sum(answers[n] == corpus.exact_top(*queries[n]) for n in answers)
    print_head()
    row(args, "HTTP /v1/recall", latencies, wall, f"{exact}/{len(answers)}", *cpu)
    if args.raw_milvus:
        compare_raw(args, queries[: args.raw_milvus], len(latencies) / wall)


def compare_raw(
    args: argparse.Namespace, queries: list[tuple[str, np.ndarray]], http_qps: float
) -> None:
    """The same queries searched in Milvus directly, in its best configuration for this shape
    (issue 12: ids and distances only, Bounded consistency, the tenant's partition key as the
    filter, limit k), from ``--concurrency`` threads; prints its row and the ratio HTTP / raw.
    Milvus is ``--milvus-uri``, by default the address ``make up`` writes to
    ``var/milvus.endpoint`` (the worker's embedded Milvus Lite).
    """
    from pymilvus import MilvusClient

    uri = args.milvus_uri or Path("var/milvus.endpoint").read_text().strip()
    client = MilvusClient(uri=uri)
    latencies: list[float] = []

    def search(query: tuple[str, np.ndarray]) -> None:
        tenant, vector = query
        started = time.perf_counter()
        client.search(
            args.collection,
            data=[vector.tolist()],
            anns_field="vector",
            filter=f'tenant_id == "{tenant}"',
            limit=K,
            output_fields=[],
            search_params={"metric_type": "COSINE"},
            consistency_level="Bounded",
        )
        latencies.append(time.perf_counter() - started)

    with ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(search, queries[: args.concurrency]))  # warm-up: connections, first loads
        latencies.clear()
        before = cpu_now(args.server_pid)
        start = time.perf_counter()
        list(pool.map(search, queries))
        wall = time.perf_counter() - start
        cpu = per_recall(before, cpu_now(args.server_pid), len(queries))
    client.close()
    row(args, f"raw Milvus search, limit {K}, ids only", latencies, wall, "—", *cpu)
    raw_qps = len(latencies) / wall
    print(f"ratio HTTP recall / raw Milvus (QPS): {http_qps / raw_qps:.2f} (issue 12: >= 0.8)")


def cpu_now(pid_files: list[Path] | None) -> tuple[float | None, float]:
    """CPU seconds used so far by the service's processes (None: unreadable) and by this one."""
    return processes_cpu_s(pid_files), time.process_time()


def per_recall(
    before: tuple[float | None, float], after: tuple[float | None, float], recalls: int
) -> tuple[float | None, float]:
    """CPU milliseconds per recall between two :func:`cpu_now`: the service's, this client's."""
    service = None
    if before[0] is not None and after[0] is not None:
        service = (after[0] - before[0]) * 1000 / recalls
    return service, (after[1] - before[1]) * 1000 / recalls


def print_head() -> None:
    """The head of the table whose lines :func:`row` prints."""
    print(
        "| path | memories | tenants | clients | QPS | p50 ms | p99 ms | exact top 10 |"
        " server CPU ms per recall | client CPU ms per recall |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")


def row(
    args: argparse.Namespace,
    path: str,
    latencies: list[float],
    wall: float,
    exact: str,
    cpu: float | None,
    own: float,
) -> None:
    """One result row; ``cpu``: the service's CPU ms per query, ``own``: this client's."""
    p50, p99 = p50_p99(x * 1000 for x in latencies)
    print(
        f"| {path} | {args.memories:,} | {args.tenants} | {args.concurrency} | "
        f"{len(latencies) / wall:,.0f} | {p50:.1f} | {p99:.1f} | "
        f"{exact} | {'—' if cpu is None else f'{cpu:.2f}'} | {own:.2f} |"
    )


def processes_cpu_s(pid_files: list[Path] | None) -> float | None:
    """CPU seconds the processes in ``pid_files`` have used together (:func:`process_cpu_s`);
    None when any of them cannot be read (a stale pid file would under-report the service).
    """
    used = [process_cpu_s(p) for p in pid_files or ()]
    if not used or any(s is None for s in used):
        return None
    return sum(s for s in used if s is not None)


def process_cpu_s(pid_file: Path) -> float | None:
    """CPU seconds (user + system, every thread) the process in ``pid_file`` has used; None
    without that file or ``/proc`` (Linux only). Steadier than QPS on shared cores: it does not
    count the time the client and the broker take from the service.
    """
    try:
        pid = int(pid_file.read_text().strip())
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return None
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=("tenants", "run"))
    parser.add_argument("--base-url", default="http://127.0.0.1:8080")
    parser.add_argument("--tenants-file", type=Path, default=DEFAULT_TENANTS)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=4_000)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument(
        "--apply-patience-s",
        type=float,
        default=3600,
        help="how long the wait for the worker to apply a tenant's writes may take (s)",
    )
    parser.add_argument(
        "--raw-milvus",
        type=int,
        default=0,
        help="then search Milvus directly with this many of the same queries (0: not)",
    )
    parser.add_argument(
        "--milvus-uri", default=None, help="for --raw-milvus (default: var/milvus.endpoint)"
    )
    parser.add_argument("--collection", default="memories", help="for --raw-milvus")
    parser.add_argument(
        "--skip-write", action="store_true", help="the memories are there already (same seed)"
    )
    parser.add_argument(
        "--facts",
        action="store_true",
        help="each content states a fact (every write checked for supersession; none found)",
    )
    parser.add_argument(
        "--server-pid",
        type=Path,
        nargs="+",
        default=None,
        help="pid files of the service's processes (default make up's: var/worker.pid and"
        " var/edge-*.pid): their CPU per recall is reported",
    )
    args = parser.parse_args()
    if args.server_pid is None:
        args.server_pid = [Path("var/worker.pid"), *sorted(Path("var").glob("edge-*.pid"))]
    if httpx.URL(args.base_url).host not in ("127.0.0.1", "localhost", "::1"):
        args.server_pid = None  # a service elsewhere: its CPU is not this machine's to read
    if args.mode == "tenants":
        added = add_tenants(args.tenants_file, tenant_names(args.tenants))
        print(f"{args.tenants_file}: added {len(added)} tenants; restart the service to load them")
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
