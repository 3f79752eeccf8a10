"""The ledger writer commits the queries waiting together; a group that fails is written one at a time."""

from __future__ import annotations

import asyncio
import threading

from ragcost.serve.writer import LedgerWriter


class FakeSession:
    """Records what was written; an answer named 'bad' cannot be written."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.gate = threading.Event()

    def record_many(self, answers) -> None:
        self.gate.wait(5)
        if any(a == "bad" for a in answers):
            raise RuntimeError("disk full")
        self.groups.append(list(answers))

    def record(self, answer) -> None:
        self.record_many([answer])


def test_waiting_queries_share_one_commit_and_a_bad_one_fails_alone():
    async def run():
        s = FakeSession()
        w = LedgerWriter(s)
        first = asyncio.ensure_future(w.write("a0"))  # taken at once; the writer blocks on the gate
        await asyncio.sleep(0.1)
        rest = [asyncio.ensure_future(w.write(x)) for x in ("a1", "a2", "bad", "a3")]
        await asyncio.sleep(0.05)
        s.gate.set()
        results = await asyncio.gather(first, *rest, return_exceptions=True)
        w.close()
        return s, w, results

    s, w, results = asyncio.run(run())
    assert s.groups[0] == ["a0"]
    assert sorted(x for g in s.groups[1:] for x in g) == ["a1", "a2", "a3"]  # written one at a time after the group failed
    assert [type(r).__name__ for r in results] == ["NoneType", "NoneType", "NoneType", "RuntimeError", "NoneType"]
    assert (w.written, w.failed) == (4, 1)


def test_a_group_commit_is_one_call():
    async def run():
        s = FakeSession()
        w = LedgerWriter(s)
        first = asyncio.ensure_future(w.write("a0"))
        await asyncio.sleep(0.1)
        rest = [asyncio.ensure_future(w.write(f"b{i}")) for i in range(20)]
        await asyncio.sleep(0.05)
        s.gate.set()
        await asyncio.gather(first, *rest)
        w.close()
        return s

    s = asyncio.run(run())
    assert s.groups == [["a0"], [f"b{i}" for i in range(20)]]
