"""Tenant administration over HTTP, under ``/v1/admin``: tenants, their policy, rate limit and keys.

Authenticated by the admin key (``MNEMO_ADMIN_KEY``, as ``Authorization: Bearer`` or
``X-API-Key``) and by nothing else: a tenant's key gets 401 here, and the admin key acts for no
tenant on the memory routes. Without ``MNEMO_ADMIN_KEY`` every admin route answers 403.

Every change is a record on the compacted ``tenants`` topic (:mod:`storage.tenant_log`); a route
answers once this ranker has applied it, so the next request here sees it (a new key works at
once); the worker and other rankers follow the topic. Keys are generated here
(``mk-`` and ``secrets.token_urlsafe(32)``), returned once, and only their SHA-256 digests are stored; a key
is named by the first 12 hex digits of its digest (``key_id``).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import Field
from starlette.datastructures import State

from memcore.errors import InvalidField
from ranker.errors import Unavailable
from ranker.problems import ADMIN, REUSED
from ranker.wire import Body, checked_query, presented_key
from storage.tenant_log import TenantLog
from storage.tenants import (
    KEY_ID_CHARS,
    ReusedTenant,
    Tenant,
    key_hash,
    new_api_key,
    replaced,
    with_key,
    without_key,
    without_keys,
)

if TYPE_CHECKING:
    from ranker.service import RecallService

ERASE_ROUNDS = 5
"""Rounds a tenant's erasure makes, at most: every memory, then those given a key meanwhile
(a consolidation's summaries), until none is left; keys still minted in the last round answer
503 (the tenant stays, without keys: the call can be repeated)."""

_BEARER = HTTPBearer(auto_error=False, scheme_name="AdminBearer", description="MNEMO_ADMIN_KEY")
_API_KEY = APIKeyHeader(
    name="X-API-Key", auto_error=False, scheme_name="AdminKey", description="MNEMO_ADMIN_KEY"
)


class TenantBody(Body):
    """A tenant's settings (all of them: what is left out takes its default)."""

    decay: str = Field("zeromemory", description="decay preset: zeromemory or powermem")
    lifecycle: str = Field("default", description="lifecycle preset")
    recall: str = Field("mnemostream", description="recall preset (its weights)")
    overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description='policy section -> field -> value, e.g. {"recall": {"weights":'
        ' {"recency": 0.5}}}',
    )
    rate_limit_per_s: float | None = Field(
        None,
        ge=0,
        strict=True,  # as the tenants file and topic read it: "5" and true are no rate
        description="requests per second (null: the server's default; 0: unlimited)",
    )


def body_field(field: str, value: object, body: Mapping[str, Any]) -> str:
    """A tenant's policy field (``policy.<section>...``, :func:`storage.tenants.tenant_of`) as
    :class:`TenantBody` ``body`` names it: ``policy.decay.preset`` is ``decay`` when the bad
    ``value`` is the body's ``decay`` (else ``overrides.decay.preset``, the one its overrides
    gave), ``policy.recall.weights.recency`` is ``overrides.recall.weights.recency``; others as
    given.
    """
    if field != "policy" and not field.startswith("policy."):
        return field
    section, _, rest = field.removeprefix("policy").lstrip(".").partition(".")
    if (
        section in ("decay", "lifecycle", "recall")
        and rest == "preset"
        and body.get(section) == value
    ):
        return section
    return ".".join(p for p in ("overrides", section, rest) if p)


async def admin(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    x_api_key: Annotated[str | None, Security(_API_KEY)],
) -> TenantLog:
    """The tenants log, for a request that presents the admin key; 403 when there is none."""
    refused = admin_refusal(request.app.state, presented_key(bearer, x_api_key))
    if refused is not None:
        status, detail = refused
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        raise HTTPException(status, detail, headers)
    log: TenantLog = request.app.state.tenant_log
    checked_query(request)
    return log


def admin_refusal(state: State, key: str | None) -> tuple[int, str] | None:
    """How the admin routes answer a request presenting ``key`` (stripped) to the app of
    ``state``: 403 while they are disabled (no admin key, or no live tenants log), 401 for any
    other key than the admin key, None when it acts. The edge refuses with it too, before a
    body is read (:class:`ranker.admission.Admission`).
    """
    expected: str | None = state.admin_key
    if not expected or state.tenant_log is None:
        return 403, "admin routes are disabled: MNEMO_ADMIN_KEY is not set"
    if not hmac.compare_digest((key or "").encode(), expected.encode()):  # create_api stripped it
        return 401, "missing or wrong admin key"
    return None


Admin = Annotated[TenantLog, Depends(admin)]


def admin_routes(api: FastAPI) -> None:
    """Add the admin routes to ``api`` (``api.state.admin_key`` and ``api.state.tenant_log``
    enable them).
    """

    @api.put("/v1/admin/tenants/{tenant_id}", responses=ADMIN | REUSED, tags=["admin"])
    async def put_tenant(
        tenant_id: str,
        body: TenantBody,
        log: Admin,
        reuse: Annotated[
            bool,
            Query(
                description="make a tenant under the id of one deleted with its memories kept,"
                " which it then reads (without it: 409)"
            ),
        ] = False,
    ) -> dict[str, Any]:
        """Create a tenant or replace its settings (policy, rate limit); its keys are kept.
        422 names the field of a bad policy; nothing is written then. 409: the id is of a
        tenant deleted with its memories kept (memories are found by the tenant id alone, so
        the new tenant would read them), unless ``reuse``.
        """
        settings = body.model_dump()
        try:
            changed = await log.update(
                tenant_id, lambda current: replaced(current, tenant_id, settings), reuse=reuse
            )
        except ReusedTenant as exc:
            raise HTTPException(409, str(exc)) from exc
        except InvalidField as exc:
            field = body_field(exc.field, exc.value, settings)
            raise InvalidField(field, exc.value, exc.reason) from exc
        assert changed is not None
        return changed.public()

    @api.get("/v1/admin/tenants", responses=ADMIN, tags=["admin"])
    async def list_tenants(log: Admin) -> dict[str, Any]:
        """Every tenant (the file's and the topic's), without keys."""
        await log.catch_up()
        return {"tenants": [log.tenants[t].public() for t in sorted(log.tenants)]}

    @api.get("/v1/admin/tenants/{tenant_id}", responses=ADMIN, tags=["admin"])
    async def get_tenant(tenant_id: str, log: Admin) -> dict[str, Any]:
        await log.catch_up()
        found = log.get(tenant_id)
        if found is None:
            raise HTTPException(404, f"no such tenant: {tenant_id}")
        return found.public()

    @api.delete("/v1/admin/tenants/{tenant_id}", responses=ADMIN, tags=["admin"])
    async def delete_tenant(
        tenant_id: str,
        log: Admin,
        request: Request,
        erase: Annotated[
            bool,
            Query(description="erase every memory of the tenant first, for good (as erase does)"),
        ] = False,
    ) -> dict[str, Any]:
        """Remove a tenant: its keys stop working, and the worker dead-letters its new records.
        Its memories are kept (a tenant made again under its id would read them: PUT answers
        409 unless told ``reuse``), or with ``erase`` erased first, every one in any state, as
        ``DELETE /v1/memories/{id}?erase=true`` erases one: its keys are revoked at once, the
        records written before are applied, its memories erased, and the tenant removed once
        the worker has applied the erasures (503 when it has not within
        ``MNEMO_AFTER_TIMEOUT_S``: the tenant stays, without keys, and the call can be repeated).
        A write another ranker authenticated just before it saw the revocation may land after;
        keys minted meanwhile (a consolidation's summaries) are erased too, until none is left
        (503 when some still were after :data:`ERASE_ROUNDS` rounds: repeat the call).
        """

        def delete(current: Tenant | None) -> None:
            _found(current, tenant_id)

        erased, keys = set[str](), 0
        if erase:
            # its keys go first (the worker still takes its records, the erasures): a write
            # made meanwhile would outlive the erasure; then what was written before is applied
            await _changing(log.update(tenant_id, lambda t: without_keys(_found(t, tenant_id))))
            service: RecallService = request.app.state.service
            await service.barrier()
            ids, at = await service.tenant_memories(tenant_id), datetime.now(UTC)
            for _ in range(ERASE_ROUNDS):
                erasure = await service.erase(tenant_id, ids, at, summaries=False)
                keys += erasure.keys
                erased.update(ids)
                await service.wait(erasure.token)  # before the tenant closes: else refused
                # a key minted meanwhile (a consolidation's summary of the tenant's memories)
                # is erased too: its write, refused once the tenant is gone, would stay sealed
                # under a live key in the log
                ids = await service.keyed_memories(tenant_id)
                if not ids:
                    break
            else:
                raise Unavailable(
                    "keys",
                    "tenant erasure",
                    f"memories of tenant {tenant_id!r} were still given keys after"
                    f" {ERASE_ROUNDS} rounds ({len(ids)} in the last: a consolidation running?);"
                    " the tenant stays, without keys: repeat the call",
                )
        await _changing(log.update(tenant_id, delete, erased=erase))
        found = len(erased)
        return {"tenant_id": tenant_id, "deleted": True, "erased": found, "keys_erased": keys}

    @api.post(
        "/v1/admin/tenants/{tenant_id}/keys", status_code=201, responses=ADMIN, tags=["admin"]
    )
    async def add_key(tenant_id: str, log: Admin) -> dict[str, Any]:
        """A new API key for the tenant, returned this once (only its digest is stored)."""
        api_key = new_api_key()
        await _changing(log.update(tenant_id, lambda t: with_key(_found(t, tenant_id), api_key)))
        return {
            "tenant_id": tenant_id,
            "api_key": api_key,
            "key_id": key_hash(api_key)[:KEY_ID_CHARS],
        }

    @api.delete("/v1/admin/tenants/{tenant_id}/keys/{key_id}", responses=ADMIN, tags=["admin"])
    async def revoke_key(tenant_id: str, key_id: str, log: Admin) -> dict[str, Any]:
        """Revoke a key, named by its ``key_id`` (or any 8+ leading hex digits of its SHA-256)."""
        changed = await _changing(
            log.update(tenant_id, lambda t: without_key(_found(t, tenant_id), key_id))
        )
        assert changed is not None
        return changed.public()


def _found(tenant: Tenant | None, tenant_id: str) -> Tenant:
    if tenant is None:
        raise LookupError(tenant_id)
    return tenant


async def _changing(change: Awaitable[Tenant | None]) -> Tenant | None:
    """Await a :meth:`TenantLog.update`; a tenant or key it does not find is a 404."""
    try:
        result: Tenant | None = await change
    except LookupError as exc:
        raise HTTPException(404, f"no such tenant or key: {exc.args[0]}") from exc
    return result
