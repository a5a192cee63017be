"""Managing memories over HTTP: batch get, delete, update, list, export and history.

Every route acts for the tenant of the request's API key only; another tenant's memory is a 404
like a missing one. Reads take ``after`` (read-your-writes tokens) like recall and get.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import unquote_to_bytes

import orjson
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import Field
from starlette.convertors import Convertor, register_url_convertor

from memcore import GONE, InvalidField, Tier, derive_memory_id
from memcore.ids import check_id
from ranker.applied import Token
from ranker.errors import Unavailable
from ranker.history import AuditLog
from ranker.listing import decode_cursor, listing_cursor, listing_of, read_listing_cursor
from ranker.problems import CONFLICT, NOT_FOUND
from ranker.service import RecallService
from ranker.tokens import TokenSeal
from ranker.wire import (
    CONTENT_DOC,
    TAGS_DOC,
    TAGS_TEXT,
    Auth,
    Body,
    IsoTime,
    QueryTokens,
    TextBody,
    Tokens,
    check_not_blank,
    memory_json,
    session_of,
)
from storage import Filters, MemoryRow, from_us, to_us
from storage.records import (
    MAX_NAME_BYTES,
    Limits,
    RecordError,
    check_time,
    checked_scope,
    checked_tags,
    checked_write,
    requested_scopes,
)

States = Literal["active", "archived", "forgotten", "deleted"]
LIVE_STATES = ("active", "archived")
EXPORT_PAGE = 1_000


class GetManyBody(Body):
    memory_ids: list[str] = Field(min_length=1, max_length=1000)
    after: Tokens | None = Field(None, description="read-your-writes tokens")


class UpdateBody(Body):
    """What changes in the new version of a memory; a field left out keeps the current version's
    value (the vector too, when content and context stay the same), except ``context``: the
    serving store does not hold it, so a new version has the context sent with its update, or
    none (its keyword index then lacks the old context's words). Strict types, as for a write.
    """

    model_config = Body.model_config | {"strict": True}

    content: str | None = Field(None, min_length=1, description=CONTENT_DOC)
    context: str | None = Field(
        None,
        description="words to find the new version by (embedded and keyword-indexed with its"
        " content); not carried over from the current version: send it again to keep it",
    )
    at: str | None = Field(
        None,
        json_schema_extra={"format": "date-time"},
        description="when the new version takes over (default: now): the old one is valid until"
        " then, and as-of recall before it still finds the old one; not before the old one was"
        " created",
    )
    embedding: list[float] | None = None
    importance: float | None = Field(None, ge=0, le=1)
    memory_type: str | None = None
    tags: list[str] | None = Field(None, description=TAGS_TEXT, json_schema_extra=TAGS_DOC)
    metadata: dict[str, Any] | None = None
    session_id: str | None = None
    run_id: str | None = Field(None, description="mem0's name for session_id")
    agent_id: str | None = None
    user_id: str | None = None
    after: Tokens | None = Field(None, description="read-your-writes tokens")


class EndSessionBody(TextBody):
    """Which session ended, and when. Strict types, as for a write; its scopes go into a Milvus
    expression as they are (:class:`~ranker.wire.TextBody`).
    """

    model_config = TextBody.model_config | {"strict": True}

    session_id: str | None = Field(None, description="the session that ended (or run_id)")
    run_id: str | None = Field(None, description="mem0's name for session_id")
    user_id: str | None = Field(
        None, description='only this user\'s memories of the session ("": those of no user)'
    )
    agent_id: str | None = Field(
        None, description='only this agent\'s memories of the session ("": those of no agent)'
    )
    at: IsoTime | None = Field(
        None,
        description="when it ended (default: now, or the session's last access when later):"
        " memories written after it stay working, a session resumed",
    )
    after: Tokens | None = Field(
        None,
        description="read-your-writes tokens to wait for (your accesses: their times date the"
        " promotions); every write held when the end arrives is waited for in any case",
    )


class _Text(Convertor[str]):
    """A path parameter of any characters, ``/`` and line breaks included: Starlette's ``path``
    (``.*``) matches no line break, so a user id holding one was a 404 no route answered, not
    the route's 422 naming ``user_id``.
    """

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("text", _Text())


def memory_routes(
    api: FastAPI,
    service: RecallService,
    seal: TokenSeal,
    limits: Limits,
    audit: AuditLog | None,
) -> None:
    """Add the routes to ``api``; ``seal``: seals and opens their read-your-writes tokens."""
    _get_and_delete(api, service, seal)
    _update(api, service, seal, limits)
    _listing(api, service, seal)
    _history(api, service, seal, audit)
    _tokens(api, seal)
    _sessions(api, service, seal, limits)


def _get_and_delete(api: FastAPI, service: RecallService, seal: TokenSeal) -> None:
    @api.post("/v1/memories/get")
    async def get_many(body: GetManyBody, who: Auth) -> dict[str, Any]:
        """Many memories by id, any state: those found, and the ids this tenant has none of."""
        ids = [check_id(f"memory_ids[{i}]", m) for i, m in enumerate(body.memory_ids)]
        found = await service.get_many(
            who.tenant_id, ids, await seal.read(body.after, who.tenant_id)
        )
        return {
            "memories": [memory_json(found[m]) for m in dict.fromkeys(ids) if m in found],
            "missing": [m for m in dict.fromkeys(ids) if m not in found],
        }

    @api.delete("/v1/memories/{memory_id}", responses=NOT_FOUND)
    async def forget(
        memory_id: str,
        who: Auth,
        purge: bool = False,
        erase: Annotated[
            bool,
            Query(
                description="erase its words for good (implies purge): its data keys are"
                " destroyed, so no topic, table or replay can show them again"
            ),
        ] = False,
        after: QueryTokens = None,
    ) -> dict[str, Any]:
        """Delete a memory: recall never returns it again and get shows it ``deleted``; with
        ``purge`` its row leaves the serving store too (get answers 404); with ``erase`` its
        data keys are destroyed, so the content, context, embedding and metadata it was written
        with through this API become unreadable everywhere, the log included (README, "Erasure";
        ``keys_erased`` 0: it was written in the clear, and its words stay in the log), and the
        consolidation summaries made from it are erased with it (``summaries_erased``), and so
        are the memories holding its words (``copies_erased``: duplicates consolidation merged
        into it, its versions by ``PATCH`` with the same content). Audited;
        404 when this tenant has no such memory (after ``after`` is applied) and, for ``erase``,
        no key of it either and no erasure of it (an erase that failed after the memory, on its
        summaries, can be repeated).
        """
        check_id("memory_id", memory_id)
        found = await service.get(who.tenant_id, memory_id, await seal.read(after, who.tenant_id))
        if found is None and not (erase and await _erasable(service, who.tenant_id, memory_id)):
            raise HTTPException(404, "no such memory")
        now, keys, summaries, copies = datetime.now(UTC), 0, tuple[str, ...](), tuple[str, ...]()
        await seal.ready()  # before producing: a token it cannot seal fails nothing done
        if erase:
            erasure = await service.erase(who.tenant_id, [memory_id], now)
            token, keys = erasure.token, erasure.keys
            summaries, copies = erasure.summaries, erasure.copies
        else:
            token = await service.forget(who.tenant_id, memory_id, now, purge=purge)
        return {
            "memory_id": memory_id,
            "purge": purge or erase,
            "erase": erase,
            "keys_erased": keys,  # 0: written in the clear by another producer, still in the log
            "summaries_erased": list(summaries),
            "copies_erased": list(copies),
            "token": await seal.seal(token, who.tenant_id),
        }

    async def _erasable(service: RecallService, tenant_id: str, memory_id: str) -> bool:
        """An erase of a memory with no row goes on when it has keys, or was erased already
        (an erase repeated after it failed past the memory, looking for its summaries).
        """
        return await service.has_keys(tenant_id, memory_id) or await service.erased(
            tenant_id, memory_id
        )

    @api.delete("/v1/users/{user_id:text}")
    async def erase_user(
        user_id: str,
        who: Auth,
        request: Request,
        after: QueryTokens = None,
    ) -> dict[str, Any]:
        """Erase every memory of one user of this tenant (``user_id`` scope), in any state,
        summaries of them included, as ``DELETE /v1/memories/{id}?erase=true`` does for one
        (after ``after`` is applied; ``summaries_erased``: summaries made from them that are
        not under the user). Idempotent: a user with nothing left erases 0, and the summaries of
        the memories erased before are looked for again (a call that failed on their search is
        repeated whole). A
        ``user_id`` whose percent-escapes are not UTF-8 is a 422 (the server's decoding would
        have made it U+FFFD, another user's id).
        """
        _check_utf8(request, b"/v1/users/", "user_id")
        if not user_id:
            raise InvalidField("user_id", user_id, f"expected 1-{MAX_NAME_BYTES} bytes (UTF-8)")
        checked_scope("user_id", user_id)
        await service.wait(await seal.read(after, who.tenant_id))
        ids = await service.user_memories(who.tenant_id, user_id)
        before = await service.erased_user_memories(who.tenant_id, user_id)
        listed = set(ids)
        earlier = [m for m in before if m not in listed]
        await seal.ready()
        erasure = await service.erase(
            who.tenant_id, ids, datetime.now(UTC), erased_before=earlier, users=True
        )
        return {
            "user_id": user_id,
            "erased": len(ids),
            "memory_ids": ids,
            "summaries_erased": list(erasure.summaries),
            "copies_erased": list(erasure.copies),
            "keys_erased": erasure.keys,
            "token": await seal.seal(erasure.token, who.tenant_id),
        }


def _update(api: FastAPI, service: RecallService, seal: TokenSeal, limits: Limits) -> None:
    @api.patch("/v1/memories/{memory_id}", responses=NOT_FOUND | CONFLICT)
    async def update(memory_id: str, body: UpdateBody, who: Auth) -> dict[str, Any]:
        """Write a new version of a memory and supersede the current one from ``at`` on (both
        audited; history shows them). 404: no such memory (or erased: a new version would have
        carried its words on); 409: it is deleted or already superseded (update the version
        that superseded it), unless by this same update (the same fields and ``at``) sent
        before: then 200 with that version and no token once it is applied (while it is live);
        409 too when this same update's version was deleted, forgotten, purged or erased since
        (the worker does not make it again; a purge older than the state view's last 100,000 is
        not known here, and answered 200 for a write the worker ignores); 422 as for a write,
        and naming ``at`` when it is before the memory was created.
        """
        check_id("memory_id", memory_id)
        waits = await seal.read(body.after, who.tenant_id)
        old = await service.get(who.tenant_id, memory_id, waits)
        if old is None or old.state == "purged" or await service.erased(who.tenant_id, memory_id):
            raise HTTPException(404, "no such memory")  # erased: its row may await its purge
        now = datetime.now(UTC)
        if old.state in ("deleted", "forgotten") or old.superseded_by:
            made = _repeated(old, body, who.tenant_id, now, limits)
            if made is not None and await _live(service, who.tenant_id, made, waits):
                return {"memory_id": made, "supersedes": memory_id, "token": None}
            gone = old.state in ("deleted", "forgotten")
            reason = old.state if gone else f"superseded by {old.superseded_by}"
            raise HTTPException(409, f"memory {memory_id} is {reason}: not updatable")
        document, at = new_version(old, body, who.tenant_id, now, limits)
        if body.at is not None:  # the same update sent again: its version may have left since
            await _not_left(service, who.tenant_id, memory_id, str(document["memory_id"]), waits)
        await seal.ready()
        token = await service.update(who.tenant_id, memory_id, document, at)
        if token is None:  # erased while the version was made: erased with it
            raise HTTPException(404, "no such memory")
        return {
            "memory_id": document["memory_id"],
            "supersedes": memory_id,
            "token": await seal.seal(token, who.tenant_id),
        }


_GONE = frozenset({state.value for state in GONE} | {"purged"})
"""The row states of a version out of recall for good (memcore's, and a purge's tombstone)."""


def _repeated(
    old: MemoryRow, body: UpdateBody, tenant_id: str, now: datetime, limits: Limits
) -> str | None:
    """The id of the version ``body`` made of ``old`` if it was sent before (a retry after no
    reply came: the id hashes the old id, the tenant, the instant and the change; only a write
    of this tenant choosing that id could hold it too), or None: no ``at`` (a new instant, a new
    version), ``old`` deleted or forgotten, ``body`` one the normal path refuses (its 409
    stands), or not superseded.
    """
    if body.at is None or not old.superseded_by or old.state in ("deleted", "forgotten"):
        return None
    try:
        document, _ = new_version(old, body, tenant_id, now, limits)
    except (InvalidField, RecordError):
        return None
    return str(document["memory_id"])


async def _made(
    service: RecallService, tenant_id: str, memory_id: str, after: Token | None
) -> str | None:
    """What became of ``memory_id`` (an update's version): ``"live"`` (applied, current or
    archived), the state it left recall in (deleted, forgotten, purged: a purge from the state
    view's marks, its row gone; erased, its row awaiting its purge), or None: not made (its
    write not applied, or dead-lettered).
    """
    row = await service.get(tenant_id, memory_id, after)
    if row is not None and row.state in _GONE:
        return row.state
    if row is None and service.purged(tenant_id, memory_id):
        return "purged"
    if await service.erased(tenant_id, memory_id):
        return "erased"
    return None if row is None else "live"


async def _live(
    service: RecallService, tenant_id: str, memory_id: str, after: Token | None
) -> bool:
    """``memory_id`` is applied, current or archived, and not erased."""
    return await _made(service, tenant_id, memory_id, after) == "live"


async def _not_left(
    service: RecallService, tenant_id: str, memory_id: str, made: str, after: Token | None
) -> None:
    """Raise a 409 when ``made``, the version an update with its ``at`` makes of ``memory_id``,
    was made before and has left recall since: sent again late (a retry), the update would
    bring back a version the user deleted, and supersede ``memory_id`` again, which that
    deletion had made current. Past the state view's purge marks, the worker ignores the
    write (:func:`memcore.version_left`).
    """
    state = await _made(service, tenant_id, made, after)
    if state is None or state == "live":  # not made (dead-lettered), or the same version again
        return
    why = f"the version this update made, {made}, is {state}: not made again"
    raise HTTPException(409, f"memory {memory_id}: {why} (send it with another at, or none)")


def new_version(
    old: MemoryRow, body: UpdateBody, tenant_id: str, now: datetime, limits: Limits
) -> tuple[dict[str, Any], datetime]:
    """The write record of the new version (``body``'s fields over ``old``'s) and the time it
    takes over. Its id derives from the old id, the time (the instant, in UTC) and the change, so
    the same update sent twice is one version. Raises InvalidField when the update changes
    nothing, and RecordError naming the field the worker would reject, as ``POST /v1/memories``
    does (a lone surrogate, an integer over 64 bits), or ``at`` when it is before ``old`` was
    created (the worker would not let the new version supersede it).
    """
    given = body.model_dump(exclude_none=True, exclude={"after", "run_id"})
    requested_scopes(body)
    session = session_of(body.session_id, body.run_id, "run_id")
    if session is not None:
        given["session_id"] = session
    check_not_blank("content", body.content)
    at = given.pop("at", None)
    at = now.isoformat() if at is None else at
    if not given:
        raise InvalidField("$", {}, "an update needs at least one field to change")
    document = _over(old, given, tenant_id, at)
    record, _ = checked_write(document, limits, now)  # first: the id serialises the change
    _check_takes_over(old, at, record.at)
    # the instant, not its spelling: a retry that writes it otherwise (Z for +00:00, another
    # offset, .000) is the same version
    document["at"] = record.at.astimezone(UTC).isoformat()
    document["memory_id"] = _version_id(old.memory_id, tenant_id, document["at"], given)
    return document, record.at


def _over(old: MemoryRow, given: dict[str, Any], tenant_id: str, at: str) -> dict[str, Any]:
    """The write document of ``given`` over ``old`` (the vector kept when the text is), no id."""
    same_text = "content" not in given and "context" not in given
    return {
        "content": old.content,
        "importance": old.importance,
        "memory_type": old.tier,
        "tags": list(old.tags),
        "metadata": dict(old.metadata),
        "relations": list(old.relations),
        **({"session_id": old.session_id} if old.session_id else {}),
        **({"agent_id": old.agent_id} if old.agent_id else {}),
        **({"user_id": old.user_id} if old.user_id else {}),
        **({"embedding": list(old.vector)} if same_text and old.vector else {}),
        **given,
        "tenant_id": tenant_id,
        "at": at,
    }


def _check_takes_over(old: MemoryRow, given: str, at: datetime) -> None:
    """Raise RecordError naming ``at`` (``given``, as sent) when ``at`` is before ``old`` was
    created: the worker ignores a supersession older than the memory it supersedes.
    """
    if to_us(at) < old.created_at_us:
        created = from_us(old.created_at_us).isoformat()
        reason = f"before {old.memory_id} was created ({created}): it cannot supersede it"
        raise RecordError("at", given, reason)


def _version_id(memory_id: str, tenant_id: str, at: str, given: dict[str, Any]) -> str:
    """The new version's id: from the old id, the time and the change (checked: JSON encodes it)."""
    change = orjson.dumps(given, option=orjson.OPT_SORT_KEYS).decode()
    return derive_memory_id(tenant_id, f"{memory_id}\x00{at}\x00{change}")


def _list_filters(
    state: list[States] | None,
    memory_type: list[str] | None,
    tag: list[str] | None,
    agent_id: str | None,
    session_id: str | None,
    user_id: str | None,
    include_history: bool,
    now: datetime,
) -> Filters:
    return Filters(
        states=tuple(state) if state else LIVE_STATES,
        current_at_us=None if include_history else to_us(now),
        tiers=tuple(
            dict.fromkeys(
                Tier.parse(t, f"memory_type[{i}]").value for i, t in enumerate(memory_type or ())
            )
        ),
        tags_any=checked_tags("tag", tag or ()),
        agent_id=agent_id,
        session_id=session_id,
        user_id=user_id,
    )


def _listing(api: FastAPI, service: RecallService, seal: TokenSeal) -> None:
    @api.get("/v1/memories")
    async def list_memories(
        who: Auth,
        request: Request,
        state: Annotated[list[States] | None, Query()] = None,
        memory_type: Annotated[list[str] | None, Query()] = None,
        tag: Annotated[list[str] | None, Query()] = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        user_id: str | None = None,
        include_history: bool = False,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
        after: QueryTokens = None,
    ) -> dict[str, Any]:
        """This tenant's memories in id order, ``limit`` per page: pass the reply's ``cursor``
        for the next page (null on the last). Default: active and archived, current versions
        only (``include_history`` adds superseded ones); ``tag``: any of them. A parameter whose
        %-escapes are not UTF-8 is a 422 naming it (decoded, it would name another user or tag).
        """
        _check_query_utf8(request)
        for name, value in (
            ("agent_id", agent_id),
            ("session_id", session_id),
            ("run_id", run_id),
            ("user_id", user_id),
        ):
            checked_scope(name, value)
        session = session_of(session_id, run_id, "run_id")
        now = datetime.now(UTC)
        filters = _list_filters(
            state, memory_type, tag, agent_id, session, user_id, include_history, now
        )
        listing = listing_of(who.tenant_id, filters)
        after_id, as_of_us = None, to_us(now)
        if cursor is not None:  # the listing stays current at its first page's time
            after_id, given_as_of = read_listing_cursor(cursor, listing)
            as_of_us = given_as_of if given_as_of is not None else as_of_us
        if filters.current_at_us is not None:
            filters = dataclasses.replace(filters, current_at_us=as_of_us)
        waits = await seal.read(after, who.tenant_id)
        found = await service.list_page(who.tenant_id, filters, after_id, limit, waits)
        next_page = found.cursor and listing_cursor(found.cursor, as_of_us, listing)
        return {"memories": [memory_json(r) for r in found.rows], "cursor": next_page}

    @api.get("/v1/export", response_class=StreamingResponse)
    async def export(
        who: Auth, vectors: bool = False, after: QueryTokens = None
    ) -> StreamingResponse:
        """Every memory of this tenant in any state but purged, superseded versions included, as
        JSON lines (``application/x-ndjson``) in id order, once ``after`` is applied (an erase's
        token: its memories are not in the export); ``vectors`` adds each ``embedding``.
        A failure after the first line ends the stream early (the last line is then not
        ``{"end": ...}``).
        """
        await service.wait(await seal.read(after, who.tenant_id))
        everything = Filters(states=())
        ordered = await service.memory_ids(who.tenant_id)  # sorted once for the whole stream
        first = await service.list_page(
            who.tenant_id, everything, None, EXPORT_PAGE, ordered=ordered
        )

        async def lines() -> AsyncIterator[bytes]:
            page, count = first, 0
            while True:
                for row in page.rows:
                    doc = memory_json(row) | ({"embedding": list(row.vector)} if vectors else {})
                    yield orjson.dumps(doc) + b"\n"
                count += len(page.rows)
                if page.cursor is None:
                    break
                after_id = decode_cursor(page.cursor)
                page = await service.list_page(
                    who.tenant_id, everything, after_id, EXPORT_PAGE, ordered=ordered
                )
            yield orjson.dumps({"end": True, "count": count}) + b"\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")


def _history(api: FastAPI, service: RecallService, seal: TokenSeal, audit: AuditLog | None) -> None:
    @api.get("/v1/memories/{memory_id}/history", responses=NOT_FOUND)
    async def history(memory_id: str, who: Auth, after: QueryTokens = None) -> dict[str, Any]:
        """Every decision about a memory in the order it was decided (the audit log's), each
        with ``kind`` (created, superseded, archived, revived, deleted...), ``reason``, event
        time ``at`` (a late event, such as a backdated write or access or a tracked recall with
        a past ``at``, is dated before records above it), the record it
        came from (``source``) and the state after it. At most the newest 10,000
        (those that explain its state now): ``total`` counts them all, ``truncated`` says the
        oldest were left out. 404 when this tenant has no such memory and the log has nothing
        about it. A tenant made under the id of one deleted with ``erase`` is shown nothing
        logged before it was made.
        """
        check_id("memory_id", memory_id)
        if audit is None:
            raise Unavailable("kafka", "read audit", "this server reads no audit log")
        await service.wait(await seal.read(after, who.tenant_id))
        found = await audit.history(who.tenant_id, memory_id, since_ms=who.history_from_ms)
        if not found.events and await service.get(who.tenant_id, memory_id) is None:
            raise HTTPException(404, "no such memory")
        return {
            "memory_id": memory_id,
            "events": found.events,
            "total": found.total,
            "truncated": found.total > len(found.events),
        }


class FoldBody(Body):
    after: Tokens = Field(min_length=1, description="read-your-writes tokens to fold into one")


def _tokens(api: FastAPI, seal: TokenSeal) -> None:
    @api.post("/v1/tokens")
    async def fold(body: FoldBody, who: Auth) -> dict[str, Any]:
        """One read-your-writes token covering every token in ``after`` (as a read given them
        all waits), without waiting for anything: tokens are sealed, so a client cannot merge
        them itself (the SDK calls this to keep a session's tokens, and its URLs, short). 422
        naming ``after[i]`` (``after`` for one) when a token is not one issued to this tenant.
        """
        token = await seal.read(body.after, who.tenant_id)
        if token is None:  # the body's min_length refuses it first
            raise InvalidField("after", body.after, "give at least one token")
        return {"token": await seal.seal(token, who.tenant_id)}


def _check_utf8(request: Request, prefix: bytes, field: str) -> None:
    """Raise InvalidField naming ``field`` when the raw path after ``prefix`` does not decode as
    UTF-8 once percent-decoded (the ASGI server decodes it with replacement characters).
    """
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes) and prefix in raw:
        _refuse_non_utf8(field, raw.split(prefix, 1)[1])


def _check_query_utf8(request: Request) -> None:
    """Raise InvalidField naming the first query parameter whose value does not decode as UTF-8
    once percent-decoded (Starlette decodes it with replacement characters).
    """
    for pair in request.scope.get("query_string", b"").split(b"&"):
        name, _, value = pair.partition(b"=")
        _refuse_non_utf8(unquote_to_bytes(name).decode("utf-8", "replace"), value)


def _refuse_non_utf8(field: str, escaped: bytes) -> None:
    """Raise InvalidField naming ``field`` when ``escaped`` (%-escaped bytes of a URL) does not
    decode as UTF-8.
    """
    try:
        unquote_to_bytes(escaped).decode("utf-8")
    except UnicodeDecodeError:
        shown = escaped.decode("ascii", "replace")
        raise InvalidField(field, shown, "not UTF-8 once its %-escapes are decoded") from None


def _sessions(api: FastAPI, service: RecallService, seal: TokenSeal, limits: Limits) -> None:
    @api.post("/v1/sessions/end")
    async def end_session(body: EndSessionBody, who: Auth) -> dict[str, Any]:
        """A session ended (SPEC sections 5 and 7): each of its active, current, working
        memories, those written at or before ``at``, moves to episodic now, not after hours
        idle (dated ``at``, or its last access when later). Without ``at``: now, or the
        session's last access when later (a writer's clock ahead of the server's). After
        ``after`` is applied (your accesses: their times date the promotions) and after every
        write the topics hold when it arrives (a session's last turn is found, whichever
        client wrote it; behind a backlog of any tenant's writes, 503 when the worker does not
        catch up in time).
        ``promoted``: the memories sent that promotion (applied like a write, each audited with
        the session's name; an end sent again before the first is applied sends them again,
        and the worker ignores the second, audited); ``at``: the end's time; ``token``: for a
        read to wait for.
        """
        field = "run_id" if body.session_id is None and body.run_id is not None else "session_id"
        session = session_of(body.session_id, body.run_id, "run_id")
        if not session:
            raise RecordError(field, session, "required: the session that ended (1 byte or more)")
        checked_scope(field, session)
        user_id = checked_scope("user_id", body.user_id)
        agent_id = checked_scope("agent_id", body.agent_id)
        now = datetime.now(UTC)
        at = None if body.at is None else check_time("at", body.at, now, limits)
        waits = await seal.read(body.after, who.tenant_id)
        scope = Filters(session_id=session, user_id=user_id, agent_id=agent_id)
        await seal.ready()  # before producing: a token it cannot seal fails nothing done
        latest = now + limits.max_future_skew  # the worker dead-letters an event after it
        promoted, ended, token = await service.end_session(
            who.tenant_id, scope, at, now, latest, waits
        )
        return {
            "session_id": session,
            "at": ended.isoformat(),
            "promoted": promoted,
            "token": await seal.seal(token, who.tenant_id),
        }
