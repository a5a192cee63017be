"""Reading a changelog when the broker answers nothing (storage.changelogs): the read gives up
with a timeout instead of waiting forever. Reads against a real broker are in
tests/integration/test_streams.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError

from storage import changelogs

TP = TopicPartition("t", 0)


class Quiet:
    """An aiokafka consumer facing a broker gone quiet: every fetch comes back empty after the
    first ``records`` ones, and the position stays short of the end offset (10)."""

    def __init__(self, records: int) -> None:
        self.records = records

    async def getmany(
        self, *_: TopicPartition, timeout_ms: int
    ) -> dict[TopicPartition, list[object]]:
        if self.records:
            self.records -= 1
            return {TP: [SimpleNamespace(key=b"k", value=b"v")]}
        return {}

    async def position(self, _: TopicPartition) -> int:
        return 3


def scan_of(consumer: Quiet) -> changelogs._Scan:
    scan = changelogs._Scan("unused:9092", "t", None)
    scan._consumer = consumer
    scan._todo = {TP}
    scan._to = {TP: 10}
    return scan


def test_a_read_that_fetches_nothing_short_of_its_end_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(changelogs, "STALL_S", 3)
    scan = scan_of(Quiet(records=1))

    async def read() -> list[list[changelogs.Record] | None]:
        got = [await scan.batch() for _ in range(3)]  # a record, then two empty fetches
        with pytest.raises(KafkaTimeoutError, match="t: no record for 3 s"):
            await scan.batch()
        return got

    assert asyncio.run(read()) == [[(b"k", b"v")], [], []]
