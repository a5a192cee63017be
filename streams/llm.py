"""Importance and supersession from an OpenAI-compatible LLM endpoint, never blocking a write.

:meth:`LlmImportance.answer` returns the model's raw answer text, or None on timeout, transport
error, a non-2xx reply or one over :data:`MAX_ANSWER_BYTES`; :func:`memcore.resolve_importance`
parses it and falls back to the rules.
:meth:`LlmImportance.ask` sends any prompt the same way (supersession:
:func:`memcore.supersession.decide` parses the answer and falls back to its rule).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

import httpx

log = logging.getLogger(__name__)

PROMPT = (
    "Rate how important it is for an AI assistant to remember the text below. Score six criteria "
    "from 0 to 1: relevance, novelty, emotional_impact, actionable, factual, personal; then an "
    'overall importance. Answer only JSON: {"importance_score": <0..1>, "reasoning": "<short>", '
    '"criteria_scores": {"relevance": .., "novelty": .., "emotional_impact": .., "actionable": .., '
    '"factual": .., "personal": ..}}\n\nText:\n'
)


CONCURRENCY = 100
"""Questions in flight to the LLM at once (its connection pool's size); more wait their turn,
and each one's timeout starts when it is sent (it ran while it waited for a connection: past 100
at once, the rest timed out unasked and the rules decided)."""


MAX_ANSWER_BYTES = 1 << 20
"""The largest reply body read (1 MiB): a longer one is no answer (the rules decide), so an
endpoint that streams megabytes costs neither the worker's memory nor its loop's time."""


_COMPRESSED = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd", "compress"})
"""Content codings that inflate (httpx inflates gzip, deflate, br and zstd, the last two when
their packages are installed; x-gzip and compress are refused too); another, "none" or
"UTF-8", httpx reads as it is."""


class LlmImportance:
    """Asks the endpoint's ``/chat/completions``. ``start`` opens the HTTP client; ``close`` ends it."""

    def __init__(self, base_url: str, model: str, api_key: str, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None
        self._turns = asyncio.Semaphore(CONCURRENCY)  # made again by start(), on its loop

    async def start(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._turns = asyncio.Semaphore(CONCURRENCY)
        limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
        self._client = httpx.AsyncClient(headers=headers, timeout=self.timeout_s, limits=limits)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def answer(self, content: str) -> str | None:
        """The importance answer for ``content``, or None when the LLM cannot answer in time."""
        return await self.ask(PROMPT + content)

    async def ask(self, prompt: str, hung: asyncio.Event | None = None) -> str | None:
        """The answer text to ``prompt``, or None when the LLM cannot answer in time. ``hung``:
        set by a question of the same batch that timed out; one still waiting for its turn then
        is not sent (None at once: a hanging LLM costs a batch one timeout, not one per
        :data:`CONCURRENCY` questions).
        """
        if self._client is None:
            return None
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [{"role": "user", "content": prompt}],
        }
        try:
            async with self._turns:
                if hung is not None and hung.is_set():
                    return None  # the batch's LLM timed out: the rules decide, unasked
                try:
                    async with asyncio.timeout(self.timeout_s):
                        payload = await self._post(self._client, body)
                except TimeoutError:
                    if hung is not None:
                        hung.set()
                    raise
            text = json.loads(payload)["choices"][0]["message"]["content"]
        except (
            TimeoutError,
            httpx.HTTPError,
            httpx.InvalidURL,  # not an HTTPError: the URL alone (settings refuse most at start)
            KeyError,
            IndexError,
            TypeError,
            ValueError,
            RecursionError,  # a body nested deeper than the JSON parser goes
        ) as exc:
            log.warning("llm unavailable (%s); the rules decide", type(exc).__name__)
            return None
        except Exception:  # never a write's failure: an answer is optional (module doc)
            log.exception("llm question failed unexpectedly; the rules decide")
            return None
        return text if isinstance(text, str) else None

    async def _post(self, client: httpx.AsyncClient, body: dict[str, object]) -> bytes:
        """The reply's body; raises ``ValueError`` once it is longer than
        :data:`MAX_ANSWER_BYTES` (read no further), or compressed (asked for uncompressed: a
        compressed chunk would be inflated whole before it is counted), then ``httpx.HTTPStatusError`` for a
        non-2xx reply (read first, so that its connection goes back to the pool).
        """
        url = f"{self.base_url}/chat/completions"
        plain = {"Accept-Encoding": "identity"}
        async with client.stream("POST", url, json=body, headers=plain) as reply:
            codings = reply.headers.get_list("content-encoding", split_commas=True)
            if _COMPRESSED & {c.strip().lower() for c in codings}:
                raise ValueError("a compressed reply, though asked for none")
            chunks, size = [], 0
            async for chunk in reply.aiter_bytes():
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise ValueError(f"a reply over {MAX_ANSWER_BYTES} bytes")
                chunks.append(chunk)
            reply.raise_for_status()
        return b"".join(chunks)

    async def answers(self, contents: Sequence[str]) -> list[str | None]:
        """Answers for many texts, concurrently, each within the timeout; once one times out,
        those not sent yet are None (:meth:`ask`'s ``hung``).
        """
        hung = asyncio.Event()
        return list(await asyncio.gather(*(self.ask(PROMPT + c, hung) for c in contents)))
