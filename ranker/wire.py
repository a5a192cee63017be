"""What the HTTP routes share: the request-body base, the tenant of a request, a memory's JSON."""

from __future__ import annotations

import asyncio
import email.message
import functools
import hmac
import inspect
import json
import sys
import time
import typing
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
import orjson
import pydantic_core
from fastapi import Depends, HTTPException, Query, Request, Response, Security
from fastapi.datastructures import DefaultPlaceholder
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError
from starlette.datastructures import State
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY

from memcore import GONE, MAX_RELATIONS, MAX_TAGS, normalise_content
from ranker.admission import TenantSlots
from ranker.errors import Unavailable
from ranker.logs import set_tenant
from ranker.problems import printable
from ranker.ratelimit import RateLimiter
from ranker.tokens import MAX_TOKENS
from storage import MemoryRow, from_us
from storage.milvus import MAX_TAG_CHARS
from storage.records import RecordError, iso_text
from storage.settings import SharedSettings
from storage.tenants import Tenant, Tenants

_INT64_FLOAT = 9.2e18
"""orjson reads an integer beyond 64 bits (below -2**63 or from 2**64 on) as a float; any float
of this magnitude may be one, and the body is then read by the standard library."""


def _maybe_misread(value: object) -> bool:
    """Whether orjson's reading of a JSON value may differ from the standard library's: it holds
    a float of at least ``_INT64_FLOAT`` in magnitude (perhaps an integer orjson made a float).
    ~25 µs for a 384-float vector; a regular expression over the bytes took ~290 µs. A walk with
    its own stack: any depth orjson reads (1,024 levels) is walked.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if not -_INT64_FLOAT < item < _INT64_FLOAT:  # type: ignore[operator]
                return True
        elif kind is list:
            for inner in item:  # type: ignore[attr-defined]
                if type(inner) is float:
                    if not -_INT64_FLOAT < inner < _INT64_FLOAT:
                        return True
                elif type(inner) is list or type(inner) is dict:
                    stack.append(inner)
        elif kind is dict:
            stack.extend(item.values())  # type: ignore[attr-defined]
    return False


def parse_json(body: bytes) -> Any:  # noqa: ANN401  (any JSON value)
    """``body`` read by orjson, or by the standard library where orjson refuses it or may read
    it differently (:func:`_maybe_misread`): the standard library's values and errors
    (``json.JSONDecodeError``, ``UnicodeDecodeError``, ``ValueError`` for an integer of more
    digits than it converts) in every case. UTF-8 only, as JSON is sent (RFC 8259): no UTF-16
    or UTF-32, no byte order mark (the standard library reads those from bytes).
    """
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        # what orjson refuses (NaN, lone surrogates, bad JSON) gets the standard
        # library's reading and errors: pydantic then names the field
        return json.loads(body.decode("utf-8"))
    return json.loads(body.decode("utf-8")) if _maybe_misread(parsed) else parsed


def body_json(body: bytes) -> Any:  # noqa: ANN401  (any JSON value)
    """``body`` as :func:`parse_json` reads it; bytes that are not UTF-8 or not JSON raise
    HTTPException 400 whose detail says where (:func:`not_json`), and so does a body nested
    deeper than the standard library reads, when it must read it.
    """
    try:
        return parse_json(body)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer too long
        raise not_json(body, exc) from exc
    except RecursionError:
        raise HTTPException(
            400, "the body is not JSON this service reads: nested too deep"
        ) from None


def not_json(body: bytes, exc: ValueError) -> HTTPException:
    """The 400 for ``body``, which the standard library refused with ``exc``: where its UTF-8 is
    broken (first: ``json`` also reads UTF-16 and UTF-32), else where its JSON is.
    """
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as bad:
        where = f"byte {bad.start} (0x{body[bad.start]:02x})"
        return HTTPException(400, f"the body is not UTF-8: {where}: {bad.reason}")
    if isinstance(exc, json.JSONDecodeError):
        where = f"line {exc.lineno}, column {exc.colno} (char {exc.pos})"
        return HTTPException(400, f"the body is not JSON: {exc.msg} at {where}")
    if "digits" in str(exc):  # int() refuses more than sys.get_int_max_str_digits() digits
        digits = sys.get_int_max_str_digits()
        return HTTPException(
            400, f"the body is not JSON this service reads: a number of over {digits} digits"
        )
    return HTTPException(400, f"the body is not JSON: {exc}")


class _OrjsonRequest(Request):
    async def json(self) -> Any:  # noqa: ANN401  (Starlette's signature)
        if not hasattr(self, "_json"):
            self._json = body_json(await self.body())  # FastAPI lets its HTTPException through
        return self._json


class OrjsonRoute(APIRoute):
    """A route whose JSON body is parsed by orjson (~5x the standard library on a 384-float
    vector); bodies orjson refuses or may have read differently (an integer beyond 64 bits,
    which it reads as a float: :func:`_maybe_misread`) are read by the standard library, so
    every value stays the same; a body that is not JSON (or not UTF-8) is a 400 saying where
    (:func:`body_json`). Every route of the app has it.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        names = query_names(self)

        async def parsed_by_orjson(request: Request) -> Response:
            note_query(request, names)
            return await handler(_OrjsonRequest(request.scope, request.receive))

        return parsed_by_orjson


def query_names(route: APIRoute) -> dict[str, bool] | None:
    """The query parameters an API route (``/v1/...``) declares, each with whether it takes
    several values (a list); None for the others (``/metrics``, the probes), which are not checked.
    """
    if not route.path.startswith("/v1/"):
        return None
    names: dict[str, bool] = {}
    dependants = [route.dependant]
    while dependants:
        dependant = dependants.pop()
        for field in dependant.query_params:
            annotation = field.field_info.annotation
            names[field.alias] = any(
                typing.get_origin(a) in (list, tuple, set)
                for a in (annotation, *typing.get_args(annotation))
            )
        dependants.extend(dependant.dependencies)
    return names


def query_error(request: Request, names: dict[str, bool]) -> RecordError | None:
    """The RecordError naming a query parameter the route does not take (a misspelt filter
    listed everything, a misspelt ``purge`` deleted without purging) or one given twice that
    takes one value (the last one won, silently); None when there is none.
    """
    params = request.query_params
    for name in dict.fromkeys(params.keys()):
        if name not in names:
            known = ", ".join(sorted(names)) or "none"
            return RecordError(
                name, params[name], f"not a query parameter here (these are: {known})"
            )
        if not names[name] and len(values := params.getlist(name)) > 1:
            return RecordError(name, values, "given more than once; it takes one value")
    return None


_QUERY_ERROR = "mnemostream.query_error"
"""Where :func:`note_query` leaves a request's :func:`query_error` for :func:`checked_query`."""


def note_query(request: Request, names: dict[str, bool] | None) -> None:
    """Keep the request's :func:`query_error` (``names``: :func:`query_names`) for
    :func:`checked_query`, which raises it once the key is checked: a wrong key is a 401 first.
    """
    if names is not None and request.scope["query_string"]:
        request.scope[_QUERY_ERROR] = query_error(request, names)


def checked_query(request: Request) -> None:
    """Raise the request's query error, if it has one: called once its key is checked (the
    tenant's and the admin's dependencies), so that a wrong key is a 401 before a 422.
    """
    error = request.scope.get(_QUERY_ERROR)
    if error is not None:
        raise error


class Body(BaseModel):
    """A request body: no unknown fields, no NaN or infinity."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


CONTENT_DOC = (
    f"1 to MNEMO_MAX_CONTENT_BYTES ({SharedSettings.model_fields['max_content_bytes'].default:,}"
    " by default) bytes of UTF-8, not blank; over it, a 422 naming the field"
)
TAGS_DOC: JsonDict = {"maxItems": MAX_TAGS}
TAGS_TEXT = (
    f"at most {MAX_TAGS} tags (a repeat counts, and is kept once), each 1-{MAX_TAG_CHARS} bytes"
    " of UTF-8"
)
RELATIONS_DOC: JsonDict = {"maxItems": MAX_RELATIONS}
RELATIONS_TEXT = f"ids of related memories of this tenant, at most {MAX_RELATIONS}"
"""What the write and update bodies' schemas say of the limits the worker's decode
(:mod:`storage.records`) enforces; the checks themselves stay there, naming the field."""


class TextBody(Body):
    """A body whose text goes to the embedder or into Milvus expressions as it is (recall):
    no text UTF-8 cannot carry either. Writes, accesses and updates need no such check here:
    the worker's own decode (:mod:`storage.records`) checks them at the edge.
    """

    @field_validator("*", mode="after")
    @classmethod
    def _utf8(cls, value: object) -> object:
        if _bad(value):
            raise PydanticCustomError(
                "utf8",
                "text that UTF-8 cannot carry (a lone surrogate)",
                {"at": printable(unencodable(value)[0])},  # the path below the field: [0], .key
            )
        return value


_BEARER = HTTPBearer(auto_error=False, description="the tenant's API key")
_API_KEY = APIKeyHeader(name="X-API-Key", auto_error=False, description="the same key")


async def tenant(  # async: FastAPI runs a sync dependency in a thread, a hop per request
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    x_api_key: Annotated[str | None, Security(_API_KEY)],
) -> Tenant:
    """The tenant the request's API key acts for; 401 without one; 429 (RateLimited) when the
    tenant is over its request rate. The registry is the live one: a key added a moment ago works.
    """
    return _tenant_of(request, presented_key(bearer, x_api_key))


async def authenticate(request: Request) -> Tenant:
    """:func:`tenant` without FastAPI's dependency solving (:class:`DirectRoute`): the same
    headers read the same way, the same errors.
    """
    return _tenant_of(request, presented_key(await _BEARER(request), await _API_KEY(request)))


def _tenant_of(request: Request, key: str | None) -> Tenant:
    found = key_holder(request.app.state, key)
    if found == "unread":  # a key revoked there would still act
        raise Unavailable("kafka", "authenticate", "the tenants topic is not read yet")
    if found == "admin":  # it acts for no tenant, even one whose keys list it (a misconfiguration)
        raise HTTPException(401, "the admin key acts for no tenant", {"WWW-Authenticate": "Bearer"})
    if found == "unknown":
        raise HTTPException(401, "missing or unknown API key", {"WWW-Authenticate": "Bearer"})
    set_tenant(found.tenant_id)
    slots: TenantSlots | None = getattr(request.app.state, "tenant_slots", None)
    if slots is not None:
        slots.take(request.scope, found.tenant_id)
    limiter: RateLimiter = request.app.state.rate_limiter
    limiter.check(found.tenant_id, found.rate_limit_per_s, time.monotonic())  # the edge's clock
    checked_query(request)
    return found


KeyHolder = Tenant | Literal["unread", "admin", "unknown"]


def key_holder(state: State, key: str | None) -> KeyHolder:
    """Who ``key`` (as :func:`presented_key` reads it) acts for, from the app's ``state``: its
    tenant; ``"unread"`` while the tenants topic is not read yet (a key added or revoked there is
    not known); ``"admin"`` for the admin key, which acts for no tenant; ``"unknown"`` for a
    missing key or one no tenant holds. The routes and the edge's early 401 both decide here.
    """
    read: asyncio.Event | None = getattr(state, "tenants_read", None)
    if read is not None and not read.is_set():
        return "unread"
    admin_key: str | None = getattr(state, "admin_key", None)
    if key and admin_key and hmac.compare_digest(key.encode(), admin_key.encode()):
        return "admin"
    registry: Tenants = state.registry
    found = registry.by_api_key(key) if key else None
    return "unknown" if found is None else found


def presented_key(bearer: HTTPAuthorizationCredentials | None, x_api_key: str | None) -> str | None:
    """The key a request presents (bearer first, else ``X-API-Key``), stripped; None if none."""
    key = bearer.credentials if bearer is not None else x_api_key
    return key.strip() if key else None


def unencodable(value: object) -> tuple[str, object]:
    """The path, below ``value``, of the first text UTF-8 cannot carry ("" for ``value``), and
    that text (a key of an object, or the value at the path): what a ``utf8`` error names.
    """
    if isinstance(value, dict):
        for k, v in value.items():
            if _bad(k):
                return f".{k}", k
            if _bad(v):
                at, bad = unencodable(v)
                return f".{k}{at}", bad
    if isinstance(value, list):
        for i, v in enumerate(value):
            if _bad(v):
                at, bad = unencodable(v)
                return f"[{i}]{at}", bad
    return "", value


def _bad(value: object) -> bool:
    """``value`` holds text UTF-8 cannot carry (only that: big integers are checked elsewhere)."""
    if value is None or isinstance(value, int | float):
        return False
    if isinstance(value, list) and all(type(x) is float or type(x) is int for x in value):
        return False  # a vector: no text (the encoder below costs ~0.1 ms for 384 floats)
    try:
        json.dumps(value, ensure_ascii=False, default=_checked_already).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _checked_already(_: object) -> None:
    """What is not JSON text (a nested body, a parsed time) was checked by its own validator."""


Auth = Annotated[Tenant, Depends(tenant)]


class DirectRoute(OrjsonRoute):
    """A route for an endpoint ``(body: <a Body model>, who: Auth) -> Response`` served without
    FastAPI's per-request machinery (dependency solving, field-by-field body validation: ~a
    fifth of a recall's CPU through HTTP). Each request is handled as FastAPI would: the body
    read as JSON only under a JSON content type (``application/json``, ``application/*+json``),
    JSON errors first (400, as :class:`OrjsonRoute` answers them: :func:`body_json`), then the
    API key (:func:`authenticate`: 401, 429), then the model's validation, whose errors are
    raised as FastAPI's ``RequestValidationError`` under ``body``; the app's handlers answer them
    all.
    OpenAPI and the route label see an ordinary route. What FastAPI would add per route is not
    supported: route dependencies, ``strict_content_type=False``, a route body limit (TypeError
    at construction, as for an endpoint of another shape); ``dependency_overrides`` of
    :func:`tenant` are not honoured. Under an app-wide body limit, the limit's own errors pass
    through unchanged.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        hints = typing.get_type_hints(self.endpoint, include_extras=True)
        model = hints.get("body")
        params = list(inspect.signature(self.endpoint).parameters)
        if (
            params != ["body", "who"]
            or hints.get("who") != Auth
            or not inspect.iscoroutinefunction(self.endpoint)
            or not (isinstance(model, type) and issubclass(model, BaseModel))
        ):
            msg = (
                f"{self.path}: a direct route takes async (body: <model>, who: Auth), not {params}"
            )
            raise TypeError(msg)
        if self.dependencies or getattr(self, "max_body_size", None) is not None:
            raise TypeError(f"{self.path}: a direct route takes no dependencies nor body limit")
        strict = self.strict_content_type
        if not (strict.value if isinstance(strict, DefaultPlaceholder) else strict):
            raise TypeError(f"{self.path}: a direct route reads JSON under a JSON type only")
        endpoint = self.endpoint
        body_model: type[BaseModel] = model

        names = query_names(self)

        async def direct(request: Request) -> Response:
            note_query(request, names)
            value = await _json_body(request)
            who = await authenticate(request)
            if value is _NO_BODY:  # after the key, as FastAPI reports a missing body
                missing = {
                    "type": "missing",
                    "loc": ("body",),
                    "msg": "Field required",
                    "input": None,
                }
                raise RequestValidationError([missing])
            try:
                body = body_model.model_validate(value, from_attributes=True)
            except ValidationError as exc:
                errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
                raise RequestValidationError(errors, body=value) from None
            response: Response = await endpoint(body=body, who=who)
            return response

        return direct


_NO_BODY = object()
"""What :func:`_json_body` returns for a request without a body."""


async def _json_body(request: Request) -> Any:  # noqa: ANN401  (any JSON value)
    """The request's body as FastAPI reads it for a body model: the parsed JSON under a JSON
    content type, the bytes under another or none; no body: :data:`_NO_BODY`.
    """
    try:
        body = await request.body()  # a client gone mid-body: ClientDisconnect, a 400 below
        if not body:
            return _NO_BODY
        if not _is_json(request.headers.get("content-type")):
            return body
        return body_json(body)
    except HTTPException:
        raise
    except Exception as e:
        if MAX_BODY_SIZE_SCOPE_KEY in request.scope:
            raise  # perhaps the app's body limit: its middleware answers it
        raise HTTPException(400, "There was an error parsing the body") from e


def _is_json(content_type: str | None) -> bool:
    """``application/json`` or ``application/<anything>+json``, parameters aside."""
    if content_type is None:
        return False
    if content_type == "application/json":
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def check_not_blank(field: str, text: str | None) -> None:
    """Raise RecordError naming ``field`` when ``text`` is nothing but whitespace: every such text
    normalises to "" (one derived id for all of them, nothing to embed or match), where "" itself
    is refused by the schema.
    """
    if text is not None and not normalise_content(text):
        raise RecordError(field, text, "nothing but whitespace")


def _iso_only(value: object) -> object:
    """A time as the log's records take it (:func:`storage.records.iso_text`): a number, or text
    of digits alone, was read as Unix seconds.
    """
    if not (iso_text(value) or isinstance(value, datetime)):
        msg = "expected an ISO 8601 time with its timezone, not a number"
        raise ValueError(msg)
    return value


IsoTime = Annotated[AwareDatetime, Strict(False), BeforeValidator(_iso_only)]
"""An ISO 8601 time with its timezone, as text, in strict bodies too (which take no text for a
datetime otherwise)."""


def session_of(session_id: str | None, run_id: str | None, field: str) -> str | None:
    """``run_id`` is mem0's name for a session: either names it; both must agree (else
    RecordError naming ``field``, the run_id's path).
    """
    if run_id is not None and session_id is not None and run_id != session_id:
        raise RecordError(field, run_id, f"differs from session_id {session_id!r}: give one")
    return session_id if session_id is not None else run_id


def _listed(value: object) -> object:
    """One token given as text is a list of one."""
    return [value] if isinstance(value, str) else value


Tokens = Annotated[
    list[str],
    BeforeValidator(_listed),
    Field(max_length=MAX_TOKENS),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "maxItems": MAX_TOKENS},
            ]
        }
    ),
]
"""A body's ``after``: one token (text) or a list of them; a bad one is named ``after[i]``
(a union's error named its branch: ``after.str``)."""
QueryTokens = Annotated[list[str] | None, Query()]
"""A query's ``after`` (``?after=t1&after=t2``): as many as a body's, counted when they are
opened (:meth:`ranker.tokens.TokenSeal.read`), not in the schema: a URL holds ~160 real tokens,
and a schema's ``maxItems`` has fuzzers build URLs past what the HTTP server reads (64 KiB: its
plain-text 400)."""


def under(prefix: str, exc: RecordError) -> RecordError:
    """The same error with its field under ``prefix`` (``tags[2]`` -> ``memories[3].tags[2]``)."""
    return RecordError(
        prefix if exc.field == "$" else f"{prefix}.{exc.field}", exc.value, exc.reason
    )


def json_response(payload: dict[str, Any]) -> Response:
    """``payload`` as a 200 JSON response written by orjson: a page of ten memories costs
    FastAPI's response encoding and the standard library ~0.3 ms of the event loop per request.
    What orjson cannot write (an integer beyond 64 bits in ``metadata``) is written exactly by
    pydantic's encoder; a type neither knows raises a serialization error (500).
    """
    try:
        body = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:  # NaN and infinity as null, as orjson writes them
        body = pydantic_core.to_json(payload, inf_nan_mode="null", fallback=_scalar)
    return Response(body, media_type="application/json")


def _scalar(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


RESULTS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the top ``k``, best first: each memory with its ``scores``; ``token``:"
        " the recall access events it recorded (``track``), to pass as ``after`` so that a later"
        " read counts them, or null when it recorded none",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "results": {"type": "array", "items": {"type": "object"}},
                        "token": {"type": ["string", "null"]},
                    },
                    "required": ["results", "token"],
                }
            }
        },
    }
}
"""The OpenAPI answer of the recall routes (they return a written :func:`json_response`)."""


@functools.lru_cache(maxsize=65_536)
def iso_us(us: int) -> str:
    """Microseconds since the epoch as ISO 8601 in UTC (``from_us(us).isoformat()``): remembered,
    as the same instants come back in answer after answer (~3 µs each to format, three a memory).
    """
    return from_us(us).isoformat()


def _next_review(row: MemoryRow) -> str | None:
    """When the memory's review card is next due; None without one, and for a memory deleted or
    forgotten (its card is kept, but no access reaches it: the time would never come).
    """
    if not row.next_review_us or row.state in _NO_REVIEW:
        return None
    return iso_us(row.next_review_us)


_NO_REVIEW = frozenset(state.value for state in GONE)


def memory_json(row: MemoryRow) -> dict[str, Any]:
    """A memory as every route returns it (recall adds ``scores``)."""
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
        "next_review": _next_review(row),
        "tags": list(row.tags),
        "relations": list(row.relations),  # written, or of memories merged or summarised into it
        "metadata": dict(row.metadata),
        "session_id": row.session_id or None,
        "agent_id": row.agent_id or None,
        "run_id": row.session_id or None,  # mem0's name for the session
        "user_id": row.user_id or None,
        "merged_into": row.merged_into or None,
        "created_at": iso_us(row.created_at_us),
        "last_access": iso_us(row.last_access_us),
        "valid_to": iso_us(row.valid_to_us) if row.valid_to_us else None,
        "superseded_by": row.superseded_by or None,
    }
