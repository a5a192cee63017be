"""Read-your-writes tokens as clients see them: sealed, and bound to the tenant they were issued to.

A :class:`~ranker.applied.Token` names offsets of the shared topics. In the clear, two of one
tenant's tokens would tell it how many records all other tenants produced between them, and a
forged one would probe where a partition ends. A client therefore gets
``v2.<key id>.<base64url(salt + nonce + AES-256-GCM(offsets))>``, the tenant's id as associated
data: it can neither read nor alter nor forge one, and a token issued to one tenant opens for no
other. Each token is sealed under a key of its own, derived (HKDF-SHA256) from the service's key
and the token's random 16-byte salt: random 96-bit nonces under one AES-GCM key stay safe for
2^32 messages only (~50 days at 1,000 writes/s), after which the service's key would need
rotating; with a key per token nothing wears out (two tokens share a key only if their salts
collide, ~2^-64 after 2^32 tokens).

The key is the service's own, kept on the ``memory-keys`` topic (which only the worker and the
ranker may read, :mod:`storage.key_log`) under a tenant id no tenant can have (ids have at least
one character): every ranker, replicas and restarts included, opens the tokens any of them
issued, with nothing to configure. A ranker seals with the key the topic already holds (the
lowest id when several), or mints one; two rankers started together on an empty topic may mint
one each, and each opens both. A ranker takes the key in the background from its start-up on
(:meth:`TokenSeal.start`; ``/readyz`` waits for it: reading a large keys topic takes a while),
and a route that issues a token makes sure of it before it produces anything (:meth:`ready`:
:class:`~storage.compacted.CompactedLogError`, a retriable 503, while the topic cannot be read,
rather than a 503 for a write that was produced). Without a keys topic (``TokenSeal()``: tests)
the key is this process's own. The sealed offsets are padded to a multiple of
:data:`PAD_BYTES`: a token's length tells nothing of how large they are.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import os
import re
from collections.abc import Sequence
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memcore import InvalidField
from ranker.applied import REFUSED, Token
from storage.sealing import NONCE_BYTES, DataKey, new_key

log = logging.getLogger(__name__)

PREFIX = "v2."
"""The prefix of a sealed token. ``v1.`` tokens (offsets in the clear) are no longer accepted."""
KEY_TENANT = ""
"""The tenant id the service's token keys are kept under on the keys topic: no tenant's id."""
KEY_MEMORY = "read-your-writes"
"""The memory id they are kept under."""
MAX_TOKENS = 1024
"""The most tokens one request's ``after`` takes (each is opened on the event loop)."""
MAX_AFTER_CHARS = 2**20
"""The most characters of tokens one request's ``after`` takes, all together: 1,024 tokens of
the default topics are ~430,000; opening a single 48 MiB one (a body may be 64 MiB) held the
event loop, every tenant's requests with it, for ~0.6 s."""
PAD_BYTES = 256
"""The sealed JSON is padded with spaces to a multiple of this: tokens naming both roles over four
partitions each (the default) are of one length whatever their offsets, up to 13 digits."""
SALT_BYTES = 16
"""The random salt each token's own key is derived with (:func:`_token_key`)."""
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{16}")
"""A key id as :func:`storage.sealing.new_key` makes them (12 bytes, base64url)."""
_BODY = re.compile(r"[A-Za-z0-9_-]+")
"""A sealed body: base64url without padding (the decoder would skip any other character)."""


class TokenKeys(Protocol):
    """What the seal needs of the keys topic (:class:`storage.key_log.KeyLog`)."""

    def of_memory(self, tenant_id: str, memory_id: str) -> list[DataKey]: ...

    def data_key(self, tenant_id: str, memory_id: str, key_id: str) -> DataKey | None: ...

    async def mint(self, memories: Sequence[tuple[str, str, str | None]]) -> list[DataKey]: ...

    async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None: ...


class TokenSeal:
    """Seals tokens for the tenant they are issued to and opens what clients send back. The
    constructor does no I/O; ``keys``: the keys topic, None for a key of this process alone.
    """

    def __init__(self, keys: TokenKeys | None = None) -> None:
        self.keys = keys
        self._key: DataKey | None = None
        self._attempt: asyncio.Future[DataKey] | None = None
        self._taking: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start taking the key in the background (returns at once)."""
        if self._taking is None:
            self._taking = asyncio.create_task(self._keep_taking(), name="token key")

    async def stop(self) -> None:
        """Stop taking the key: the background task and an attempt under way (before the keys
        topic it writes to stops).
        """
        for running in (self._taking, self._attempt):
            if running is not None:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        self._taking = None

    @property
    def held(self) -> bool:
        """True once this process has the key it seals with (``/readyz``)."""
        return self._key is not None

    async def ready(self) -> None:
        """Return once the key is held: at once when it is, else after one attempt to take it,
        shared by every caller meanwhile; raises :class:`~storage.compacted.CompactedLogError`
        when that attempt fails (the keys topic cannot be read or written in time). A route calls
        this before it produces what its token will name.
        """
        if self._key is None:
            await self._take()

    async def _keep_taking(self, every_s: float = 1.0) -> None:
        """Take the key, trying again every ``every_s`` seconds while the keys topic cannot give
        it (logged once).
        """
        failed = False
        while True:
            try:
                await self._take()
                break
            except Exception as exc:  # any failure: /readyz waits for the key
                if not failed:
                    log.warning("read-your-writes tokens: no key yet (%r); trying again", exc)
                failed = True
            await asyncio.sleep(every_s)
        if failed:
            log.info("read-your-writes tokens: key taken")

    async def seal(self, token: Token, tenant_id: str) -> str:
        """``token`` as the text a response to ``tenant_id`` carries."""
        key = self._key or await self._take()
        salt, nonce = os.urandom(SALT_BYTES), os.urandom(NONCE_BYTES)
        plain = token.plain()
        plain += b" " * (-len(plain) % PAD_BYTES)  # JSON: trailing spaces read as nothing
        sealer = AESGCM(_token_key(key, salt))
        data = sealer.encrypt(nonce, plain, _aad(tenant_id, key.key_id))
        body = base64.urlsafe_b64encode(salt + nonce + data).decode().rstrip("=")
        return f"{PREFIX}{key.key_id}.{body}"

    async def open(self, text: str, tenant_id: str, field: str = "after") -> Token:
        """The token ``text`` carries, when this service sealed it for ``tenant_id``; anything
        else (another tenant's, altered, made up, a ``v1.`` token) raises :class:`InvalidField`
        naming ``field``, with the same reason whatever it was.
        """
        key_id, _, body = text.removeprefix(PREFIX).partition(".")
        well_formed = text.startswith(PREFIX) and _BODY.fullmatch(body) is not None
        key = await self._find(key_id) if well_formed else None
        if key is None:
            raise InvalidField(field, text, REFUSED)
        try:
            sealed = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            salt, rest = sealed[:SALT_BYTES], sealed[SALT_BYTES:]
            nonce, data = rest[:NONCE_BYTES], rest[NONCE_BYTES:]
            plain = AESGCM(_token_key(key, salt)).decrypt(nonce, data, _aad(tenant_id, key_id))
        except (binascii.Error, ValueError, InvalidTag):
            raise InvalidField(field, text, REFUSED) from None
        return Token.from_plain(plain, text, field)

    async def read(self, given: str | Sequence[str] | None, tenant_id: str) -> Token | None:
        """A request's ``after`` (one token, a list of them, or None) as one token covering
        them all; a bad one is named ``after`` when it came alone, else ``after[i]``; more than
        :data:`MAX_TOKENS` tokens or :data:`MAX_AFTER_CHARS` characters is refused whole, naming
        ``after``.
        """
        if given is None:
            return None
        texts = [given] if isinstance(given, str) else list(given)
        if len(texts) > MAX_TOKENS:  # a body's schema says so; a query's is counted here
            raise InvalidField("after", f"{len(texts)} tokens", f"at most {MAX_TOKENS}")
        if (chars := sum(map(len, texts))) > MAX_AFTER_CHARS:
            reason = f"at most {MAX_AFTER_CHARS} characters of tokens"
            raise InvalidField("after", f"{chars} characters", reason)
        names = ["after"] if len(texts) == 1 else [f"after[{i}]" for i in range(len(texts))]
        return Token.union(
            [
                await self.open(text, tenant_id, name)
                for text, name in zip(texts, names, strict=True)
            ]
        )

    async def _take(self) -> DataKey:
        """The key this process seals with, taken once; callers that come while an attempt runs
        share it (and its failure: none waits for a timeout of its own after another's).
        """
        if self._key is not None:
            return self._key
        if self._attempt is None:
            self._attempt = asyncio.ensure_future(self._held())
            self._attempt.add_done_callback(self._attempted)
        return await asyncio.shield(self._attempt)

    def _attempted(self, attempt: asyncio.Future[DataKey]) -> None:
        if self._attempt is attempt:
            self._attempt = None
        if not attempt.cancelled():
            attempt.exception()  # retrieved: a failure no caller awaited is not reported unread

    async def _held(self) -> DataKey:
        """:meth:`_holding`, kept: held from the moment the attempt ends (not from a callback
        after it: a caller in between would find it ended and the key not held).
        """
        self._key = await self._holding()
        return self._key

    async def _holding(self) -> DataKey:
        """The keys topic's key (the lowest id), minted when it holds none; without a topic, a
        key of this process alone.
        """
        if self.keys is None:
            return new_key(KEY_TENANT, KEY_MEMORY)
        await self.keys.catch_up()
        held = self.keys.of_memory(KEY_TENANT, KEY_MEMORY)
        if held:
            return min(held, key=lambda k: k.key_id)
        (minted,) = await self.keys.mint([(KEY_TENANT, KEY_MEMORY, None)])
        return minted

    async def _find(self, key_id: str) -> DataKey | None:
        """The key of ``key_id``: read to the keys topic's end first when it is not known here
        (another ranker's, minted since this one last read), at most once per token.
        """
        if self.keys is None:
            return self._key if self._key is not None and self._key.key_id == key_id else None
        if not _KEY_ID.fullmatch(key_id):
            return None
        found = self.keys.data_key(KEY_TENANT, KEY_MEMORY, key_id)
        if found is None:
            await self.keys.catch_up(refresh=True)
            found = self.keys.data_key(KEY_TENANT, KEY_MEMORY, key_id)
        return found


def _token_key(key: DataKey, salt: bytes) -> bytes:
    """The AES-256 key of the token salted ``salt``, derived from the service's ``key``."""
    derive = HKDF(algorithm=SHA256(), length=32, salt=salt, info=b"mnemostream token key")
    return derive.derive(key.secret)


def _aad(tenant_id: str, key_id: str) -> bytes:
    """What a token is bound to besides its key: the tenant it was issued to."""
    return f"mnemostream token\0{tenant_id}\0{key_id}".encode()
