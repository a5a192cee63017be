"""SDK clients. Errors: :class:`MnemostreamError` (with ``status``, ``retriable`` and
``retry_after_s``), :class:`Overloaded` for HTTP 429, and :class:`Unreachable` when no reply came.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import math
import operator
import re
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from typing import Any, TypeAlias, TypedDict
from urllib.parse import quote

import httpx

DEFAULT_TIMEOUT_S = 30.0
"""Longer than the server's read-your-writes wait (``MNEMO_AFTER_TIMEOUT_S``, 10 s by default), so
a read that waits for its tokens gets the server's retriable 503, not a client time-out first."""
MISSING = "no such memory"
"""The ``detail`` of the service's 404 for a memory it does not hold (``get`` answers None for
it); a 404 with another detail (no such route: a wrong base URL, a proxy) is an error."""


RETRIABLE = frozenset({0, 408, 429, 502, 503, 504})
"""Statuses a call may succeed after: no reply (0), the body late (408: nothing of it was read),
overload (429), and a gateway's or the service's "not now" (502-504). The service answers a
refusal no retry mends (an ACL, a size limit), and a failure it did not foresee, with 500."""

After: TypeAlias = str | Sequence[str] | None
"""Read-your-writes tokens a caller passes as ``after=``: one, several, or none."""


class MnemostreamError(Exception):
    """The API refused or failed a call, or no reply came.

    Attributes:
        status: the HTTP status; 0 when no reply came (:class:`Unreachable`).
        detail: the reply's ``detail`` (its whole body when it has none; its text when not JSON).
        retriable: the same call may succeed later (no reply, 408, 429, 502, 503, 504; not a
            500, the service's refusal no retry mends, an ACL or a size limit, or a failure it
            did not foresee; nor other 5xx).
        retry_after_s: seconds the server asked to wait (its ``Retry-After``: 429, 503), or None.
        field: for a 422, the path of the field at fault (``memories[0].importance``), or None.
    """

    def __init__(
        self,
        status: int,
        detail: object,
        retry_after_s: float | None = None,
        field: str | None = None,
    ) -> None:
        self.status = status
        self.detail = detail
        self.retriable = status in RETRIABLE
        self.retry_after_s = retry_after_s
        self.field = field
        super().__init__(f"HTTP {status}: {detail}" if status else f"no reply: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled and copied as it is (an error raised in a process pool reaches the caller)."""
        return (_rebuilt, (type(self), self.__dict__, self.args))


def _rebuilt(
    kind: type[MnemostreamError], state: dict[str, Any], args: tuple[Any, ...]
) -> MnemostreamError:
    """An error :meth:`MnemostreamError.__reduce__` took apart, whole again (no ``__init__``)."""
    error = kind.__new__(kind)
    error.args = args
    error.__dict__.update(state)
    return error


class Overloaded(MnemostreamError):  # noqa: N818 - reads as "except Overloaded"
    """HTTP 429: the ranker's queue is full or the tenant's rate is spent; wait
    ``retry_after_s`` seconds (1 when the reply named none).
    """

    def __init__(self, detail: object, retry_after_s: float) -> None:
        super().__init__(429, detail, retry_after_s)


class Unreachable(MnemostreamError):  # noqa: N818 - reads as "except Unreachable"
    """No usable HTTP reply: the connection failed, broke or timed out, or the reply's body could
    not be decoded (a proxy's broken gzip) (``status`` 0, retriable). A write may have been
    applied all the same. Safe to send again: ``remember`` (ids derive from the
    content, or are the caller's: a repeat makes no other memory, though it counts one more
    write, ``write_count``), ``forget``, ``erase_user`` and every read. Not so: ``access`` (a
    repeat counts again) and ``update`` without ``at`` (the server dates each one: a repeat is
    another version; pass ``at`` to make a repeat the same version).
    """

    def __init__(self, error: Exception) -> None:
        super().__init__(0, f"{type(error).__name__}: {error}")


@contextlib.contextmanager
def _reached() -> Iterator[None]:
    """Raise the transport failures of httpx (no reply) and a reply it cannot decode as
    :class:`Unreachable`; a request httpx will not send as ValueError.
    """
    try:
        yield
    except httpx.UnsupportedProtocol as exc:  # a URL without http(s)://: no retry can help
        msg = f"the service's URL needs http:// or https://: {exc}"
        raise ValueError(msg) from exc
    except (httpx.LocalProtocolError, httpx.InvalidURL) as exc:  # httpx will not send it
        msg = f"not a request HTTP can carry: {exc}"  # nor will a retry
        raise ValueError(msg) from exc
    except httpx.RequestError as exc:  # transport, decoding, redirects: no reply to read
        raise Unreachable(exc) from exc


@dataclass(frozen=True)
class Memory:
    """A memory as the API returns it; ``scores`` only on recall results."""

    memory_id: str
    content: str
    memory_type: str
    state: str
    importance: float
    access_count: int
    recall_count: int
    created_at: str | None = None
    last_access: str | None = None
    valid_to: str | None = None
    superseded_by: str | None = None
    merged_into: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    user_id: str | None = None
    write_count: int = 0
    retention: float | None = None
    review_count: int = 0
    next_review: str | None = None
    tags: list[str] = field(default_factory=list)
    relations: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, body: dict[str, Any]) -> Memory:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in body.items() if k in names})


class History(list[dict[str, Any]]):
    """A memory's audit records in the order they were decided (a list of dicts: kind, reason,
    at, source, after; ``at`` is the event's time, which a late event puts before
    earlier records), with ``total``: how many the log holds of it, and ``truncated``: True when only the
    newest were returned (the service returns 10,000 at most).
    """

    total: int
    truncated: bool

    @classmethod
    def of(cls, reply: dict[str, Any]) -> History:
        """From the history route's answer."""
        history = cls(reply["events"])
        history.total = int(reply.get("total", len(history)))
        history.truncated = bool(reply.get("truncated", False))
        return history


class Recalled(list[Memory]):
    """A recall's memories, best first, with ``token``: the read-your-writes token of the
    accesses it recorded (None with ``track=False`` or when nothing was returned). This
    client's next read does not wait for it; pass it as ``after=`` to a read that must count
    them.
    """

    def __init__(self, memories: Iterable[Memory] = (), *, token: str | None = None) -> None:
        super().__init__(memories)
        self.token = token

    @classmethod
    def of(cls, reply: dict[str, Any]) -> Recalled:
        """From the recall route's answer."""
        return cls((Memory.of(r) for r in reply["results"]), token=_text(reply.get("token")))


class Erasure(int):
    """What ``forget`` did, as the number of data keys it erased (0 without ``erase``, and 0
    with it for words written in the clear by another producer: they stay in the log), with
    ``summaries_erased``: the consolidation summaries made from the memory, erased with it;
    ``copies_erased``: the memories holding its words, erased with it (duplicates consolidation
    merged into it, its versions with the same content); both empty without ``erase``. And
    ``token``, which this client's next read waits for.
    """

    summaries_erased: list[str]
    copies_erased: list[str]
    token: str | None

    def __new__(
        cls,
        keys_erased: int = 0,
        *,
        summaries_erased: Iterable[str] = (),
        copies_erased: Iterable[str] = (),
        token: str | None = None,
    ) -> Erasure:
        erasure = super().__new__(cls, keys_erased)
        erasure.summaries_erased = list(summaries_erased)
        erasure.copies_erased = list(copies_erased)
        erasure.token = token
        return erasure

    @classmethod
    def of(cls, reply: Any) -> Erasure:  # noqa: ANN401 - a JSON reply
        """From the delete route's answer (0 and nothing else from a server that does not say)."""
        return cls(_keys_erased(reply), **_erased_with(reply))


class UserErasure(list[str]):
    """The ids of the memories ``erase_user`` erased, with ``summaries_erased`` (summaries made
    from them that were not the user's), ``copies_erased`` (memories holding their words: one
    of another user is among them), ``keys_erased`` (data keys destroyed) and ``token``, which
    this client's next read waits for.
    """

    def __init__(
        self,
        memory_ids: Iterable[str] = (),
        *,
        keys_erased: int = 0,
        summaries_erased: Iterable[str] = (),
        copies_erased: Iterable[str] = (),
        token: str | None = None,
    ) -> None:
        super().__init__(memory_ids)
        self.keys_erased = keys_erased
        self.summaries_erased = list(summaries_erased)
        self.copies_erased = list(copies_erased)
        self.token = token

    @classmethod
    def of(cls, reply: dict[str, Any]) -> UserErasure:
        """From the user erasure route's answer."""
        ids = (str(m) for m in reply["memory_ids"])
        return cls(ids, keys_erased=_keys_erased(reply), **_erased_with(reply))


class _ErasedWith(TypedDict):
    summaries_erased: list[str]
    copies_erased: list[str]
    token: str | None


def _erased_with(reply: Any) -> _ErasedWith:  # noqa: ANN401 - a JSON reply
    """What an erasure's ``reply`` says went with it: summaries, copies, its token."""
    found = reply if isinstance(reply, dict) else {}
    return {
        "summaries_erased": [str(m) for m in found.get("summaries_erased") or ()],
        "copies_erased": [str(m) for m in found.get("copies_erased") or ()],
        "token": _text(found.get("token")),
    }


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class _Call:
    """One request: its JSON body is sent with every datetime in it as ISO 8601 text
    (:func:`_wire`), whichever call built it.
    """

    method: str
    path: str
    json: dict[str, Any] | None = None
    missing_ok: bool = False  # a 404 reply means None, not an error
    awaited: bool = True  # the reply's token is sent with the session's next read
    params: tuple[str, ...] = ()  # read-your-writes tokens of a GET or DELETE
    flags: tuple[tuple[str, str], ...] = ()  # other query parameters
    expects: tuple[str, ...] = ()  # what its reply holds (a reply without it is no API's)
    waited: bool = True  # the server waits for the tokens it sends (a write: only to check ids)

    def __post_init__(self) -> None:
        if self.json is not None:
            object.__setattr__(self, "json", _wire(self.json))

    @property
    def query(self) -> dict[str, list[str]]:
        """The whole query string (httpx replaces a query written into the path)."""
        out: dict[str, list[str]] = {}
        for name, value in self.flags:  # a name may repeat (tag=a&tag=b)
            out.setdefault(name, []).append(value)
        return {**out, "after": list(self.params)} if self.params else out


class _Session:
    """Read-your-writes for one client: the tokens of its writes and accesses since its last read;
    the next recall or get sends them (the server waits until the worker applied them), then they
    are dropped. Not a recall's token (the accesses a tracked recall recorded): the next recall
    would wait for the worker's access batch window (~0.1 s), back-to-back recalls each time.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.pending: list[str] = []  # folded into one by the server (:meth:`folding`)
        # the memory ids each pending token's writes wrote (:meth:`rewrites`); a fold's, those
        # of the tokens it folded
        self.written: dict[str, frozenset[str]] = {}
        self.lock = threading.Lock()  # threads may share a Client (its httpx.Client allows it)
        self.fold_at = FOLD_WHILE_WRITING  # raised past a failed fold, reset by a good one

    def after(self) -> list[str]:
        with self.lock:
            return list(self.pending)

    def folding(self, *, read: bool) -> _Call | None:
        """The call that folds the session's tokens into one (``POST /v1/tokens``), or None:
        before a read that would send more than :data:`FOLD_BEFORE_READ`, and before any call
        once the session holds more than :data:`FOLD_WHILE_WRITING` (more after a failed fold).
        Tokens are sealed: only the server can merge them, and a session of many writes would
        otherwise hold them all and send them with its next read.
        """
        pending = self.after()
        over = FOLD_BEFORE_READ if read else self.fold_at
        # the oldest MAX_AFTER at most: a request takes no more (a 422 naming them all)
        return _Api.fold(pending[:MAX_AFTER]) if len(pending) > over else None

    def fold_failed(self) -> None:
        """Note a fold the server refused (a ranker from before folds answers 404, one that
        cannot read the keys topic 503): the next fold before a call waits for
        :data:`FOLD_WHILE_WRITING` more tokens.
        """
        with self.lock:
            self.fold_at = len(self.pending) + FOLD_WHILE_WRITING

    def folded(self) -> None:
        with self.lock:
            self.fold_at = FOLD_WHILE_WRITING

    def rewrites(self, memories: Sequence[object]) -> list[str]:
        """The session's tokens whose writes wrote an id a write of ``memories`` gives (it sends
        them then: the server checks a given id against the memory it names; not applied yet,
        a rewrite under another scope was answered 200 and ignored by the worker).
        """
        given = {m.get("memory_id") for m in memories if isinstance(m, dict)}
        with self.lock:
            empty: frozenset[str] = frozenset()
            return [t for t in self.pending if not self.written.get(t, empty).isdisjoint(given)]

    def noted(self, call: _Call, result: Any) -> Any:  # noqa: ANN401
        token = result.get("token") if isinstance(result, dict) else None
        with self.lock:
            if self.enabled and call.awaited and isinstance(token, str):
                self.pending = list(dict.fromkeys([*self.pending, token]))
                if call.path == "/v1/tokens":  # a fold
                    folded = (self.written.get(t, frozenset()) for t in _sent(call))
                    self.written[token] = frozenset().union(*folded)
                else:  # a write's, an update's new version, a deletion's or an erasure's
                    self.written[token] = _touched(result)
            if call.waited:  # the server waited for them: this client's later reads need not
                self._drop(call)
        return result

    def answered(self, call: _Call, reply: httpx.Response) -> Any:  # noqa: ANN401
        """What ``reply`` means (:meth:`_Api.check`), noted. A 422 naming ``after`` drops the
        session's tokens it names: the server will never see them applied (the topics were made
        anew since), and every later read carrying them would be refused too. ``after[i]`` names
        one of those sent (a caller's own bad token drops none of the session's); ``after``, the
        one sent (for several it names them all at once, too many or too long: none is dropped).
        """
        try:
            result = _Api.check(reply, call)
        except MnemostreamError as exc:
            if exc.status == 422 and exc.field is not None:
                refused = _refused_tokens(call, exc.field)
                if refused:
                    with self.lock:
                        self.pending = [t for t in self.pending if t not in refused]
                        self._forget_written()
            raise
        return self.noted(call, result)

    def _drop(self, call: _Call) -> None:
        sent = set(_sent(call))
        if sent:
            self.pending = [t for t in self.pending if t not in sent]
            self._forget_written()

    def _forget_written(self) -> None:
        """Keep the ids of pending tokens only (under the lock)."""
        pending = set(self.pending)
        self.written = {t: ids for t, ids in self.written.items() if t in pending}


def _touched(reply: dict[str, Any]) -> frozenset[str]:
    """The memory ids a reply's token covers the writing or deleting of (``ids`` of a write,
    ``memory_id`` of an update's version or a deletion, ``memory_ids`` of a user's erasure;
    none for an access).
    """
    ids = [*(reply.get("ids") or ()), *(reply.get("memory_ids") or ())]
    if isinstance(reply.get("memory_id"), str):
        ids.append(reply["memory_id"])
    return frozenset(str(m) for m in ids)


def _sent(call: _Call) -> list[str]:
    """The read-your-writes tokens ``call`` sends, in order (the session's first)."""
    return list(call.params) or list((call.json or {}).get("after") or ())


def _refused_tokens(call: _Call, field: str) -> set[str]:
    """The tokens sent that a 422's ``field`` names: ``after[i]`` the i-th, ``after`` the one sent
    (for several, it names them all at once: too many, too long, none the token's own fault).
    """
    sent = _sent(call)
    named = re.fullmatch(r"after(?:\[(\d+)\])?", field)
    if named is None:
        return set()
    if named.group(1) is None:
        return set(sent) if len(sent) == 1 else set()
    index = int(named.group(1))
    return {sent[index]} if index < len(sent) else set()


LIST_FILTERS = frozenset(
    {
        "state",
        "memory_type",
        "tag",
        "agent_id",
        "session_id",
        "run_id",
        "user_id",
        "include_history",
    }
)
"""The filters ``list_memories`` takes (the list route's query parameters)."""
_CUT_SHORT = "the export stream ended before its closing line"
MAX_PAGE = 1000
"""The largest page the list route answers (its ``limit``)."""
MAX_AFTER = 1024
"""The most tokens the server takes in one ``after`` (``ranker.tokens.MAX_TOKENS``): a fold sends
the oldest this many."""
MAX_UNFOLDED = 128
"""The most tokens a read sends when their fold failed: a URL holds ~160 of the service's
(~400 characters each; httpx takes 64 KiB of query)."""
FOLD_BEFORE_READ = 8
"""A read sends the session's tokens folded into one by the server when it holds more than this."""
FOLD_WHILE_WRITING = 256
"""A session folds its tokens before its next call once they are more than this, whether a read
comes or not (memory, and the size of the fold's own body); after a fold that failed, once
this many more came."""


def _fold_binds(session: _Session, exc: MnemostreamError) -> bool:
    """True when a read cannot go on after its fold failed: the fold named a token (422: the
    read would be refused for it too; the session dropped it), or the session holds more tokens
    than a read sends unfolded (:data:`MAX_UNFOLDED`). Otherwise the read sends them unfolded.
    """
    return exc.status == 422 or len(session.after()) > MAX_UNFOLDED


def _tokens(after: After) -> list[str]:
    """A caller's own ``after``: one token, a list of them, or None."""
    if after is None:
        return []
    return [after] if isinstance(after, str) else list(after)


def _segment(text: str, name: str = "memory_id") -> str:
    """``text`` as one URL path segment: every reserved character escaped, and ``.`` or ``..``
    (which an HTTP client resolves away as a relative path) written as ``%2E`` each. ValueError
    naming the argument ``name`` for an empty one (the path then named another route, or none:
    a 307 or a 404 that said nothing of the id), TypeError for one that is not text.
    """
    if not isinstance(text, str):
        raise TypeError(f"{name}: expected text (str), not {type(text).__name__} {text!r}")
    if not text:
        raise ValueError(f"{name}: expected a non-empty id, not {text!r}")
    quoted = quote(text, safe="")
    return quoted.replace(".", "%2E") if quoted in {".", ".."} else quoted


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: a number of seconds or an HTTP date; None when
    there is none or it cannot be read.
    """
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _detail(reply: httpx.Response) -> object:
    """An error reply's ``detail``: the field of a JSON object, the whole JSON body when it is
    something else, the text when it is not JSON (a proxy's page).
    """
    try:
        body = reply.json()
    except ValueError:
        return reply.text
    return body.get("detail", body) if isinstance(body, dict) else body


def _field(reply: httpx.Response) -> str | None:
    """An error reply's ``field`` (a 422's path of the field at fault), or None."""
    try:
        body = reply.json()
    except ValueError:
        return None
    found = body.get("field") if isinstance(body, dict) else None
    return found if isinstance(found, str) else None


def _wire(value: Any, path: str = "") -> Any:  # noqa: ANN401  (any JSON body)
    """``value`` with every datetime in it, at any depth (``filters.created_from``), as ISO 8601
    text; anything else (already text, None, numbers) as it is. The one conversion of times:
    :class:`_Call` applies it to every body. TypeError for a date without a time of day,
    ValueError for NaN or infinity, each naming the body's field at ``path``
    (``memories[0].importance``): JSON has neither, and the error came from the encoder, naming
    nothing.
    """
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        msg = f"{path or 'body'}: {value!r} has no time of day: pass a datetime with a timezone"
        raise TypeError(msg)
    if isinstance(value, float):
        return _finite(value, path)
    if isinstance(value, dict):
        return {k: _wire(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, set | frozenset):  # tags given as a set: sent in one order
        return [_wire(v, f"{path}[{i}]") for i, v in enumerate(_listed(value))]
    if isinstance(value, list | tuple):
        if all(type(v) is float for v in value):  # a vector: a pass of type checks
            if not all(map(math.isfinite, value)):
                bad = next(i for i, v in enumerate(value) if not math.isfinite(v))
                _finite(value[bad], f"{path}[{bad}]")
            return value
        return [_wire(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "tolist") and not isinstance(value, str | bytes | int | float):
        return _wire(value.tolist(), path)  # a numpy array or scalar (a float32 embedding)
    return value


def _finite(value: float, path: str) -> float:
    """``value``, or ValueError naming ``path`` when it is NaN or infinite."""
    if not math.isfinite(value):
        raise ValueError(f"{path or 'body'}: {value} is not a number JSON can carry")
    return value


def _flag(name: str, value: object) -> str:
    """A bool argument as a query's ``true``/``false``; TypeError for anything else (the text
    ``"false"`` of a setting read as truthy: ``forget(m, purge="false")`` purged it).
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, not {value!r}")
    return "true" if value else "false"


def _ids(memory_ids: Sequence[str]) -> list[str]:
    """Memory ids as a list; TypeError for one id given as a str (its characters were sent as
    ids: an access counted against other memories).
    """
    if isinstance(memory_ids, str):
        msg = f"memory_ids: a list of ids, not one str ({memory_ids!r}: pass [{memory_ids!r}])"
        raise TypeError(msg)
    return list(memory_ids)


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def _listed(value: Any) -> list[Any]:  # noqa: ANN401  (a filter's value)
    """A list filter's values: a list, tuple or set (sorted) as its items, anything else as one."""
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return list(value) if isinstance(value, list | tuple) else [value]


class _Api:
    """Every call once: what to send, and what the reply means. No I/O."""

    @staticmethod
    def remember(content: str, session: Sequence[str] = (), **fields: Any) -> _Call:  # noqa: ANN401
        """``fields["after"]``: tokens the server waits for before it checks a given id;
        ``session``: the session's, sent first (:meth:`_Session.rewrites`).
        """
        after = fields.pop("after", None)
        return _Api.remember_many([{"content": content, **fields}], after, session)

    @staticmethod
    def fold(tokens: Sequence[str]) -> _Call:
        return _Call("POST", "/v1/tokens", {"after": list(tokens)}, expects=("token",))

    @staticmethod
    def remember_many(
        memories: Sequence[dict[str, Any]], after: After = None, session: Sequence[str] = ()
    ) -> _Call:
        """The server waits for ``after`` (``session``'s tokens first) only when a memory gives
        its ``memory_id``: then they are waited for (dropped from the session).
        """
        for i, m in enumerate(memories):
            if not isinstance(m, dict):
                raise TypeError(f"memories[{i}]: expected a dict with content, not {m!r}")
        docs = [_drop_none(m) for m in memories]
        after = [*session, *_tokens(after)]
        body = _drop_none({"memories": docs, "after": after or None})
        given = any("memory_id" in d for d in docs)
        return _Call("POST", "/v1/memories", body, expects=("ids",), waited=given)

    @staticmethod
    def recall(
        query: str | None,
        vector: Sequence[float] | None,
        k: int,
        session: Sequence[str],
        **options: Any,  # noqa: ANN401
    ) -> _Call:
        """``session``: the session's tokens; ``options["after"]``: the caller's, sent too."""
        mine = _tokens(options.pop("after", None))
        body: dict[str, Any] = {
            "query": query,
            "vector": list(vector) if vector is not None else None,
            "k": k,
            **options,
            "after": [*session, *mine] or None,
        }
        return _Call("POST", "/v1/recall", _drop_none(body), awaited=False, expects=("results",))

    @staticmethod
    def archive_search(
        query: str | None,
        vector: Sequence[float] | None,
        k: int,
        session: Sequence[str],
        **options: Any,  # noqa: ANN401
    ) -> _Call:
        """A recall's body to the archive (archived memories only; never tracked, so a ``track``
        option is a TypeError rather than a flag the server would ignore).
        """
        if "track" in options:
            raise TypeError("archive_search: an archive search is never tracked (no track option)")
        return replace(_Api.recall(query, vector, k, session, **options), path="/v1/archive/search")

    @staticmethod
    def access(memory_ids: Sequence[str], kind: str, at: datetime | str | None) -> _Call:
        body = {"memory_ids": _ids(memory_ids), "kind": kind, "at": at}
        return _Call("POST", "/v1/access", _drop_none(body), expects=("accepted",))

    @staticmethod
    def get(memory_id: str, after: Sequence[str], track: bool = True) -> _Call:
        path = f"/v1/memories/{_segment(memory_id)}"
        flags = () if _flag("track", track) == "true" else (("track", "false"),)
        return _Call(
            "GET",
            path,
            missing_ok=True,
            awaited=False,  # its access's token: as a recall's, not one a read waits for
            params=tuple(after),
            flags=flags,
            expects=("memory_id",),
        )

    @staticmethod
    def get_many(memory_ids: Sequence[str], after: Sequence[str]) -> _Call:
        body = {"memory_ids": _ids(memory_ids), "after": list(after) or None}
        return _Call("POST", "/v1/memories/get", _drop_none(body), expects=("memories",))

    @staticmethod
    def forget(memory_id: str, purge: bool, after: Sequence[str], erase: bool = False) -> _Call:
        flags: tuple[tuple[str, str], ...] = (("purge", _flag("purge", purge)),)
        if _flag("erase", erase) == "true":
            flags += (("erase", "true"),)
        path = f"/v1/memories/{_segment(memory_id)}"
        return _Call("DELETE", path, params=tuple(after), flags=flags)

    @staticmethod
    def erase_user(user_id: str, after: Sequence[str]) -> _Call:
        path = f"/v1/users/{_segment(user_id, 'user_id')}"
        return _Call("DELETE", path, params=tuple(after), expects=("memory_ids",))

    @staticmethod
    def end_session(
        session_id: str | None,
        after: Sequence[str],
        at: datetime | str | None,
        **scope: str | None,
    ) -> _Call:
        """``scope``: ``run_id`` (mem0's name for the session), ``user_id``, ``agent_id``."""
        body = {
            "session_id": session_id,
            **scope,
            "at": at,
            "after": list(after) or None,
        }
        return _Call("POST", "/v1/sessions/end", _drop_none(body), expects=("promoted",))

    @staticmethod
    def update(memory_id: str, changes: dict[str, Any], session: Sequence[str]) -> _Call:
        """``session``: the session's tokens; ``changes["after"]``: the caller's, sent too."""
        mine = _tokens(changes.get("after"))
        body = _drop_none({**changes, "after": [*session, *mine] or None})
        return _Call("PATCH", f"/v1/memories/{_segment(memory_id)}", body, expects=("memory_id",))

    @staticmethod
    def page(
        filters: dict[str, Any], limit: int, cursor: str | None, after: Sequence[str]
    ) -> _Call:
        """``filters``: :data:`LIST_FILTERS`; another name is a TypeError before the request is sent
        (``limit`` too: it is ``page_size``; an older server ignored a query parameter it did not
        know: a misspelt filter listed all; a server now answers 422).
        """
        try:
            size = -1 if isinstance(limit, bool) else operator.index(limit)  # numpy's ints too
        except TypeError:
            size = -1
        if not 1 <= size <= MAX_PAGE:
            # the server's 422 named its query parameter, limit, which no caller wrote
            raise ValueError(f"page_size: expected an int of 1-{MAX_PAGE}, not {limit!r}")
        limit = size
        unknown = sorted(set(filters) - LIST_FILTERS)
        if unknown:
            known = ", ".join(sorted(LIST_FILTERS))
            hint = " (the page's size is page_size)" if unknown[0] == "limit" else ""
            raise TypeError(
                f"list_memories: unknown filter {unknown[0]!r}{hint} (filters: {known})"
            )
        flags = [
            (name, str(v).lower() if isinstance(v, bool) else str(v))
            for name, value in {**filters, "limit": limit}.items()
            if value is not None
            for v in _listed(value)
        ]
        if cursor is not None:
            flags.append(("cursor", cursor))
        return _Call(
            "GET",
            "/v1/memories",
            params=tuple(after),
            flags=tuple(flags),
            expects=("memories", "cursor"),
        )

    @staticmethod
    def history(memory_id: str, after: Sequence[str]) -> _Call:
        path = f"/v1/memories/{_segment(memory_id)}/history"
        return _Call("GET", path, params=tuple(after), expects=("events",))

    @staticmethod
    def export(vectors: bool, after: Sequence[str]) -> _Call:
        flags = (("vectors", _flag("vectors", vectors)),)
        return _Call("GET", "/v1/export", params=tuple(after), flags=flags)

    @staticmethod
    def check(reply: httpx.Response, call: _Call) -> Any:  # noqa: ANN401
        if reply.status_code == 404 and call.missing_ok and _detail(reply) == MISSING:
            return None  # the route's answer; a 404 of no route (a wrong base URL) is an error
        if not reply.is_success:  # a 3xx too: a proxy's redirect is no answer of the API
            wait = _retry_after(reply.headers.get("Retry-After"))
            if reply.status_code == 429:
                raise Overloaded(_detail(reply), 1.0 if wait is None else wait)
            raise MnemostreamError(reply.status_code, _detail(reply), wait, _field(reply))
        try:
            body = reply.json()
        except ValueError as exc:  # a proxy's page, or a body cut short
            raise MnemostreamError(
                reply.status_code, f"not a JSON reply: {reply.text[:200]}"
            ) from exc
        missing = [] if isinstance(body, dict) else ["JSON object"]
        missing = missing or [f"{key!r}" for key in call.expects if key not in body]
        if missing:  # a proxy's, not ours: it escaped as a bare KeyError or TypeError
            msg = f"not a reply of the API (no {missing[0]}): {reply.text[:200]}"
            raise MnemostreamError(reply.status_code, msg)
        return body


class _Export:
    r"""An export stream's memories as its text comes, for both clients: lines end at ``\n``
    only (U+2028, U+2029 and U+0085, which httpx's line iterators also split at, may stand inside
    a memory's JSON), and the closing ``{"end": true, ...}`` line sets :attr:`ended`. A line that
    is not a JSON object is a MnemostreamError (502).
    """

    def __init__(self) -> None:
        self.rest = ""
        self.ended = False

    def feed(self, text: str) -> list[dict[str, Any]]:
        """The memories ``text`` completes (none once ended)."""
        *lines, self.rest = (self.rest + text).split("\n")
        docs: list[dict[str, Any]] = []
        for line in lines:
            if self.ended or not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise MnemostreamError(502, f"not a JSON line in the export: {line[:200]}") from exc
            if not isinstance(doc, dict):
                raise MnemostreamError(502, f"not a JSON object in the export: {line[:200]}")
            if doc.get("end") is True:
                self.ended = True
            else:
                docs.append(doc)
        return docs

    def close(self) -> list[dict[str, Any]]:
        """The memories of a last line without its newline; MnemostreamError (502) when the
        stream ended before its closing line.
        """
        docs = self.feed("\n")
        if not self.ended:
            raise MnemostreamError(502, _CUT_SHORT)
        return docs


def _keys_erased(reply: Any) -> int:  # noqa: ANN401 - a JSON reply
    """A delete's ``keys_erased`` (0 from a server that does not say)."""
    found = reply.get("keys_erased") if isinstance(reply, dict) else None
    return found if isinstance(found, int) else 0


def _timeout(timeout_s: object) -> float | None:
    """``timeout_s`` as httpx takes it: seconds > 0, or None for no limit. ValueError otherwise
    (0, meant as "no limit", failed every call as a retriable Unreachable: a retry loop spun).
    """
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise TypeError(f"timeout_s: expected seconds or None, not {timeout_s!r}")
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise ValueError(f"timeout_s: expected seconds > 0 (None: no limit), not {timeout_s!r}")
    return float(timeout_s)


def _base_url(base_url: object) -> str | httpx.URL:
    """``base_url`` as given (text or an ``httpx.URL``); ValueError naming it unless it is an
    http:// or https:// URL with a host (one without was refused only at the first call, by
    httpx, or failed every call as a retriable Unreachable: a retry loop spun).
    """
    if not isinstance(base_url, str | httpx.URL):
        raise TypeError(
            f"base_url: expected the service's URL (a str or an httpx.URL), not {base_url!r}"
        )
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"base_url: not a URL: {base_url!r} ({exc})") from exc
    if url.scheme not in ("http", "https") or not url.host:
        why = "needs http:// or https:// and a host"
        raise ValueError(f"base_url: the service's URL {why}, not {str(base_url)!r}")
    return base_url


def _rewrite_tokens(session: _Session, memories: Sequence[object], after: After) -> list[str]:
    """What a rewrite sends of ``session``'s tokens beside the caller's ``after``: those whose
    writes wrote its ids, then the newest others that fit in one request. ValueError naming
    ``after`` when even the first do not fit (the check would not see this client's write).
    """
    touching = session.rewrites(memories)
    room = MAX_AFTER - len(_tokens(after)) - len(touching)
    if room < 0:
        raise ValueError(
            f"after: {len(_tokens(after))} tokens leave no room for the {len(touching)} of this"
            f" session that wrote these ids (a request takes {MAX_AFTER} at most)"
        )
    others = [t for t in session.after() if t not in touching]
    return [*touching, *(others[-room:] if room else [])]


def _parts(tokens: Sequence[str]) -> list[list[str]]:
    """``tokens`` in runs of :data:`MAX_AFTER` at most, as one fold takes them."""
    return [list(tokens[i : i + MAX_AFTER]) for i in range(0, len(tokens), MAX_AFTER)]


def _headers(api_key: object) -> dict[str, str]:
    """The key's header; the key without the whitespace around it (a key read from a file or a
    Secret ends with a newline, which no header may hold: httpx refused every call). ValueError
    for a key that still holds a control character, TypeError for one that is no str (an unset
    setting's None).
    """
    if not isinstance(api_key, str):
        msg = f"api_key: expected the tenant's key as a str, not {type(api_key).__name__}"
        raise TypeError(msg)
    key = api_key.strip()
    if not key or any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        msg = "api_key: expected the tenant's key (printable, without control characters)"
        raise ValueError(msg)
    return {"Authorization": f"Bearer {key}"}


class Client:
    """Synchronous client. ``transport`` is for tests and custom networking (httpx transports)."""

    def __init__(
        self,
        base_url: str | httpx.URL,
        api_key: str,
        *,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        read_your_writes: bool = True,
    ) -> None:
        """``read_your_writes``: a recall or get sees every write and access this client made
        before it (the server waits for them to be applied). ``timeout_s``: per request, seconds
        > 0 (None: no limit); keep it above the server's ``MNEMO_AFTER_TIMEOUT_S``. A call that
        gets no reply raises :class:`Unreachable`.
        """
        self._http = httpx.Client(
            base_url=_base_url(base_url),
            headers=_headers(api_key),
            timeout=_timeout(timeout_s),
            transport=transport,
        )
        self._session = _Session(read_your_writes)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call) -> Any:  # noqa: ANN401
        self._fold(read=False)  # before the call: nothing can cost the call's own answer
        return self._request(call)

    def _request(self, call: _Call) -> Any:  # noqa: ANN401
        with _reached():
            reply = self._http.request(call.method, call.path, json=call.json, params=call.query)
        return self._session.answered(call, reply)

    def _after(self, after: After = None) -> list[str]:
        """The session's tokens for a read, folded first when there are many, then the caller's
        own ``after``.
        """
        self._fold(read=True)
        return [*self._session.after(), *_tokens(after)]

    def token(self) -> str | None:
        """One read-your-writes token covering this client's writes and explicit accesses
        (``access``; not a tracked recall's or get's) that no read of it has waited for yet, for
        another client (another process) to pass as ``after=``; None
        when there are none (or the client was made with ``read_your_writes=False``). Several
        are folded into one by the server (``POST /v1/tokens``; raises as a fold does: 404 from a
        ranker without that route); this client's next read still waits for them.
        """
        tokens = self._session.after()  # one snapshot: another thread may write meanwhile
        while len(tokens) > 1:
            tokens = [p[0] if len(p) == 1 else self._folded(p) for p in _parts(tokens)]
            self._session.folded()
        return tokens[0] if tokens else None

    def _folded(self, tokens: list[str]) -> str:
        return str(self._request(_Api.fold(tokens))["token"])

    def _fold(self, *, read: bool) -> None:
        """Fold the session's tokens while :meth:`_Session.folding` says so. A failed fold is a
        read's error only when the read cannot go on without it (:func:`_fold_binds`); otherwise
        the tokens go unfolded.
        """
        while (folding := self._session.folding(read=read)) is not None:
            try:
                self._request(folding)
            except MnemostreamError as exc:
                self._session.fold_failed()
                if read and _fold_binds(self._session, exc):
                    raise
                return
            self._session.folded()

    def remember(self, content: str, **fields: Any) -> str:  # noqa: ANN401
        """Write one memory (importance, memory_type, tags, metadata, at, embedding...); its id.
        ``after``: tokens the server waits for before it checks a given ``memory_id`` against the
        memory it names (409: another scope's), such as a deletion's from ``token()``. A
        ``memory_id`` this client wrote, updated, deleted or erased and has not read since sends
        the session's tokens too
        (the check then sees that write: a rewrite under another scope is a 409, not a 200 the
        worker ignores).
        """
        session = self._rewrite_tokens([fields], fields.get("after"))
        return str(self._send(_Api.remember(content, session, **fields))["ids"][0])

    def remember_many(
        self, memories: Sequence[dict[str, Any]], *, after: After = None
    ) -> list[str]:
        """Write many memories (dicts with ``content`` and optional fields) in one call; their ids.
        ``after`` (as for ``remember``): tokens the check of a given ``memory_id`` waits for.
        """
        session = self._rewrite_tokens(memories, after)
        return [str(i) for i in self._send(_Api.remember_many(memories, after, session))["ids"]]

    def _rewrite_tokens(self, memories: Sequence[object], after: After) -> list[str]:
        """The session's tokens a write of ``memories`` sends (none unless it gives an id a
        pending write of the session wrote), folded first as before any call (a failed fold
        does not fail the write): those that wrote its ids, then the newest others that fit
        beside the caller's ``after`` (:func:`_rewrite_tokens`).
        """
        if not self._session.rewrites(memories):
            return []
        self._fold(read=False)
        return _rewrite_tokens(self._session, memories, after)

    def recall(
        self,
        query: str | None = None,
        *,
        vector: Sequence[float] | None = None,
        k: int = 10,
        **options: Any,  # noqa: ANN401
    ) -> Recalled:
        """The best ``k`` memories; options: filters, preset, weights, mmr_lambda, min_score,
        graphrag, at, track, include_history, after (tokens of another client's writes). With
        ``track`` (the default) the recall counts as an access of each memory returned; this
        client's next read does not wait for those accesses to be applied (the list's ``token``
        covers them, for a read that must).
        """
        call = _Api.recall(query, vector, k, self._after(), **options)
        return Recalled.of(self._send(call))

    def archive_search(
        self,
        query: str | None = None,
        *,
        vector: Sequence[float] | None = None,
        k: int = 10,
        **options: Any,  # noqa: ANN401
    ) -> list[Memory]:
        """The best ``k`` archived memories (``POST /v1/archive/search``: a recall over the
        archive alone, scored as recall scores them, no soft delete, never tracked); the options
        of :meth:`recall` but ``track``.
        """
        call = _Api.archive_search(query, vector, k, self._after(), **options)
        return [Memory.of(r) for r in self._send(call)["results"]]

    def access(
        self, memory_ids: Sequence[str], kind: str = "explicit", at: datetime | str | None = None
    ) -> int:
        """Report accesses; returns how many were accepted."""
        return int(self._send(_Api.access(memory_ids, kind, at))["accepted"])

    def get(self, memory_id: str, *, track: bool = True, after: After = None) -> Memory | None:
        """One memory, or None when this tenant has none with that id. With ``track`` (the
        default) the read counts as an access of kind ``get`` (SPEC section 5: an archived
        memory comes back); the memory shown is as it was before that access.
        """
        found = self._send(_Api.get(memory_id, self._after(after), track))
        return Memory.of(found) if found is not None else None

    def get_many(self, memory_ids: Sequence[str], *, after: After = None) -> dict[str, Memory]:
        """Memories by id (any state); ids this tenant has none of are absent."""
        found = self._send(_Api.get_many(memory_ids, self._after(after)))
        return {m["memory_id"]: Memory.of(m) for m in found["memories"]}

    def forget(
        self,
        memory_id: str,
        *,
        purge: bool = False,
        erase: bool = False,
        after: After = None,
    ) -> Erasure:
        """Delete a memory (recall never returns it; ``purge``: get no longer finds it either;
        ``erase``: its words are destroyed for good, in the log too, and the summaries and
        copies holding them). Returns an :class:`Erasure`: the data keys erased (an int: 0
        without ``erase``, and 0 with it for words written in the clear by another producer:
        they stay in the log), with the summaries and copies erased with it. Raises
        MnemostreamError (404) when this tenant has no such memory.
        """
        call = _Api.forget(memory_id, purge, self._after(after), erase)
        return Erasure.of(self._send(call))

    def erase_user(self, user_id: str, *, after: After = None) -> UserErasure:
        """Erase every memory of ``user_id`` (as ``forget(erase=True)`` does one); their ids, as
        a :class:`UserErasure` (a list) saying what was erased with them.
        """
        return UserErasure.of(self._send(_Api.erase_user(user_id, self._after(after))))

    def end_session(
        self,
        session_id: str | None = None,
        *,
        run_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        at: datetime | str | None = None,
        after: After = None,
    ) -> list[str]:
        """A session (``session_id``, or mem0's ``run_id``) ended (SPEC sections 5 and 7): its
        active working memories created by ``at`` move to episodic now, not after hours idle;
        the ids sent that promotion. ``at`` left out: now, or the session's last access when
        later. ``user_id``, ``agent_id``: only theirs of the session. The server first waits
        for this client's writes and accesses and ``after``, and for every write it holds when
        the end arrives, any client's, so the session's last words are among them (any
        tenant's: behind a backlog, a retriable 503).
        """
        call = _Api.end_session(
            session_id, self._after(after), at, run_id=run_id, user_id=user_id, agent_id=agent_id
        )
        return [str(m) for m in self._send(call)["promoted"]]

    def update(self, memory_id: str, **changes: Any) -> str:  # noqa: ANN401
        """Write a new version of a memory (content, tags, metadata, importance, at...: the rest
        is kept) that supersedes it from ``at`` on; the new version's id. MnemostreamError 404
        (no such memory) or 409 (deleted or already superseded; but the same update with its
        ``at`` sent again once applied returns that version's id).
        """
        call = _Api.update(memory_id, changes, self._after())
        return str(self._send(call)["memory_id"])

    def list_memories(
        self,
        *,
        page_size: int = 100,
        after: After = None,
        **filters: Any,  # noqa: ANN401
    ) -> Iterator[Memory]:
        """The memories matching ``filters`` (state, memory_type, tag, agent_id, session_id or
        run_id, user_id, include_history; by default active and archived ones, current versions
        only), in id order, fetched ``page_size`` at a time as the iterator advances. Another
        filter name is a TypeError (:data:`LIST_FILTERS`), raised at the first step.
        """
        cursor: str | None = None
        while True:
            call = _Api.page(filters, page_size, cursor, self._after(after))
            found = self._send(call)
            yield from (Memory.of(m) for m in found["memories"])
            cursor = found["cursor"]
            if cursor is None:
                return

    def history(self, memory_id: str, *, after: After = None) -> History:
        """Every decision about a memory, in the order decided (:class:`History`: the newest 10,000,
        with ``total`` and ``truncated`` saying whether older ones were left out).
        """
        return History.of(self._send(_Api.history(memory_id, self._after(after))))

    def export(self, *, vectors: bool = False, after: After = None) -> Iterator[dict[str, Any]]:
        """Every memory of the tenant (any state but purged, superseded versions too) as dicts,
        streamed; ``vectors`` adds each one's ``embedding``.
        """
        call = _Api.export(vectors, self._after(after))
        with _reached(), self._http.stream(call.method, call.path, params=call.query) as reply:
            if not reply.is_success:
                reply.read()
                self._session.answered(call, reply)
            self._session.noted(call, None)  # the server waited for the tokens sent
            export = _Export()
            for text in reply.iter_text():
                yield from export.feed(text)
                if export.ended:
                    return
            yield from export.close()


class AsyncClient:
    """Asynchronous client, the same calls as :class:`Client`."""

    def __init__(
        self,
        base_url: str | httpx.URL,
        api_key: str,
        *,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
        read_your_writes: bool = True,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=_base_url(base_url),
            headers=_headers(api_key),
            timeout=_timeout(timeout_s),
            transport=transport,
        )
        self._session = _Session(read_your_writes)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:  # noqa: ANN401
        await self._fold(read=False)
        return await self._request(call)

    async def _request(self, call: _Call) -> Any:  # noqa: ANN401
        with _reached():
            reply = await self._http.request(
                call.method, call.path, json=call.json, params=call.query
            )
        return self._session.answered(call, reply)

    async def _after(self, after: After = None) -> list[str]:
        await self._fold(read=True)
        return [*self._session.after(), *_tokens(after)]

    async def token(self) -> str | None:
        tokens = self._session.after()
        while len(tokens) > 1:
            tokens = [p[0] if len(p) == 1 else await self._folded(p) for p in _parts(tokens)]
            self._session.folded()
        return tokens[0] if tokens else None

    async def _folded(self, tokens: list[str]) -> str:
        return str((await self._request(_Api.fold(tokens)))["token"])

    async def _fold(self, *, read: bool) -> None:
        while (folding := self._session.folding(read=read)) is not None:
            try:
                await self._request(folding)
            except MnemostreamError as exc:
                self._session.fold_failed()
                if read and _fold_binds(self._session, exc):
                    raise
                return
            self._session.folded()

    async def remember(self, content: str, **fields: Any) -> str:  # noqa: ANN401
        session = await self._rewrite_tokens([fields], fields.get("after"))
        return str((await self._send(_Api.remember(content, session, **fields)))["ids"][0])

    async def remember_many(
        self, memories: Sequence[dict[str, Any]], *, after: After = None
    ) -> list[str]:
        session = await self._rewrite_tokens(memories, after)
        call = _Api.remember_many(memories, after, session)
        return [str(i) for i in (await self._send(call))["ids"]]

    async def _rewrite_tokens(self, memories: Sequence[object], after: After) -> list[str]:
        if not self._session.rewrites(memories):
            return []
        await self._fold(read=False)
        return _rewrite_tokens(self._session, memories, after)

    async def recall(
        self,
        query: str | None = None,
        *,
        vector: Sequence[float] | None = None,
        k: int = 10,
        **options: Any,  # noqa: ANN401
    ) -> Recalled:
        call = _Api.recall(query, vector, k, await self._after(), **options)
        return Recalled.of(await self._send(call))

    async def archive_search(
        self,
        query: str | None = None,
        *,
        vector: Sequence[float] | None = None,
        k: int = 10,
        **options: Any,  # noqa: ANN401
    ) -> list[Memory]:
        call = _Api.archive_search(query, vector, k, await self._after(), **options)
        return [Memory.of(r) for r in (await self._send(call))["results"]]

    async def access(
        self, memory_ids: Sequence[str], kind: str = "explicit", at: datetime | str | None = None
    ) -> int:
        return int((await self._send(_Api.access(memory_ids, kind, at)))["accepted"])

    async def get(
        self, memory_id: str, *, track: bool = True, after: After = None
    ) -> Memory | None:
        found = await self._send(_Api.get(memory_id, await self._after(after), track))
        return Memory.of(found) if found is not None else None

    async def get_many(
        self, memory_ids: Sequence[str], *, after: After = None
    ) -> dict[str, Memory]:
        found = await self._send(_Api.get_many(memory_ids, await self._after(after)))
        return {m["memory_id"]: Memory.of(m) for m in found["memories"]}

    async def forget(
        self,
        memory_id: str,
        *,
        purge: bool = False,
        erase: bool = False,
        after: After = None,
    ) -> Erasure:
        call = _Api.forget(memory_id, purge, await self._after(after), erase)
        return Erasure.of(await self._send(call))

    async def erase_user(self, user_id: str, *, after: After = None) -> UserErasure:
        call = _Api.erase_user(user_id, await self._after(after))
        return UserErasure.of(await self._send(call))

    async def end_session(
        self,
        session_id: str | None = None,
        *,
        run_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        at: datetime | str | None = None,
        after: After = None,
    ) -> list[str]:
        after_ = await self._after(after)
        call = _Api.end_session(
            session_id, after_, at, run_id=run_id, user_id=user_id, agent_id=agent_id
        )
        return [str(m) for m in (await self._send(call))["promoted"]]

    async def update(self, memory_id: str, **changes: Any) -> str:  # noqa: ANN401
        call = _Api.update(memory_id, changes, await self._after())
        return str((await self._send(call))["memory_id"])

    async def list_memories(
        self,
        *,
        page_size: int = 100,
        after: After = None,
        **filters: Any,  # noqa: ANN401
    ) -> AsyncIterator[Memory]:
        cursor: str | None = None
        while True:
            call = _Api.page(filters, page_size, cursor, await self._after(after))
            found = await self._send(call)
            for m in found["memories"]:
                yield Memory.of(m)
            cursor = found["cursor"]
            if cursor is None:
                return

    async def history(self, memory_id: str, *, after: After = None) -> History:
        return History.of(await self._send(_Api.history(memory_id, await self._after(after))))

    async def export(
        self, *, vectors: bool = False, after: After = None
    ) -> AsyncIterator[dict[str, Any]]:
        call = _Api.export(vectors, await self._after(after))
        with _reached():
            async with self._http.stream(call.method, call.path, params=call.query) as reply:
                if not reply.is_success:
                    await reply.aread()
                    self._session.answered(call, reply)
                self._session.noted(call, None)  # the server waited for the tokens sent
                export = _Export()
                async for text in reply.aiter_text():
                    for doc in export.feed(text):
                        yield doc
                    if export.ended:
                        return
                for doc in export.close():
                    yield doc


def _same_docs() -> None:
    """:class:`AsyncClient`'s methods say what :class:`Client`'s say (the same calls)."""
    for name, method in vars(Client).items():
        twin = vars(AsyncClient).get(name)
        if callable(method) and twin is not None and twin.__doc__ is None:
            twin.__doc__ = method.__doc__


_same_docs()
