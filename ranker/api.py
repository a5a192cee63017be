"""The HTTP API (FastAPI; OpenAPI at /docs and /openapi.json).

Every route is authenticated by an API key (``Authorization: Bearer <key>`` or ``X-API-Key``); the
key decides the tenant, never the body. No key or an unknown key: 401. Another tenant's memory id is
indistinguishable from a missing one: 404. More than ``max_in_flight`` API requests being served,
or a saturated batcher: 429 with ``Retry-After`` (:mod:`ranker.admission`). Kafka or Milvus not
answering: 503 with ``Retry-After``; any other failure: 500, with a JSON body like every error.

Writes and accesses are checked with the worker's own decode (:mod:`storage.records`) before
anything is produced: a request is all-or-nothing, and a 200 means the worker will apply it. Every
validation error is a 422 with one body shape, ``{"detail": "<field>=<value>: <reason>", "field":
"memories[3].tags[2]"}``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from memcore import InvalidField, Tier
from memcore.ids import check_id
from memcore.policy import RecallPolicy, RecallPreset
from ranker.admission import Admission
from ranker.applied import NotAppliedError, Token
from ranker.batcher import Overloaded
from ranker.errors import Unavailable
from ranker.logs import RequestLog, set_tenant
from ranker.service import Recalled, RecallQuery, RecallService
from storage import Filters, MemoryRow, StorageError, from_us, to_us
from storage.records import Limits, RecordError, checked_access, checked_write
from storage.tenants import Tenant, TenantRegistry

log = logging.getLogger(__name__)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RecallFilters(_Body):
    memory_types: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    session_id: str | None = None
    agent_id: str | None = None
    created_from: AwareDatetime | None = None
    created_to: AwareDatetime | None = None


class Weights(_Body):
    similarity: float | None = Field(None, ge=0)
    keyword: float | None = Field(None, ge=0)
    importance: float | None = Field(None, ge=0)
    recency: float | None = Field(None, ge=0)
    graph: float | None = Field(None, ge=0)


class RecallBody(_Body):
    query: str | None = Field(None, min_length=1, max_length=16_384)
    vector: list[float] | None = None
    k: int = Field(10, ge=1, le=1000)
    filters: RecallFilters = Field(default_factory=RecallFilters)
    preset: Literal["mnemostream", "zeromemory", "zeph", "powermem"] | None = None
    weights: Weights | None = None
    mmr_lambda: float | None = Field(None, ge=0, le=1)
    min_score: float | None = None
    graphrag: bool | None = None
    at: AwareDatetime | None = Field(
        None,
        description="as-of time: only memories written by then, in the versions valid then, scored"
        " at that time (importance and counters are today's: the service keeps no history of"
        " them). Default: now, with every memory written so far.",
    )
    track: bool = True
    include_history: bool = Field(
        False,
        description="also return superseded versions; the top k are then listed in time order",
    )
    after: str | list[str] | None = Field(
        None,
        description="tokens from write or access responses: wait until the worker applied them"
        " (read-your-writes; 503 with Retry-After when it has not within the server's wait)",
    )


class MemoryBody(_Body):
    """One memory to write. Strict types (no coercion): the worker decodes the record strictly."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    content: str = Field(min_length=1)
    context: str | None = Field(
        None,
        description="words to find this memory by (e.g. the date, the speaker, the previous turn)"
        ": embedded and keyword-indexed with the content, never returned as content",
    )
    memory_id: str | None = None
    at: str | None = Field(
        None,
        json_schema_extra={"format": "date-time"},
        description="event time, ISO 8601 with a timezone (default: now); not before 1970, at most"
        " MNEMO_MAX_FUTURE_SKEW_S after the server's clock",
    )
    embedding: list[float] | None = None
    importance: float | None = Field(None, ge=0, le=1)
    memory_type: str | None = None
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    session_id: str | None = None
    agent_id: str | None = None
    relations: list[str] = Field(default_factory=list)


class WriteBody(_Body):
    memories: list[MemoryBody] = Field(min_length=1, max_length=1000)


class AccessBody(_Body):
    memory_ids: list[str] = Field(min_length=1, max_length=1000)
    kind: Literal["recall", "get", "explicit"] = "explicit"
    at: AwareDatetime | None = None


class GetManyBody(_Body):
    memory_ids: list[str] = Field(min_length=1, max_length=1000)
    after: str | list[str] | None = Field(
        None, description="read-your-writes tokens, as for recall"
    )


async def tenant(  # async: FastAPI runs a sync dependency in a thread, a hop per request
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> Tenant:
    """The tenant the request's API key acts for; 401 without one."""
    key = x_api_key
    if authorization and authorization.lower().startswith("bearer "):
        key = authorization[7:].strip()
    registry: TenantRegistry = request.app.state.registry
    found = registry.by_api_key(key) if key else None
    if found is None:
        raise HTTPException(401, "missing or unknown API key", {"WWW-Authenticate": "Bearer"})
    set_tenant(found.tenant_id)
    return found


Auth = Annotated[Tenant, Depends(tenant)]


def create_api(
    service: RecallService,
    registry: TenantRegistry,
    limits: Limits | None = None,
    *,
    max_in_flight: int = 256,
    ready: Mapping[str, Callable[[], Awaitable[bool]]] | None = None,
) -> FastAPI:
    """The app; ``service`` must be started (and stopped) by the caller's lifespan. ``limits``:
    what the worker accepts (``SharedSettings.limits()``); default: the embedder's dimension and
    the settings' default sizes and skew. ``max_in_flight``: API requests served at once, beyond
    which 429. ``ready``: named checks (cheap or cached) that ``GET /readyz`` requires besides
    the batcher running (the producer, Milvus, the worker's recovery in ``python -m server``).
    """
    api = FastAPI(title="Mnemostream", version="0.1.0")
    api.add_middleware(
        Admission,  # inside RequestLog: a refused request is logged with its request id too
        max_in_flight=max_in_flight,
        metrics=service.metrics,
        routes=lambda: api.routes,
    )
    api.add_middleware(RequestLog)
    checks = dict(ready or {})
    api.state.registry = registry
    limits = limits or Limits(service.embedder.dim, 16_384, registry)

    _errors(api)

    @api.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @api.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        """200 while the service can score (started, batcher alive); 503 otherwise."""
        if service.batcher.running:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "stopped"}, 503)

    @api.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        """200 when the service can answer: the batcher runs and every check passes; else 503
        naming the checks that fail.
        """
        results = {"batcher": service.batcher.running}
        for name, check in checks.items():
            try:
                results[name] = bool(await check())
            except Exception:
                log.warning("readiness check %s failed", name, exc_info=True)
                results[name] = False
        if all(results.values()):
            return JSONResponse({"status": "ready", "checks": results})
        return JSONResponse({"status": "not ready", "checks": results}, 503)

    @api.post("/v1/recall")
    async def recall(body: RecallBody, who: Auth) -> dict[str, Any]:
        results = await service.recall(who.tenant_id, _query(body, who, ("active", "archived")))
        if body.include_history:
            results.sort(key=lambda r: (r.row.created_at_us, r.row.memory_id))
        return {"results": [_recalled(r) for r in results]}

    @api.post("/v1/archive/search")
    async def archive_search(body: RecallBody, who: Auth) -> dict[str, Any]:
        query = _query(body.model_copy(update={"track": False}), who, ("archived",))
        results = await service.recall(who.tenant_id, query)
        return {"results": [_recalled(r) for r in results]}

    @api.post("/v1/memories")
    async def write(body: WriteBody, who: Auth) -> dict[str, Any]:
        docs = _writes(body, who.tenant_id, limits, datetime.now(UTC))
        ids, token = await service.write(who.tenant_id, docs)
        return {"ids": ids, "token": token.encode()}

    @api.post("/v1/access")
    async def access(body: AccessBody, who: Auth) -> dict[str, Any]:
        now = datetime.now(UTC)
        at = body.at or now
        _check_accesses(body, who.tenant_id, at, limits, now)
        token = await service.access(who.tenant_id, body.memory_ids, at, body.kind)
        return {"accepted": len(body.memory_ids), "token": token.encode()}

    @api.get("/v1/memories/{memory_id}")
    async def get(
        memory_id: str, who: Auth, after: Annotated[list[str] | None, Query()] = None
    ) -> dict[str, Any]:
        row = await service.get(who.tenant_id, memory_id, Token.merged(after or []))
        if row is None:
            raise HTTPException(404, "no such memory")
        return _memory(row)

    _more_memory_routes(api, service)
    return api


def _more_memory_routes(api: FastAPI, service: RecallService) -> None:
    """Batch get and delete."""

    @api.post("/v1/memories/get")
    async def get_many(body: GetManyBody, who: Auth) -> dict[str, Any]:
        """Many memories by id, any state: those found, and the ids this tenant has none of."""
        ids = [check_id("memory_ids", m) for m in body.memory_ids]
        given = body.after if body.after is not None else []
        after = Token.merged([given] if isinstance(given, str) else given)
        found = await service.get_many(who.tenant_id, ids, after)
        return {
            "memories": [_memory(found[m]) for m in dict.fromkeys(ids) if m in found],
            "missing": [m for m in dict.fromkeys(ids) if m not in found],
        }

    @api.delete("/v1/memories/{memory_id}")
    async def forget(
        memory_id: str,
        who: Auth,
        purge: bool = False,
        after: Annotated[list[str] | None, Query()] = None,
    ) -> dict[str, Any]:
        """Delete a memory: recall never returns it again and get shows it ``deleted``; with
        ``purge`` its row leaves the serving store too (get answers 404). Audited; 404 when this
        tenant has no such memory (after ``after`` is applied).
        """
        check_id("memory_id", memory_id)
        if await service.get(who.tenant_id, memory_id, Token.merged(after or [])) is None:
            raise HTTPException(404, "no such memory")
        token = await service.forget(who.tenant_id, memory_id, datetime.now(UTC), purge=purge)
        return {"memory_id": memory_id, "purge": purge, "token": token.encode()}


def _errors(api: FastAPI) -> None:
    """One JSON body for every error: ``detail`` (and ``field`` for a 422)."""

    @api.exception_handler(Overloaded)
    async def overloaded(_: object, exc: Overloaded) -> JSONResponse:
        retry = max(1, math.ceil(exc.retry_after_s))
        return JSONResponse({"detail": str(exc)}, 429, {"Retry-After": str(retry)})

    @api.exception_handler(NotAppliedError)
    async def not_applied(_: object, exc: NotAppliedError) -> JSONResponse:
        retry = max(1, math.ceil(exc.retry_after_s))
        return JSONResponse({"detail": str(exc)}, 503, {"Retry-After": str(retry)})

    @api.exception_handler(Unavailable)
    async def unavailable(_: object, exc: Unavailable) -> JSONResponse:
        return _retry(503, str(exc), exc.retry_after_s)

    @api.exception_handler(StorageError)
    async def storage_failed(_: object, exc: StorageError) -> JSONResponse:
        if exc.retriable:
            return _retry(503, f"milvus {exc}", 1.0)
        log.error("storage error: %s", exc)
        return JSONResponse({"detail": f"milvus {exc}"}, 500)

    @api.exception_handler(Exception)
    async def failed(_: object, exc: Exception) -> JSONResponse:
        log.error("internal error: %s: %s", type(exc).__name__, exc, exc_info=exc)
        return JSONResponse({"detail": f"internal error: {type(exc).__name__}"}, 500)

    @api.exception_handler(InvalidField)
    async def invalid(_: object, exc: InvalidField) -> JSONResponse:
        return _invalid(RecordError(exc.field, exc.value, exc.reason))

    @api.exception_handler(RecordError)
    async def bad_record(_: object, exc: RecordError) -> JSONResponse:
        return _invalid(exc)

    @api.exception_handler(RequestValidationError)
    async def bad_request(_: object, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if not errors:
            return _invalid(RecordError("$", None, "invalid request"))
        err = errors[0]
        loc = [p for p in err.get("loc", ()) if p != "body"]
        return _invalid(RecordError(_path(loc) or "$", err.get("input"), str(err.get("msg"))))


def _writes(body: WriteBody, tenant_id: str, limits: Limits, now: datetime) -> list[dict[str, Any]]:
    """The write documents to produce, each checked as the worker decodes it (all of them before
    any is produced); raises RecordError naming ``memories[i].<field>``.
    """
    docs = []
    for i, m in enumerate(body.memories):
        doc = {
            **m.model_dump(exclude_none=True),
            "tenant_id": tenant_id,
            "at": m.at or now.isoformat(),
        }
        try:
            record, _ = checked_write(doc, limits, now)
        except RecordError as exc:
            raise _under(f"memories[{i}]", exc) from exc
        docs.append({**doc, "memory_id": record.memory_id})
    return docs


def _check_accesses(
    body: AccessBody, tenant_id: str, at: datetime, limits: Limits, now: datetime
) -> None:
    """Raise RecordError (``memory_ids[i]``, ``at``) unless the worker accepts every access."""
    for i, memory_id in enumerate(body.memory_ids):
        doc = {"tenant_id": tenant_id, "memory_id": memory_id, "at": at.isoformat()}
        try:
            checked_access({**doc, "kind": body.kind}, limits, now)
        except RecordError as exc:
            field = f"memory_ids[{i}]" if exc.field == "memory_id" else exc.field
            raise RecordError(field, exc.value, exc.reason) from exc


def _retry(status: int, detail: str, retry_after_s: float) -> JSONResponse:
    retry = max(1, math.ceil(retry_after_s))
    return JSONResponse({"detail": detail}, status, {"Retry-After": str(retry)})


def _invalid(exc: RecordError) -> JSONResponse:
    """The one 422 body: the message (field, value, reason) and the field's path."""
    field, detail = (_printable(t) for t in (exc.field, str(exc)))
    return JSONResponse({"detail": detail, "field": field}, 422)


def _printable(text: str) -> str:
    """``text`` with what UTF-8 cannot carry (a lone surrogate) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _path(loc: Sequence[object]) -> str:
    """``("memories", 3, "tags", 2)`` -> ``memories[3].tags[2]``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _under(prefix: str, exc: RecordError) -> RecordError:
    """The same error with its field under ``prefix`` (``tags[2]`` -> ``memories[3].tags[2]``)."""
    return RecordError(
        prefix if exc.field == "$" else f"{prefix}.{exc.field}", exc.value, exc.reason
    )


def _query(body: RecallBody, who: Tenant, states: tuple[str, ...]) -> RecallQuery:
    if body.query is None and body.vector is None:
        raise InvalidField("query", None, "give a query text or a vector")
    overrides: dict[str, Any] = {}
    if body.preset is not None:
        overrides["preset"] = RecallPreset(body.preset)
    if body.weights is not None:
        overrides["weights"] = body.weights.model_dump(exclude_none=True)
    for name in ("mmr_lambda", "min_score", "graphrag"):
        if getattr(body, name) is not None:
            overrides[name] = getattr(body, name)
    policy: RecallPolicy = who.policy.with_overrides({"recall": overrides}).recall
    f = body.filters
    now = datetime.now(UTC)  # the edge reads the clock; memcore gets the time
    at = body.at or now
    filters = Filters(
        states=states,
        current_at_us=None if body.include_history else to_us(at),
        created_to_inclusive_us=to_us(body.at) if body.at is not None else None,
        tiers=tuple(Tier.parse(t, "filters.memory_types").value for t in f.memory_types),
        tags_any=tuple(f.tags),
        session_id=f.session_id,
        agent_id=f.agent_id,
        created_from_us=to_us(f.created_from) if f.created_from else None,
        created_to_us=to_us(f.created_to) if f.created_to else None,
    )
    vector = tuple(body.vector) if body.vector is not None else None
    given = body.after if body.after is not None else []
    after = Token.merged([given] if isinstance(given, str) else given)
    return RecallQuery(body.query, vector, body.k, at, policy, filters, body.track, after)


def _memory(row: MemoryRow) -> dict[str, Any]:
    return {
        "memory_id": row.memory_id,
        "content": row.content,
        "memory_type": row.tier,
        "state": row.state,
        "importance": row.importance,
        "access_count": row.access_count,
        "recall_count": row.recall_count,
        "write_count": row.write_count,
        "retention": row.retention,
        "review_count": row.review_count,
        "tags": list(row.tags),
        "metadata": dict(row.metadata),
        "session_id": row.session_id or None,
        "agent_id": row.agent_id or None,
        "merged_into": row.merged_into or None,
        "created_at": from_us(row.created_at_us).isoformat(),
        "last_access": from_us(row.last_access_us).isoformat(),
        "valid_to": from_us(row.valid_to_us).isoformat() if row.valid_to_us else None,
        "superseded_by": row.superseded_by or None,
    }


def _recalled(r: Recalled) -> dict[str, Any]:
    s = r.score
    scores = {
        "similarity": s.similarity,
        "keyword": s.keyword,
        "importance": s.importance,
        "recency": s.recency,
        "graph": s.graph,
        "final": s.final,
    }
    return {**_memory(r.row), "scores": scores}
