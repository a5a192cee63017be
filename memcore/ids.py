"""Identifiers: normalised content, content hashes, derived memory ids, state keys."""

from __future__ import annotations

import hashlib
import re
import unicodedata

from memcore.errors import InvalidField

_ID_RE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
)  # fullmatch: "$" would pass a final newline
_SPACE_RE = re.compile(r"\s+")


def normalise_content(text: str) -> str:
    """NFKC, whitespace runs collapsed to one space, ends stripped. Case is kept: it can carry meaning."""
    return _SPACE_RE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def indexed_text(content: str, context: str | None) -> str:
    """What is embedded and keyword-indexed for a memory: its ``context`` (words the writer gives
    to find it by, e.g. the date, the speaker or the previous turn of a conversation) then its
    content. Recall returns the content alone.
    """
    return f"{context}\n{content}" if context else content


def content_hash(text: str) -> str:
    """SHA-256 (hex) of the normalised content: equal for texts that differ only in spacing."""
    return hashlib.sha256(normalise_content(text).encode("utf-8")).hexdigest()


def derive_memory_id(
    tenant_id: str,
    text: str,
    agent_id: str | None = None,
    session_id: str | None = None,
    user_id: str | None = None,
) -> str:
    """The id of a memory whose writer gave none: same tenant, scope and content -> same id. The
    scope is the writer's ``agent_id``, ``session_id`` (a run) and ``user_id``: the same sentence
    from two agents, or about two users, is two memories. Without a scope the id is the tenant's
    and content's alone (as before scopes existed, so older ids stay valid); ``user_id`` joins the
    scope only when given, so ids scoped by agent or session alone are those from before it.
    """
    check_id("tenant_id", tenant_id)
    scope = f"{agent_id or ''}\x00{session_id or ''}\x00" if agent_id or session_id else ""
    if user_id:
        scope += f"user:{user_id}\x00"
    digest = hashlib.sha256(f"{tenant_id}\x00{scope}{normalise_content(text)}".encode())
    return f"m-{digest.hexdigest()[:32]}"


def check_id(field: str, value: object) -> str:
    """Return ``value`` if it is a valid tenant or memory id: 1-128 of ``A-Za-z0-9._:-``, the
    first a letter or digit, no ``/``.
    """
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        why = "expected 1-128 characters of A-Z a-z 0-9 . _ : -, the first a letter or digit"
        raise InvalidField(field, value, f"{why} (no '/')")
    return value


def state_key(tenant_id: str, memory_id: str) -> str:
    """The Kafka key and table key of a memory: ``tenant_id/memory_id``."""
    return f"{check_id('tenant_id', tenant_id)}/{check_id('memory_id', memory_id)}"


def split_key(key: str) -> tuple[str, str]:
    """Inverse of :func:`state_key`; raises InvalidField for a malformed key."""
    tenant_id, sep, memory_id = key.partition("/")
    if not sep:
        raise InvalidField("key", key, "expected tenant_id/memory_id")
    return check_id("tenant_id", tenant_id), check_id("memory_id", memory_id)
