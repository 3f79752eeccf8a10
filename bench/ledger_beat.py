"""A one-at-a-time query's ledger write with and without a lifetime heartbeat after it, on a real DuckDB ledger.

    python -m bench.ledger_beat [--queries 200] [--rounds 3] [--out bench/out/ledger_beat.json]

Each query writes its row and three stage rows in one transaction (``Ledger.record_queries``, as `ragcost query`
writes a batch of one); "beat" adds the lifetime heartbeat `ragcost query` writes after every batch. Prints JSON:
CPU and wall milliseconds a query, the median of ``rounds`` alternating rounds of each, and the share of the write
the heartbeat is. In isolation the heartbeat is about a third of the write; beating at most once a second instead
made a one-at-a-time `ragcost query` child process *dearer* per query in ``bench.eval_served`` (its overhead row
2.5-2.6e-07 $ against 2.0e-07), for a reason not found, so query time still beats after every batch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure(queries: int = 200, rounds: int = 3) -> dict:
    from ragcost.cost.compute import storage_row
    from ragcost.cost.ledger import Ledger
    from ragcost.cost.pricebook import load_price_book

    book = load_price_book(REPO / "pricing" / "default.yaml")
    with tempfile.TemporaryDirectory() as d:
        led = Ledger(f"duckdb:///{d}/ledger.duckdb")
        run = led.start_run("query", "bench", "v")
        life = led.start_lifetime("batch", "bench", "cpu", run)
        item = ({"text": "q", "ok": True, "useful": 0, "retrieved": 3}, [storage_row(0, 0, book)] * 3)

        def one(beat: bool) -> None:
            led.record_queries(run, [item])
            if beat:
                led.heartbeat(life)

        got: dict[str, list[tuple[float, float]]] = {"beat": [], "no_beat": []}
        for _ in range(rounds):
            for key, beat in (("beat", True), ("no_beat", False)):
                for _ in range(20):  # warm
                    one(beat)
                c, w = time.process_time(), time.perf_counter()
                for _ in range(queries):
                    one(beat)
                got[key].append(((time.process_time() - c) / queries * 1000, (time.perf_counter() - w) / queries * 1000))
        led.close()
    out = {"benchmark": "ledger_beat", "queries": queries, "rounds": rounds}
    for key, xs in got.items():
        out[key] = {"cpu_ms_per_query": round(statistics.median(x[0] for x in xs), 3),
                    "wall_ms_per_query": round(statistics.median(x[1] for x in xs), 3),
                    "cpu_ms_rounds": [round(x[0], 3) for x in xs]}
    out["heartbeat_share_of_the_write_cpu"] = round(1 - out["no_beat"]["cpu_ms_per_query"] / out["beat"]["cpu_ms_per_query"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    from bench.common import emit_to

    return emit_to(measure(a.queries, a.rounds), a.out)


if __name__ == "__main__":
    sys.exit(main())
