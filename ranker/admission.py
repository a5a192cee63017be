"""Admission control at the edge, and the HTTP status counter.

An ASGI middleware in front of the whole app: a request to the API (``/v1/...``) beyond
``max_in_flight`` being served is answered 429 with ``Retry-After`` at once, before its body is
read, embedded or searched, so overload costs microseconds and memory stays bounded. Once its key
names the tenant, a request beyond the tenant's share (:class:`TenantSlots`) is answered 429 too,
so one tenant's requests (reads waiting out their tokens, say) never take every slot. Every
response is counted in ``mnemostream_http_responses_total{route,status}`` (``route`` is the
path template, ``other`` for no route).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ranker.metrics import Metrics
from ranker.problems import problem_body

RETRY_AFTER_S = 1
"""The retry hint of a refused request: the service drains its in-flight requests in about this."""
_HELD = "mnemostream.tenant_slots"
"""The scope key of the tenants whose slot a request holds (released when it is answered)."""


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
    ) -> None:
        """``tenant_slots``: the per-tenant shares its requests take once authenticated."""
        if max_in_flight < 1:
            msg = f"max_in_flight={max_in_flight}: must be at least 1"
            raise ValueError(msg)
        self.app = app
        self.max_in_flight = max_in_flight
        self.metrics = metrics
        self.routes = routes
        self.tenant_slots = tenant_slots
        self.in_flight = 0
        self._static: dict[tuple[object, object], str] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self._route(scope)
        status = 500  # an exception escaping the app is answered 500 by the server

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        admitted = str(scope.get("path", "")).startswith("/v1/")
        try:
            if admitted and self.in_flight >= self.max_in_flight:
                await self._refuse(counted)
                return
            if admitted:
                self.in_flight += 1
                self.metrics.in_flight.set(self.in_flight)
                if self.tenant_slots is not None:
                    scope[_HELD] = []
            try:
                await self.app(scope, receive, counted)
            finally:
                if admitted:
                    self.in_flight -= 1
                    self.metrics.in_flight.set(self.in_flight)
                    if self.tenant_slots is not None:
                        self.tenant_slots.release(scope)
        finally:
            self.metrics.http_responses.labels(route, str(status)).inc()

    async def _refuse(self, send: Send) -> None:
        detail = f"{self.in_flight} requests in flight; retry after {RETRY_AFTER_S} s"
        body, own = problem_body(429, detail, retry_after_s=RETRY_AFTER_S)
        headers = [(k.encode(), v.encode()) for k, v in own.items()]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _route(self, scope: Scope) -> str:
        """The label of the route serving ``scope``; remembered for paths without parameters
        (a bounded set: the app's own), matched again for the rest.
        """
        key = (scope.get("method"), scope.get("path"))
        label = self._static.get(key)
        if label is not None:
            return label
        label = "other"
        for route in self.routes():
            match, _ = route.matches(scope)
            if match is Match.FULL:
                label = str(getattr(route, "path", "other"))
                break
        if label == key[1]:  # the path is the route's own: no parameter in it
            self._static[key] = label
        return label
