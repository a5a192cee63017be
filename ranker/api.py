"""The HTTP API (FastAPI; OpenAPI at /docs and /openapi.json).

Every route is authenticated by an API key (``Authorization: Bearer <key>`` or ``X-API-Key``); the
key decides the tenant, never the body. No key or an unknown key: 401; a tenant over its request
rate: 429 with ``Retry-After`` (:mod:`ranker.ratelimit`). The admin routes (:mod:`ranker.admin`)
take the admin key instead. Another tenant's memory id is
indistinguishable from a missing one: 404. More than ``max_in_flight`` API requests being served,
or a saturated batcher: 429 with ``Retry-After`` (:mod:`ranker.admission`). Kafka or Milvus not
answering: 503 with ``Retry-After``; any other failure: 500. Every error has one body, problem
details (:mod:`ranker.problems`).

Writes and accesses are checked with the worker's own decode (:mod:`storage.records`) before
anything is produced: a request is all-or-nothing, and a 200 means the worker will apply it. Every
validation error is a 422 whose ``field`` names the path (``memories[3].tags[2]``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ConfigDict, Field, StrictBool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from memcore import GONE, MAX_TAGS, InvalidField, Scope, Tier, another_scope, scope_of
from memcore.ids import check_id
from memcore.policy import MAX_WEIGHT, RecallPolicy, RecallPreset, recall_decay
from ranker.admin import admin_refusal, admin_routes
from ranker.admission import Admission, BodyBudget, TenantBusy, TenantSlots, presented_key
from ranker.applied import NotAppliedError, Token
from ranker.batcher import Overloaded
from ranker.errors import Refused, Unavailable
from ranker.history import AuditLog
from ranker.logs import RequestLog
from ranker.problems import NOT_FOUND, OTHER_SCOPE, RESPONSES, problem
from ranker.ratelimit import RateLimited, RateLimiter
from ranker.routes import memory_routes
from ranker.service import Recalled, RecallQuery, RecallService
from ranker.tokens import TokenSeal
from ranker.wire import (
    CONTENT_DOC,
    RELATIONS_DOC,
    RELATIONS_TEXT,
    RESULTS,
    TAGS_DOC,
    TAGS_TEXT,
    Auth,
    Body,
    DirectRoute,
    IsoTime,
    OrjsonRoute,
    QueryTokens,
    TextBody,
    Tokens,
    check_not_blank,
    json_response,
    key_holder,
    memory_json,
    session_of,
    under,
    unencodable,
)
from storage import Filters, MemoryRow, StorageError, to_us
from storage.compacted import CompactedLogError
from storage.records import (
    Limits,
    RecordError,
    check_time,
    checked_access,
    checked_scope,
    checked_tags,
    checked_vector,
    checked_write,
    requested_scopes,
)
from storage.tenant_log import TenantLog
from storage.tenants import Tenant, Tenants

log = logging.getLogger(__name__)


MAX_FILTER_TIERS = 16
"""``memory_types`` a filter names at most (there are three tiers, and aliases)."""

_STRICT = ConfigDict(strict=True)
"""Recall and access bodies take JSON types as they are: ``"2"`` is no ``k``, ``true`` no
number (as writes and updates)."""


class RecallFilters(TextBody):
    model_config = TextBody.model_config | _STRICT

    memory_types: list[str] = Field(default_factory=list, max_length=MAX_FILTER_TIERS)
    tags: list[str] = Field(
        default_factory=list, description=f"any of these (at most {MAX_TAGS}, as a memory holds)"
    )
    session_id: str | None = None
    run_id: str | None = Field(None, description="the same as session_id (mem0's name)")
    agent_id: str | None = None
    user_id: str | None = None
    created_from: IsoTime | None = Field(None, description="created at or after (inclusive)")
    created_to: IsoTime | None = Field(
        None, description="created before (exclusive); after created_from when both are given"
    )


class Weights(Body):
    """Weights of the recall score, each in [0, MAX_WEIGHT] (relative: they need not sum to 1)."""

    model_config = Body.model_config | _STRICT

    similarity: float | None = Field(None, ge=0, le=MAX_WEIGHT)
    keyword: float | None = Field(None, ge=0, le=MAX_WEIGHT)
    importance: float | None = Field(None, ge=0, le=MAX_WEIGHT)
    recency: float | None = Field(None, ge=0, le=MAX_WEIGHT)
    graph: float | None = Field(None, ge=0, le=MAX_WEIGHT)


class RecallBody(TextBody):
    model_config = TextBody.model_config | _STRICT

    query: str | None = Field(None, min_length=1, max_length=16_384)
    vector: list[float] | None = None
    k: int = Field(10, ge=1, le=1000)
    filters: RecallFilters = Field(default_factory=RecallFilters)
    preset: Literal["mnemostream", "zeromemory", "zeph", "powermem"] | None = Field(
        None,
        description="scoring formula (default: the tenant's); zeromemory and powermem score"
        " recency at their own decay rates by tier on a tenant that decays by the other preset",
    )
    weights: Weights | None = None
    mmr_lambda: float | None = Field(None, ge=0, le=1)
    min_score: float | None = None
    graphrag: StrictBool | None = None
    at: IsoTime | None = Field(
        None,
        description="as-of time: only memories written by then, in the versions valid then, scored"
        " at that time (importance, counters, the last access, the tier and the lifecycle state"
        " are today's, idle time counting as 0 where the last access is after ``at``: the"
        " service keeps no history of them, so a memory forgotten or deleted since is not"
        " returned, and one archived since takes the archived penalty; a memory rewritten since"
        " under the same id has its newest words, where PATCH makes a new version; a statement"
        " restated after it was superseded counts as current throughout). Default: now, with"
        " every memory"
        " written so far. With ``track`` it is also the time of the recall's access events,"
        " checked as an access's ``at`` is: not before 1970, at most MNEMO_MAX_FUTURE_SKEW_S"
        " after the server's clock.",
    )
    track: StrictBool = True
    include_history: StrictBool = Field(
        False,
        description="also return superseded versions; the top k are then listed in time order"
        " (the places a fact's versions hold go to them newest first: its current version, when"
        " a candidate that passes min_score, is among the top k before any older one)",
    )
    after: Tokens | None = Field(
        None,
        description="tokens from write or access responses: wait until the worker applied them"
        " (read-your-writes; 503 with Retry-After when it has not within the server's wait)",
    )


class MemoryBody(Body):
    """One memory to write. Strict types (no coercion): the worker decodes the record strictly."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    content: str = Field(min_length=1, description=CONTENT_DOC)
    context: str | None = Field(
        None,
        description="words to find this memory by (e.g. the date, the speaker, the previous turn)"
        ": embedded and keyword-indexed with the content, never returned as content; at most"
        " MNEMO_MAX_CONTENT_BYTES bytes",
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
    tags: list[str] = Field(default_factory=list, description=TAGS_TEXT, json_schema_extra=TAGS_DOC)
    metadata: dict[str, Any] = Field(default_factory=dict)
    session_id: str | None = Field(
        None,
        description="the run or conversation (with agent_id and user_id, the memory's scope: the"
        " same content in two scopes is two memories)",
    )
    run_id: str | None = Field(None, description="the same as session_id (mem0's name)")
    agent_id: str | None = None
    user_id: str | None = Field(
        None, description="the end user the memory is about (mem0's user_id); part of the scope"
    )
    relations: list[str] = Field(
        default_factory=list, description=RELATIONS_TEXT, json_schema_extra=RELATIONS_DOC
    )


RECALL_DOC = (
    "The best k memories for a query text or vector, active and archived (an archived one takes"
    " the archived penalty), ranked as the tenant's recall policy says (SPEC section 6). With"
    " track (the default) each memory returned counts as a recall access; the token names those"
    " accesses."
)
ARCHIVE_DOC = (
    "Recall over archived memories only, scored as recall scores them, with no soft delete."
    " Never tracked: its token is null, and track true is a 422 naming track."
)


class WriteBody(Body):
    memories: list[MemoryBody] = Field(min_length=1, max_length=1000)
    after: Tokens | None = Field(
        None,
        description="read-your-writes tokens the check of a given memory_id waits for (a"
        " deletion's, say: until it is applied, the id is still the deleted memory's)",
    )


class AccessBody(Body):
    model_config = Body.model_config | _STRICT

    memory_ids: list[str] = Field(min_length=1, max_length=1000)
    kind: Literal["recall", "get", "explicit"] = "explicit"
    at: IsoTime | None = None


def create_api(
    service: RecallService,
    registry: Tenants,
    limits: Limits | None = None,
    *,
    max_in_flight: int = 256,
    max_in_flight_per_tenant: int | None = None,
    ready: Mapping[str, Callable[[], Awaitable[bool]]] | None = None,
    audit: AuditLog | None = None,
    rate_limit_per_s: float = 0.0,
    admin_key: str | None = None,
    log_every_request: bool = True,
    tenants_read: asyncio.Event | None = None,
    max_body_bytes: int = 64 * 2**20,
    body_timeout_s: float = 30.0,
    token_seal: TokenSeal | None = None,
    max_body_bytes_in_flight: int | None = None,
    metrics_route: bool = True,
) -> FastAPI:
    """The app; ``service`` must be started (and stopped) by the caller's lifespan. ``limits``:
    what the worker accepts (``SharedSettings.limits()``); default: the embedder's dimension and
    the settings' default sizes and skew. ``max_in_flight``: API requests served at once, beyond
    which 429; ``max_in_flight_per_tenant``: those of one tenant (None: half of
    ``max_in_flight``, at least 1), beyond which 429. ``ready``: named checks (cheap or cached)
    that ``GET /readyz`` requires besides the batcher running (the producer, Milvus, the
    worker's recovery in ``python -m server``).
    ``audit``: where a memory's history is read (None: the history route answers 503).
    ``rate_limit_per_s``: a tenant's request rate when its own is not set (0: unlimited).
    ``admin_key``: opens the admin routes (:mod:`ranker.admin`) when ``registry`` is the live
    :class:`~storage.tenant_log.TenantLog`; None: they answer 403. ``log_every_request``
    off: only requests answered 4xx or 5xx are logged (:class:`~ranker.logs.RequestLog`).
    ``tenants_read``: set once the tenants topic was read to its end (until then a request's key
    is answered 503: a key the topic revoked would still act); None: the registry is complete.
    ``max_body_bytes``, ``body_timeout_s``: a request body's largest size (bytes; larger: 413)
    and how long after the request it must have arrived (seconds; else 408);
    ``max_body_bytes_in_flight``: the bytes of the bodies of all requests served at once (at
    least ``max_body_bytes``; None: twice it), beyond which 429. ``token_seal``:
    seals the read-your-writes tokens responses carry and opens those requests send back
    (:mod:`ranker.tokens`; None: a key of this app alone). ``metrics_route`` off: no
    ``GET /metrics`` here (they are served on a port of their own: :class:`ranker.metrics.MetricsPort`).
    """
    api = FastAPI(
        title="Mnemostream",
        version="0.1.0",
        description="A memory service for AI agents. Authenticate with `Authorization: Bearer"
        " <API key>` (or `X-API-Key`); the key decides the tenant. Errors are problem details"
        " (RFC 9457).",
        responses=RESPONSES,
    )
    api.router.route_class = OrjsonRoute  # JSON bodies (vectors) read by orjson, every route
    # half by default: a tenant alone keeps half the slots for others, and a deployment of one
    # tenant (make up's) is not held to a small share of its own capacity
    per_tenant = max_in_flight_per_tenant or max(1, max_in_flight // 2)
    api.state.tenant_slots = TenantSlots(min(per_tenant, max_in_flight))
    api.add_middleware(
        Admission,  # inside RequestLog: a refused request is logged with its request id too
        max_in_flight=max_in_flight,
        metrics=service.metrics,
        routes=lambda: api.routes,
        tenant_slots=api.state.tenant_slots,
        max_body_bytes=max_body_bytes,
        body_budget=BodyBudget.of(
            max_body_bytes, max_body_bytes_in_flight, service.metrics.body_bytes_in_flight
        ),
        body_timeout_s=body_timeout_s,
        unknown_key=lambda key: _unknown_key(api, key),
        tenant_of=lambda key: _tenant_id_of(api, key),
        admin_refused=lambda headers: admin_refusal(api.state, presented_key(headers)),
    )
    api.add_middleware(RequestLog, every_request=log_every_request)
    checks = dict(ready or {})
    api.state.registry = registry  # the live view when it is a TenantLog: read per request
    api.state.service = service  # the admin routes erase a tenant's memories through it
    api.state.tenants_read = tenants_read
    api.state.rate_limiter = RateLimiter(rate_limit_per_s)
    # stripped as a presented key is (a Secret written with a trailing newline); blank: disabled,
    # else a request with no key at all would present the blank key
    api.state.admin_key = (admin_key or "").strip() or None
    api.state.tenant_log = registry if isinstance(registry, TenantLog) else None
    seal = api.state.token_seal = token_seal or TokenSeal()
    limits = limits or Limits(service.embedder.dim, 16_384, registry)

    _errors(api)

    if metrics_route:

        @api.get("/metrics", include_in_schema=False)
        async def metrics() -> Response:
            return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @api.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        """200 while the service can score (started, batcher alive); 503 otherwise."""
        if service.running:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "stopped"}, 503)

    @api.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        """200 when the service can answer: the batcher runs and every check passes; else 503
        naming the checks that fail.
        """
        results = {"batcher": service.running}
        for name, check in checks.items():
            try:
                results[name] = bool(await check())
            except Exception:
                log.warning("readiness check %s failed", name, exc_info=True)
                results[name] = False
        if all(results.values()):
            return JSONResponse({"status": "ready", "checks": results})
        return JSONResponse({"status": "not ready", "checks": results}, 503)

    # the recall routes answer with orjson-written bodies; added to the app's own router (an
    # included router's routes are not matched by path for Admission's route label)
    async def recall(body: RecallBody, who: Auth) -> Response:
        return await _search(service, seal, body, who, ("active", "archived"), limits)

    async def archive_search(body: RecallBody, who: Auth) -> Response:
        if body.track and "track" in body.model_fields_set:  # else ignored, and not said
            raise InvalidField("track", True, "an archive search is never tracked")
        untracked = body.model_copy(update={"track": False})
        return await _search(service, seal, untracked, who, ARCHIVED_ONLY, limits)

    for path, endpoint, description in (
        ("/v1/recall", recall, RECALL_DOC),
        ("/v1/archive/search", archive_search, ARCHIVE_DOC),
    ):
        api.router.add_api_route(
            path,
            endpoint,
            methods=["POST"],
            response_model=None,
            responses=RESULTS,
            route_class_override=DirectRoute,
            description=description,
        )

    _write_routes(api, service, seal, limits)
    memory_routes(api, service, seal, limits, audit)
    admin_routes(api)
    return api


def _write_routes(api: FastAPI, service: RecallService, seal: TokenSeal, limits: Limits) -> None:
    """The write, access and get routes."""

    @api.post("/v1/memories", responses=OTHER_SCOPE)
    async def write(body: WriteBody, who: Auth) -> dict[str, Any]:
        docs = _writes(body, who.tenant_id, limits, datetime.now(UTC))
        after = await seal.read(body.after, who.tenant_id) if body.after is not None else None
        await _of_their_scopes(service, who.tenant_id, body, docs, after)
        await seal.ready()  # before producing: a token it cannot seal fails nothing written
        ids, token = await service.write(who.tenant_id, docs)
        return {"ids": ids, "token": await seal.seal(token, who.tenant_id)}

    @api.post("/v1/access")
    async def access(body: AccessBody, who: Auth) -> dict[str, Any]:
        now = datetime.now(UTC)
        at = body.at or now
        _check_accesses(body, who.tenant_id, at, limits, now)
        await seal.ready()
        token = await service.access(who.tenant_id, body.memory_ids, at, body.kind)
        return {"accepted": len(body.memory_ids), "token": await seal.seal(token, who.tenant_id)}

    @api.get("/v1/memories/{memory_id}", responses=NOT_FOUND)
    async def get(
        memory_id: str, who: Auth, after: QueryTokens = None, track: bool = True
    ) -> dict[str, Any]:
        """One memory by id, any state. With ``track`` (the default) reading it is an access of
        kind ``get`` at the request's time (SPEC sections 1 and 5: it counts, refreshes its
        recency, and brings an archived memory back); ``token``: that access's, for a read to
        wait for. Deleted and forgotten memories are shown, not accessed.
        """
        check_id("memory_id", memory_id)
        row = await service.get(who.tenant_id, memory_id, await seal.read(after, who.tenant_id))
        if row is None:
            raise HTTPException(404, "no such memory")
        body = memory_json(row)
        if track and row.state not in _GONE:  # the reducer ignores an access to those
            await seal.ready()
            token = await service.access(who.tenant_id, [memory_id], datetime.now(UTC), "get")
            body["token"] = await seal.seal(token, who.tenant_id)
        return body


_GONE = frozenset(state.value for state in GONE)


def _retry_later(status: int) -> Callable[[Request, Exception], Awaitable[Response]]:
    """A handler answering ``status`` with the error's ``retry_after_s`` (as Retry-After); an
    error whose ``retriable`` is False (a refusal a retry cannot mend) is a logged 500 instead.
    """

    async def handler(_: Request, exc: Exception) -> Response:
        if not getattr(exc, "retriable", True):
            return _refused(exc)
        return problem(status, str(exc), retry_after_s=getattr(exc, "retry_after_s", 1.0))

    return handler


def _refused(exc: Exception) -> Response:
    """A dependency's refusal no retry mends (an ACL, a size limit): 500 naming it, logged."""
    log.error("refused for good: %s", exc)
    return problem(500, str(exc))


def _unknown_key(api: FastAPI, key: str) -> bool:
    """``key`` acts for no tenant, as its route would find (:func:`ranker.wire.key_holder`); False
    while the tenants topic is not read yet and for the admin key: their routes answer those.
    """
    return key_holder(api.state, key) == "unknown"


def _tenant_id_of(api: FastAPI, key: str) -> str | None:
    """The tenant ``key`` acts for (:func:`ranker.wire.key_holder`), or None: no tenant, the
    admin key, or the tenants topic not read yet (its route answers those).
    """
    found = key_holder(api.state, key)
    return found.tenant_id if isinstance(found, Tenant) else None


def _errors(api: FastAPI) -> None:
    """One body for every error: problem details (:mod:`ranker.problems`)."""

    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        headers = exc.headers
        if exc.status_code == 405:  # the router's: the first route of the path, not all of them
            headers = {**(headers or {}), "Allow": ", ".join(_allowed(request))}
        retry_after_s = getattr(exc, "retry_after_s", None)  # BodiesBusy's, a 429
        field = getattr(exc, "field", None)  # a ScopeConflict's
        return problem(
            exc.status_code,
            str(exc.detail),
            field=field,
            retry_after_s=retry_after_s,
            headers=headers,
        )

    # refusals that say when to come back: overload is 429, an unavailable dependency 503
    retry_later: tuple[tuple[type[Exception], int], ...] = (
        (Overloaded, 429),
        (RateLimited, 429),
        (TenantBusy, 429),
        (CompactedLogError, 503),
        (NotAppliedError, 503),
        (Unavailable, 503),
    )
    for error_type, status in retry_later:
        api.add_exception_handler(error_type, _retry_later(status))

    @api.exception_handler(Refused)
    async def refused(_: object, exc: Refused) -> Response:
        return _refused(exc)

    @api.exception_handler(StorageError)
    async def storage_failed(_: object, exc: StorageError) -> Response:
        if exc.retriable:
            return problem(503, f"milvus {exc}", retry_after_s=1.0)
        log.error("storage error: %s", exc)
        return problem(500, f"milvus {exc}")

    # an exception no handler answers: ranker.logs.RequestLog answers 500, with the request's ids
    @api.exception_handler(InvalidField)
    async def invalid(_: object, exc: InvalidField) -> Response:
        return _invalid(RecordError(exc.field, exc.value, exc.reason))

    @api.exception_handler(RecordError)
    async def bad_record(_: object, exc: RecordError) -> Response:
        return _invalid(exc)

    @api.exception_handler(RequestValidationError)
    async def bad_request(_: object, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        if not errors:
            return _invalid(RecordError("$", None, "invalid request"))
        err = errors[0]
        loc = list(err.get("loc", ()))
        if loc and loc[0] in ("body", "query", "path", "header"):  # where, not what: dropped
            loc = loc[1:]
        below = str((err.get("ctx") or {}).get("at", ""))  # a path inside the field (wire.Body)
        field = (_path(loc) + below).lstrip(".") or "$"
        value = err.get("input")
        if err.get("type") == "utf8":  # the text at that path, not the whole field
            value = unencodable(value)[1]
        return _invalid(RecordError(field, value, str(err.get("msg")) + _hint(err, loc)))


_WRITE_NAMES = {
    "created_at": "at",
    "timestamp": "at",
    "time": "at",
    "text": "content",
    "memory": "content",
    "run": "run_id",
    "user": "user_id",
    "agent": "agent_id",
    "session": "session_id",
    "id": "memory_id",
    "embeddings": "embedding",
    "vector": "embedding",
}
"""What other memory APIs (mem0's export, for one) call a memory's fields: a write's unknown
field of one of these names says ours."""


def _hint(err: Mapping[str, Any], loc: Sequence[object]) -> str:
    """For a write's unknown field another API names so (``memories[0].created_at``), which of
    ours it is ("; this API calls it 'at'"); else nothing.
    """
    if err.get("type") != "extra_forbidden" or len(loc) != 3 or loc[0] != "memories":
        return ""
    ours = _WRITE_NAMES.get(str(loc[2]))
    return f"; this API calls it {ours!r}" if ours else ""


def _allowed(request: Request) -> list[str]:
    """Every method some route serves at the request's path (a 405's ``Allow``)."""
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _writes(body: WriteBody, tenant_id: str, limits: Limits, now: datetime) -> list[dict[str, Any]]:
    """The write documents to produce, each checked as the worker decodes it (all of them before
    any is produced); raises RecordError naming ``memories[i].<field>``.
    """
    docs = []
    for i, m in enumerate(body.memories):
        doc = {
            **m.model_dump(exclude_none=True, exclude={"run_id", "session_id"}),
            "tenant_id": tenant_id,
            "at": m.at if m.at is not None else now.isoformat(),
        }
        try:
            check_not_blank("content", m.content)
            requested_scopes(m)
            session = session_of(m.session_id, m.run_id, "run_id")
            if session is not None:
                doc["session_id"] = session
            record, _ = checked_write(doc, limits, now)
        except RecordError as exc:
            raise under(f"memories[{i}]", exc) from exc
        docs.append({**doc, "memory_id": record.memory_id})
    return docs


async def _of_their_scopes(
    service: RecallService,
    tenant_id: str,
    body: WriteBody,
    docs: Sequence[dict[str, Any]],
    after: Token | None,
) -> None:
    """Raise a 409 naming ``memories[i].user_id`` (or ``agent_id``, ``session_id``/``run_id``)
    when a write names the id of a memory (not deleted) of another scope (none counts as one),
    or an id an earlier write of the body gives under another: the worker would ignore it
    (:func:`memcore.write_refused`), keeping the memory's scope and words. One read of the
    memories whose ids the body gives (a derived id is of its own scope), once ``after`` is
    applied; a memory this read does not see yet is left to the worker's rule.
    """
    given = {i: doc["memory_id"] for i, doc in enumerate(docs) if body.memories[i].memory_id}
    if not given:
        return
    rows = await service.get_many(tenant_id, sorted(set(given.values())), after, slim=True)
    for i, memory_id in given.items():
        row = rows.get(memory_id)
        if row is None or row.state == "deleted":
            continue
        field = another_scope(scope_of(row), _scope(docs[i]))
        if field is not None:
            current = row.superseded_by and await _current(service, tenant_id, row.superseded_by)
            name = f"memories[{i}].{_named(body.memories[i], field)}"
            raise ScopeConflict(name, row, field, current=current or "")
    first: dict[str, int] = {}  # every id of the body, a derived one too (a caller may give it)
    for i, doc in enumerate(docs):
        j = first.setdefault(doc["memory_id"], i)
        field = another_scope(_scope(docs[j]), _scope(doc))
        if field is not None and (i in given or j in given):
            name = _named(body.memories[i], field)
            raise ScopeConflict(
                f"memories[{i}].{name}",
                detail=f"memories[{j}] gives memory {doc['memory_id']} another {name} (a memory"
                " keeps its scope): write them under two ids",
            )


class ScopeConflict(HTTPException):
    """A 409 naming the write's ``field``: the memory its id names (``row``) holds another
    ``scope`` (a field of :data:`memcore.SCOPE_FIELDS`), or ``detail`` says why.
    """

    def __init__(
        self,
        field: str,
        row: MemoryRow | None = None,
        scope: str = "",
        detail: str = "",
        current: str = "",
    ) -> None:
        self.field = field
        if row is not None:
            held = getattr(row, scope)
            kept = f"is under {scope} {held!r}" if held else f"has no {scope}"
            how = f"under that {scope}" if held else f"without {scope}"
            detail = (
                f"memory {row.memory_id} {kept} (a memory keeps its scope): write it {how}, or"
                " under another id, or delete that memory first (and send the deletion's token"
                " as after)"
            )
            if current:  # an update's version holds its fact now
                detail += (
                    f"; it is superseded, and {current} is the current version of its fact:"
                    " delete that too, or it stays current"
                )
        super().__init__(409, f"{field}: {detail}")


async def _current(service: RecallService, tenant_id: str, memory_id: str) -> str | None:
    """The current version of the fact the version ``memory_id`` states: ``superseded_by``
    followed (at most :data:`MAX_VERSION_HOPS` reads); None when the chain ends in a version
    that is gone (deleted, purged or erased: none is current).
    """
    seen = {memory_id}
    for _ in range(MAX_VERSION_HOPS):
        row = (await service.get_many(tenant_id, [memory_id], slim=True)).get(memory_id)
        if row is None or row.state == "deleted":
            return None
        if not row.superseded_by or row.superseded_by in seen:
            break
        memory_id = row.superseded_by
        seen.add(memory_id)
    return memory_id


MAX_VERSION_HOPS = 32
"""Versions a 409 follows to name a fact's current one (a read each)."""


def _scope(doc: Mapping[str, Any]) -> Scope:
    """A write document's scope (:data:`memcore.SCOPE_FIELDS` order)."""
    return (doc.get("user_id"), doc.get("agent_id"), doc.get("session_id"))


def _named(memory: MemoryBody, field: str) -> str:
    """``field`` as the write named it: ``run_id`` for a session given by mem0's name."""
    if field == "session_id" and memory.session_id is None and memory.run_id is not None:
        return "run_id"
    return field


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


def _invalid(exc: RecordError) -> Response:
    """The one 422: the message (field, value, reason) and the field's path."""
    return problem(422, str(exc), field=exc.field)


def _path(loc: Sequence[object]) -> str:
    """``("memories", 3, "tags", 2)`` -> ``memories[3].tags[2]``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


async def _search(
    service: RecallService,
    seal: TokenSeal,
    body: RecallBody,
    who: Tenant,
    states: tuple[str, ...],
    limits: Limits,
) -> Response:
    """A recall route's answer: the top ``k`` among memories in ``states``, best first, or in
    time order with ``include_history`` (as :class:`RecallBody` says).
    """
    query = _query(body, who, states, limits)
    if body.after is not None:  # opened once the rest of the body is valid
        query = dataclasses.replace(query, after=await seal.read(body.after, who.tenant_id))
    if body.track:  # its access events' token
        await seal.ready()
    answer = await service.recall(who.tenant_id, query)
    if body.include_history:
        answer.results.sort(key=lambda r: (r.row.created_at_us, r.row.memory_id))
    token = await seal.seal(answer.token, who.tenant_id) if answer.token is not None else None
    return json_response({"results": [_recalled(r) for r in answer.results], "token": token})


def _query(body: RecallBody, who: Tenant, states: tuple[str, ...], limits: Limits) -> RecallQuery:
    """The query of a recall body; raises InvalidField or RecordError naming the body's field
    (``at`` too when the recall's access events would be refused by the worker: ``track``).
    """
    if body.query is None and body.vector is None:
        raise InvalidField("query", None, "give a query text or a vector")
    check_not_blank("query", body.query)
    policy = _policy(body, who)
    if states == ARCHIVED_ONLY:
        policy = policy.for_archive()
    f = body.filters
    now = datetime.now(UTC)  # the edge reads the clock; memcore gets the time
    at = body.at or now
    if body.track and body.at is not None:  # the time of its access events: as an access's
        check_time("at", body.at, now, limits)
    filters = Filters(
        states=states,
        current_at_us=None if body.include_history else to_us(at),
        created_to_inclusive_us=to_us(body.at) if body.at is not None else None,
        tiers=tuple(
            dict.fromkeys(
                Tier.parse(t, f"filters.memory_types[{i}]").value
                for i, t in enumerate(f.memory_types)
            )
        ),
        tags_any=checked_tags("filters.tags", f.tags),
        session_id=checked_scope(
            "filters.session_id",
            session_of(f.session_id, checked_scope("filters.run_id", f.run_id), "filters.run_id"),
        ),
        agent_id=checked_scope("filters.agent_id", f.agent_id),
        user_id=checked_scope("filters.user_id", f.user_id),
        created_from_us=to_us(f.created_from) if f.created_from else None,
        created_to_us=to_us(f.created_to) if f.created_to else None,
    )
    if f.created_from and f.created_to and to_us(f.created_to) <= to_us(f.created_from):
        why = f"not after filters.created_from ({f.created_from.isoformat()}): an empty range"
        raise InvalidField("filters.created_to", f.created_to.isoformat(), why)
    dim = limits.embedding_dim
    vector = checked_vector("vector", body.vector, dim) if body.vector is not None else None
    decay = recall_decay(policy.preset, who.policy.decay)
    return RecallQuery(
        body.query,
        vector,
        body.k,
        at,
        policy,
        filters,
        body.track,
        None,
        decay,
        include_history=body.include_history,
    )


def _policy(body: RecallBody, who: Tenant) -> RecallPolicy:
    """The tenant's recall policy with the body's overrides; an invalid one raises InvalidField
    naming the body's field (``weights.similarity``), not the policy's path.
    """
    overrides: dict[str, Any] = {}
    if body.preset is not None:
        overrides["preset"] = RecallPreset(body.preset)
    if body.weights is not None:
        overrides["weights"] = body.weights.model_dump(exclude_none=True)
    for name in ("mmr_lambda", "min_score", "graphrag"):
        if getattr(body, name) is not None:
            overrides[name] = getattr(body, name)
    if not overrides:
        return who.policy.recall
    try:
        policy = who.policy.with_overrides({"recall": overrides}).recall
    except InvalidField as exc:
        field = exc.field.removeprefix(_OVERRIDES)
        raise InvalidField(field, exc.value, exc.reason) from exc
    for name in policy.preset.ignores:  # accepted and ignored, the answer would not say so
        given = getattr(body, name)
        if given is not None:
            shown = given.model_dump(exclude_none=True) if isinstance(given, Weights) else given
            why = f"the {policy.preset.value} preset does not use it (SPEC section 6)"
            raise InvalidField(name, shown, why)
    return policy


ARCHIVED_ONLY = ("archived",)
"""The states archive search serves."""
_OVERRIDES = "policy.recall."
"""Where the policy names a recall override's field; the body names it without this."""


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
    return {**memory_json(r.row), "scores": scores}
