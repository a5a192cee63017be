"""``mnemo load`` against a stand-in service (httpx's MockTransport): a load waits out the
service's 429 and 503 and sends again, checks every line before it sends any, and ends on a
refusal with one line naming the file's line, not a traceback (it stopped at the first 429).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import mnemostream
from server import cli

Reply = Callable[[int, list[dict[str, object]]], httpx.Response]


class Service:
    """Answers each POST with ``reply(n, memories)`` (n: 1 for the first call) and keeps them."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.calls: list[list[str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        memories = json.loads(request.content)["memories"]
        self.calls.append([m["content"] for m in memories])
        return self.reply(len(self.calls), memories)


def written(n: int, memories: list[dict[str, object]]) -> httpx.Response:
    return httpx.Response(200, json={"ids": [f"id-{m['content']}" for m in memories]})


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr("server.cli.time.sleep", slept.append)
    return slept


def run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    service: Callable[[httpx.Request], httpx.Response],
    text: str,
    *extra: str,
) -> int:
    real = mnemostream.Client

    def client(url: str, key: str) -> mnemostream.Client:
        return real(url, key, transport=httpx.MockTransport(service))

    monkeypatch.setattr(mnemostream, "Client", client)
    path = tmp_path / "m.jsonl"
    path.write_text(text, encoding="utf-8")
    return cli.main(["load", str(path), "--api-key", "k" * 16, "--batch", "2", *extra])


LINES = "".join(json.dumps({"content": f"m{i}"}) + "\n" for i in range(5))


def test_a_load_waits_out_a_429_and_sends_the_batch_again(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    waits: list[float],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def busy_once(n: int, memories: list[dict[str, object]]) -> httpx.Response:
        if n == 2:
            return httpx.Response(429, headers={"Retry-After": "3"}, json={"detail": "busy"})
        return written(n, memories)

    service = Service(busy_once)
    assert run(tmp_path, monkeypatch, service, "\ufeff" + LINES, "--ids") == 0  # a BOM too
    printed = capsys.readouterr()
    assert printed.out.split() == [f"id-m{i}" for i in range(5)]
    assert service.calls == [["m0", "m1"], ["m2", "m3"], ["m2", "m3"], ["m4"]]
    assert waits == [3.0]
    assert "HTTP 429: busy: sending again in 3 s (2 of 6)" in printed.err  # not silent meanwhile


def test_a_refused_memory_is_named_by_its_line_in_the_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    waits: list[float],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def refuse_second(n: int, memories: list[dict[str, object]]) -> httpx.Response:
        if n == 2:
            body = {
                "detail": "memories[1].importance=1.5: too high",
                "field": "memories[1].importance",
            }
            return httpx.Response(422, json=body)
        return written(n, memories)

    assert run(tmp_path, monkeypatch, Service(refuse_second), LINES) == 1
    err = capsys.readouterr().err
    assert "m.jsonl:4: importance: memories[1].importance=1.5: too high" in err
    assert "2 of 5 written" in err
    assert "Traceback" not in err
    assert waits == []


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("{not json", "not JSON"),
        # the API refuses it: the load stopped halfway, the lines before it written
        (json.dumps({"content": " \t\u3000"}), "content: nothing but whitespace"),
    ],
)
def test_no_line_is_sent_while_one_of_the_file_is_malformed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, said: str
) -> None:
    service = Service(written)
    with pytest.raises(SystemExit, match=rf"m\.jsonl:6: {said}"):
        run(tmp_path, monkeypatch, service, LINES + line + "\n")
    assert service.calls == []


def test_the_key_may_come_from_a_file_kept_out_of_the_process_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys: list[str] = []
    real = mnemostream.Client

    def client(url: str, key: str) -> mnemostream.Client:
        keys.append(key)
        return real(url, key, transport=httpx.MockTransport(Service(written)))

    monkeypatch.setattr(mnemostream, "Client", client)
    path, key_file = tmp_path / "m.jsonl", tmp_path / "key"
    path.write_text(LINES, encoding="utf-8")
    key_file.write_text("mk-" + "s" * 20 + "\n", encoding="utf-8")  # as a Secret mounts it
    assert cli.main(["load", str(path), "--api-key-file", str(key_file)]) == 0
    assert keys == ["mk-" + "s" * 20 + "\n"]  # the SDK strips the newline
    with pytest.raises(SystemExit, match="--api-key-file"):
        cli.main(["load", str(path), "--api-key-file", str(tmp_path / "none")])
    with pytest.raises(SystemExit):  # one or the other
        cli.main(["load", str(path), "--api-key", "k" * 16, "--api-key-file", str(key_file)])


def test_a_service_never_reached_ends_the_load_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    waits: list[float],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    assert run(tmp_path, monkeypatch, refused, LINES) == 1
    err = capsys.readouterr().err
    assert "mnemo load: no reply: ConnectError: connection refused" in err
    assert waits == [1, 2, 4, 8, 16]
    with pytest.raises(SystemExit, match="cannot read"):
        cli.main(["load", str(tmp_path / "missing.jsonl"), "--api-key", "k" * 16])


@pytest.mark.parametrize("key", ["", " \n", "k\x01" * 8])
def test_a_key_no_header_can_carry_ends_the_load_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    """``--api-key "$UNSET"`` ended in a traceback once the SDK checked keys."""
    path = tmp_path / "m.jsonl"
    path.write_text(LINES, encoding="utf-8")
    assert cli.main(["load", str(path), "--api-key", key]) == 1
    err = capsys.readouterr().err
    assert err.startswith("--api-key: api_key: expected the tenant's key")
    assert "Traceback" not in err
