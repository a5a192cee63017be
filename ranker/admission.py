"""Admission control at the edge, and the HTTP status counter.

An ASGI middleware in front of the whole app: a request to the API (``/v1/...``) beyond
``max_in_flight`` being served is answered 429 with ``Retry-After`` at once, before its body is
read, embedded or searched, so overload costs microseconds. Once its key names the tenant, a
request beyond the tenant's share (:class:`TenantSlots`) is answered 429 too, so one tenant's
requests (reads waiting out their tokens, say) never take every slot. A slot is held for a
bounded time and memory: a request presenting no key at all, or a key no tenant holds, is
answered 401 before it takes one or its body is read (a body is parsed at many times its size:
an unauthenticated client must not make the service hold that), a body over
``max_body_bytes`` is answered 413 (from its ``Content-Length`` before reading it, else once
that much arrived), and a body not all arrived ``body_timeout_s`` after the request is
answered 408 (a client that sends headers and then nothing would hold its slot for ever). The
bodies of all requests in flight together hold at most ``max_body_bytes_in_flight``
(:class:`BodyBudget`, small bodies aside): past it a request is answered 429 with ``Retry-After``
when its route reads the body, before a byte is read when its ``Content-Length`` says so, else as
soon as its bytes pass it. An admin route's request is refused 401 or 403 here as the route would
refuse it, before its body is read. Every
response is counted in ``mnemostream_http_responses_total{route,status}`` (``route`` is the
path template, ``other`` for no route). A memory id that escapes a ``/`` (``a%2Fb``) is routed
as sent, so its route authenticates it and refuses the id (:func:`_keep_escaped_slash`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from urllib.parse import unquote_to_bytes

from fastapi import HTTPException
from prometheus_client import Gauge
from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ranker.logs import ROUTE_KEY, set_tenant
from ranker.metrics import Metrics
from ranker.problems import problem_body

RETRY_AFTER_S = 1
"""The retry hint of a refused request: the service drains its in-flight requests in about this."""
_MEMORIES = b"/v1/memories/"
"""The raw path prefix of the routes that take a memory id in the path."""
_HELD = "mnemostream.tenant_slots"
"""The scope key of the tenants whose slot a request holds (released when it is answered)."""
_DIGITS = 20
"""A ``Content-Length`` of more digits is read as 10**20 bytes (over any limit)."""
_BODY = "mnemostream.body_bytes"
"""The scope key of the body bytes a request holds of the process's budget (given back when it is
answered)."""


class TenantBusy(Exception):  # noqa: N818 - the condition, as callers catch it
    """A tenant already has its share of the requests in flight; retriable after ``retry_after_s``."""

    retriable = True

    def __init__(self, tenant_id: str, limit: int) -> None:
        self.tenant_id = tenant_id
        self.retry_after_s = float(RETRY_AFTER_S)
        super().__init__(
            f"tenant {tenant_id} has {limit} requests in flight, its share;"
            f" retry after {RETRY_AFTER_S} s"
        )


class TenantSlots:
    """Requests in flight per tenant, at most ``limit`` each. A slot is taken when the request's
    key names its tenant (:meth:`take`) and given back when :class:`Admission` has answered it.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            msg = f"max_in_flight_per_tenant={limit}: must be at least 1"
            raise ValueError(msg)
        self.limit = limit
        self.held: dict[str, int] = {}

    def take(self, scope: Scope, tenant_id: str) -> None:
        """Count the request of ``scope`` for ``tenant_id`` (once; none outside
        :class:`Admission`, which gives it back); raise :class:`TenantBusy` at the limit.
        """
        taken: list[str] | None = scope.get(_HELD)
        if taken is None or tenant_id in taken:
            return
        count = self.held.get(tenant_id, 0)
        if count >= self.limit:
            raise TenantBusy(tenant_id, self.limit)
        self.held[tenant_id] = count + 1
        taken.append(tenant_id)

    def release(self, scope: Scope) -> None:
        """Give back the slots the request of ``scope`` took."""
        for tenant_id in scope.pop(_HELD, ()):
            left = self.held.get(tenant_id, 0) - 1
            if left > 0:
                self.held[tenant_id] = left
            else:
                self.held.pop(tenant_id, None)


class BodiesBusy(HTTPException):
    """The process holds its budget of request body bytes; retriable after ``retry_after_s``.
    An ``HTTPException``, so that a route reading the body passes it on (answered 429).
    """

    retriable = True

    def __init__(self, limit: int) -> None:
        self.retry_after_s = float(RETRY_AFTER_S)
        super().__init__(  # not the bytes held: what other tenants send is none of a tenant's
            429,
            f"the request bodies in flight hold the server's budget of {limit} bytes"
            f" (MNEMO_MAX_BODY_BYTES_IN_FLIGHT); retry after {RETRY_AFTER_S} s",
        )


SMALL_BODY_BYTES = 64 * 1024
"""A body of at most this many bytes (a recall, a read, a few writes) is counted in the budget and
never refused by it: one tenant's large batches cannot refuse every tenant's recalls. Small bodies
pass the budget by at most ``MNEMO_MAX_IN_FLIGHT`` times this (16 MiB at the defaults)."""


class BodyBudget:
    """Request body bytes the process holds at once, at most ``limit`` (a body is parsed at many
    times its size, and its parsed form lives until the request is answered) besides small bodies
    (:data:`SMALL_BODY_BYTES`). A request takes its share when its route first reads its body:
    all its ``Content-Length`` at once, before a byte is read, or as the bytes arrive when it
    declares none (:meth:`take`); and gives it back when it is answered (:meth:`release`).
    ``gauge``: set to the bytes held after every change.
    """

    def __init__(self, limit: int, gauge: Gauge | None = None) -> None:
        if limit < 1:
            msg = f"max_body_bytes_in_flight={limit}: must be at least 1"
            raise ValueError(msg)
        self.limit = limit
        self.held = 0
        self.gauge = gauge

    @classmethod
    def of(cls, max_body_bytes: int, limit: int | None, gauge: Gauge | None = None) -> BodyBudget:
        """The budget of an edge whose largest body is ``max_body_bytes``: ``limit`` (at least
        that, or a body of the largest size could never be read: ValueError), None: twice it.
        """
        budget = limit or 2 * max_body_bytes
        if budget < max_body_bytes:
            msg = (
                f"max_body_bytes_in_flight={budget}: must be at least max_body_bytes"
                f" ({max_body_bytes}), or a body of the largest size could never be read"
            )
            raise ValueError(msg)
        return cls(budget, gauge)

    def take(self, scope: Scope, total: int) -> None:
        """Hold ``total`` bytes in all for the request of ``scope`` (what it holds already counts
        towards them; none outside :class:`Admission`, which gives them back); raise
        :class:`BodiesBusy`, holding nothing more, when that would pass the limit, unless
        ``total`` is at most :data:`SMALL_BODY_BYTES`: such a body is held and never refused.
        """
        if _BODY not in scope:
            return
        more = total - int(scope[_BODY])
        if more <= 0:
            return
        if total > SMALL_BODY_BYTES and self.held + more > self.limit:
            raise BodiesBusy(self.limit)
        self.held += more
        scope[_BODY] = total
        self._show()

    def release(self, scope: Scope) -> None:
        """Give back the bytes the request of ``scope`` holds."""
        self.held -= int(scope.pop(_BODY, 0))
        self._show()

    def _show(self) -> None:
        if self.gauge is not None:
            self.gauge.set(self.held)


class Admission:
    """The middleware. ``routes``: the app's routes, read at call time (for the route label)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_in_flight: int,
        metrics: Metrics,
        routes: Callable[[], Sequence[BaseRoute]],
        tenant_slots: TenantSlots | None = None,
        max_body_bytes: int = 64 * 2**20,
        body_budget: BodyBudget | None = None,
        body_timeout_s: float = 30.0,
        unknown_key: Callable[[str], bool] | None = None,
        admin_refused: Callable[[Headers], tuple[int, str] | None] | None = None,
        tenant_of: Callable[[str], str | None] | None = None,
    ) -> None:
        """``tenant_slots``: the per-tenant shares its requests take once authenticated;
        ``max_body_bytes``: the largest request body (bytes); ``body_budget``: the bytes of all
        the bodies of requests in flight, beyond which 429 (None: twice ``max_body_bytes``);
        ``body_timeout_s``: how long after a request arrives its whole body must have arrived
        (seconds); ``unknown_key``: whether
        a presented key surely acts for no tenant (False while that cannot be told yet: the
        route then authenticates it); None: only a missing key is refused here. ``admin_refused``:
        the status and detail an admin route answers a request with these headers before its
        work (401, 403), or None when it acts; None: the admin routes refuse for themselves.
        ``tenant_of``: the tenant a presented key acts for (None: none, or not known yet), whose
        share the request takes before its body is read (a route reads the body before it
        authenticates: requests of one tenant sending their bodies slowly held every slot of
        the process); None: the route takes it as it authenticates.
        """
        if max_in_flight < 1:
            msg = f"max_in_flight={max_in_flight}: must be at least 1"
            raise ValueError(msg)
        self.app = app
        self.max_in_flight = max_in_flight
        self.max_body_bytes = max_body_bytes
        self.body_budget = body_budget or BodyBudget.of(
            max_body_bytes, None, metrics.body_bytes_in_flight
        )
        self.body_timeout_s = body_timeout_s
        self.metrics = metrics
        self.routes = routes
        self.tenant_slots = tenant_slots
        self.unknown_key = unknown_key
        self.admin_refused = admin_refused
        self.tenant_of = tenant_of
        self.in_flight = 0
        self._static: dict[tuple[object, object], tuple[str, bool]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        _keep_escaped_slash(scope)
        route, reads_body = self._route(scope)
        scope[ROUTE_KEY] = route  # the request's log line names it, not the path
        status = 500  # an exception escaping the app is answered 500 by the server

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        admitted = str(scope.get("path", "")).startswith("/v1/")
        try:
            if admitted and self.in_flight >= self.max_in_flight:
                detail = f"{self.in_flight} requests in flight; retry after {RETRY_AFTER_S} s"
                await _answer(counted, 429, detail, retry_after_s=RETRY_AFTER_S)
                return
            if admitted:
                headers = Headers(scope=scope)
                key = presented_key(headers)
                tenant_id = self.tenant_of(key) if key and self.tenant_of is not None else None
                refused = self._refused(headers, route, key, tenant_id)
                if refused is not None:
                    await _answer(counted, *refused)
                    return
                if self.tenant_slots is not None:
                    scope[_HELD] = []
                    try:
                        self._take_slot(scope, tenant_id)
                    except TenantBusy as busy:
                        await _answer(counted, 429, str(busy), retry_after_s=RETRY_AFTER_S)
                        return
                # taken as the route reads the body; a route that takes none holds none (a
                # streamed reply's watch for the client's disconnect reads too)
                if reads_body:
                    scope[_BODY] = 0
                declared = _declared(headers) or 0
                receive = _bounded(
                    receive,
                    self.max_body_bytes,
                    self.body_timeout_s,
                    lambda arrived: self.body_budget.take(scope, max(declared, arrived)),
                )
                self.in_flight += 1
                self.metrics.in_flight.set(self.in_flight)
            try:
                await self.app(scope, receive, counted)
            finally:
                if admitted:
                    self.in_flight -= 1
                    self.metrics.in_flight.set(self.in_flight)
                    self.body_budget.release(scope)
                    if self.tenant_slots is not None:
                        self.tenant_slots.release(scope)
        finally:
            self.metrics.http_responses.labels(route, str(status)).inc()

    def _refused(
        self, headers: Headers, route: str, key: str | None, tenant_id: str | None
    ) -> tuple[int, str] | None:
        """The status and detail of an API request to ``route`` (its label) refused from its
        headers alone (``key``: the key they present; ``tenant_id``: the tenant it acts for, when
        known), or None. Outside a route (``other``) the app answers 404 or 405, reading
        nothing; an admin route is refused as it would refuse it (401, 403), before its body is
        read (FastAPI reads a body before the route's dependencies authenticate it).
        """
        admin = route.startswith("/v1/admin/")
        if admin and self.admin_refused is not None:
            refused = self.admin_refused(headers)
            if refused is not None:
                return refused
        needs_key = route != "other" and not admin
        if needs_key and not (headers.get("authorization") or headers.get("x-api-key")):
            return 401, "missing or unknown API key"
        # a key that names a tenant is known: not looked up again
        if needs_key and key and tenant_id is None and self._unknown(key):
            return 401, "missing or unknown API key"
        length = _declared(headers)
        if length is not None and length > self.max_body_bytes:
            return 413, _too_large(self.max_body_bytes)
        return None

    def _unknown(self, key: str) -> bool:
        """``key`` surely acts for no tenant (False when that cannot be told here)."""
        return self.unknown_key is not None and self.unknown_key(key)

    def _take_slot(self, scope: Scope, tenant_id: str | None) -> None:
        """Take the share of ``tenant_id``, the tenant the request's key acts for, when it is
        known from the headers (raises :class:`TenantBusy` at its limit); else its route takes it.
        """
        if tenant_id is not None and self.tenant_slots is not None:
            set_tenant(tenant_id)  # its log line names it, a refusal's too
            self.tenant_slots.take(scope, tenant_id)

    def _route(self, scope: Scope) -> tuple[str, bool]:
        """The label of the route serving ``scope`` and whether it reads a body (a FastAPI
        route with a body parameter, or any other kind; none when no route serves it);
        remembered for paths without parameters (a bounded set: the app's own), matched again
        for the rest.
        """
        key = (scope.get("method"), scope.get("path"))
        found = self._static.get(key)
        if found is not None:
            return found
        found = ("other", False)
        for route in self.routes():
            match, _ = route.matches(scope)
            if match is Match.FULL:
                body = getattr(route, "body_field", True) is not None
                found = (str(getattr(route, "path", "other")), body)
                break
        if found[0] == key[1]:  # the path is the route's own: no parameter in it
            self._static[key] = found
        return found


def presented_key(headers: Headers) -> str | None:
    """The key a request presents, read as its route reads it (:func:`ranker.wire.presented_key`
    over FastAPI's ``HTTPBearer`` and ``APIKeyHeader``): a ``Bearer`` authorization's
    credentials, else ``X-API-Key``, stripped; None if none.
    """
    scheme, _, credentials = (headers.get("authorization") or "").partition(" ")
    credentials = credentials.strip()
    bearer = scheme.lower() == "bearer" and credentials
    key = credentials if bearer else headers.get("x-api-key")
    return key.strip() if key else None


def _keep_escaped_slash(scope: Scope) -> None:
    """Route a ``/v1/memories/{id}`` path that escapes a ``/`` in the id (``a%2Fb``) with the id
    as it was sent: the server decodes the path before routing, so no route answered it (404
    ``Not Found``) or another one did (``a%2Fhistory``: the history of ``a``). Its route then
    authenticates it and refuses the id as any other (422 naming ``memory_id``: no id holds a
    ``/`` or a ``%``).
    """
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes) or not raw.startswith(_MEMORIES):
        return
    segment, slash, rest = raw[len(_MEMORIES) :].partition(b"/")
    if b"%2f" not in segment.lower():
        return
    kept = segment.decode("ascii", "replace")  # percent-escaped: ASCII as sent
    scope["path"] = (
        "/v1/memories/" + kept + unquote_to_bytes(slash + rest).decode("utf-8", "replace")
    )


async def _answer(
    send: Send,
    status: int,
    detail: str,
    retry_after_s: int | None = None,
    *,
    field: str | None = None,
) -> None:
    """A problem reply sent from here (the app never saw the request)."""
    body, own = problem_body(status, detail, field=field, retry_after_s=retry_after_s)
    if status == 401:
        own["www-authenticate"] = "Bearer"
    headers = [(k.encode(), v.encode()) for k, v in own.items()]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _declared(headers: Headers) -> int | None:
    """The body's size its ``Content-Length`` declares (bytes), or None when it declares none
    (a chunked body) or none the server would take (the server refuses those itself).
    """
    length = headers.get("content-length", "")
    if not (length.isascii() and length.isdigit()):
        return None
    digits = length.lstrip("0") or "0"  # a server may take leading zeros
    return int(digits) if len(digits) <= _DIGITS else 10**_DIGITS  # int() refuses 4,301 digits


def _too_large(limit: int) -> str:
    return f"the request body is over {limit} bytes (MNEMO_MAX_BODY_BYTES); send less at once"


def _bounded(
    receive: Receive, max_bytes: int, timeout_s: float, arrived_so_far: Callable[[int], None]
) -> Receive:
    """``receive`` for a request whose body must be at most ``max_bytes`` and all arrive within
    ``timeout_s`` from now; past either, the app's read raises HTTPException 413 or 408, answered
    as a problem. ``arrived_so_far`` is told the body's bytes arrived so far: before each read,
    then after each piece (it may raise, :class:`BodiesBusy` say, which the app's read raises).
    Once the body is in, waits (for the client's disconnect) are not bounded.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    arrived = 0
    done = False

    async def bounded() -> Message:
        nonlocal arrived, done
        if done:
            return await receive()
        arrived_so_far(arrived)
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            detail = f"the request body did not arrive within {timeout_s:g} s"
            raise HTTPException(408, detail) from None
        if message["type"] == "http.request":
            arrived += len(message.get("body", b""))
            if arrived > max_bytes:
                raise HTTPException(413, _too_large(max_bytes))
            arrived_so_far(arrived)
            done = not message.get("more_body", False)
        else:
            done = True
        return message

    return bounded
