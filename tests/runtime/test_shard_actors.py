"""``index: {serve: {on: ray}}``: a sharded index's shards in Ray actors on a real 2-node cluster.

The reference is the in-process sharded index over the same file: the actors must give its labels
(unfiltered, the native filtered search, and the exact scan of a filter's matches). A killed actor
is restarted and its call retried; one that stays dead leaves the answer flagged ``partial``, in
the answer, its JSON and the ledger -- never silently fewer documents.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from ragcost.config.index import IndexConfig, ServeShards
from ragcost.config.pipeline import RayOptions
from ragcost.index.exact import rows_for_labels, scan_rows
from ragcost.index.sharded import new_index
from ragcost.runtime.shard_actors import served_class
from tests.cli.conftest import write_corpus, write_pipeline

N, DIM, SHARDS = 5_000, 32, 4
NODES = {"127.0.0.2": "cpu", "127.0.0.3": "r7i-2xlarge"}  # tests/ray_cluster.py's head and worker, priced apart


def _vectors(n: int, dim: int, seed: int = 7) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def served(ray_cluster, tmp_path_factory):
    """(in-process sharded index, the same file served by 4 actors, vectors, labels)."""
    import ray

    from ragcost.index import index_registry

    cfg = IndexConfig(backend="hnswlib", kind="hnsw", build={"M": 12, "ef_construction": 64}, search={"ef": 48},
                      shards=SHARDS, serve=ServeShards(on="ray", cpus_per_shard=0.25, max_restarts=1, timeout_s=60))
    x = _vectors(N, DIM)
    labels = np.arange(N, dtype=np.int64) * 3 + 11  # not 0..n-1: the ranges are labels, not rows
    local = new_index(cfg, DIM)
    local.build(x, labels)
    path = tmp_path_factory.mktemp("served") / "index.shards"
    local.save(path)
    remote = served_class(index_registry.get("hnswlib"))(cfg, DIM)
    remote.start(path, x, labels, RayOptions(address=ray_cluster.address), local.nbytes())
    try:
        yield local, remote, x, labels
    finally:
        remote.close()
        if ray.is_initialized():
            ray.shutdown()


def test_actors_give_the_in_process_sharded_top_10_and_spread_over_both_nodes(served):
    local, remote, x, labels = served
    q = _vectors(64, DIM, seed=1)
    s_l, l_l = local.search(q, 10)
    s_r, l_r = remote.search(q, 10)
    assert np.array_equal(l_l, l_r)  # recall 1.0 against the in-process reference
    assert np.allclose(s_l, s_r, atol=1e-6)
    assert remote.search_one(q[0], 10)[0] == l_l[0].tolist()
    assert sorted({p["node"] for p in remote.placement}) == ["127.0.0.2", "127.0.0.3"]  # SPREAD: both nodes
    assert [p["vectors"] for p in remote.placement] == [len(s) for s in local.shards]
    assert len(remote) == N and remote.nbytes() == local.nbytes()
    report = remote.take_reports()[-1]
    assert report.missing == [] and all(c.cpu_seconds > 0 and c.node for c in report.calls)


def test_searches_go_over_the_channels_and_through_ray_give_the_same(served):
    local, remote, x, labels = served
    q = _vectors(32, DIM, seed=4)
    _, via_channel = remote.search(q, 10)
    assert remote.config.serve.channel == "tcp" and all(c is not None and c.sock is not None for c in remote._clients)
    assert [c.retried for c in remote.take_reports()[-1].calls] == [False] * SHARDS
    clients, remote._clients = remote._clients, []  # channel: ray, on the same actors
    try:
        _, via_ray = remote.search(q, 10)
    finally:
        remote._clients = clients
    assert np.array_equal(via_channel, via_ray) and np.array_equal(via_ray, local.search(q, 10)[1])


def test_a_broken_channel_is_asked_through_ray_then_reopened(served):
    local, remote, x, labels = served
    q = _vectors(8, DIM, seed=5)
    remote.search(q, 10)
    remote._clients[1].sock.shutdown(socket.SHUT_RDWR)  # the connection breaks under the driver
    _, got = remote.search(q, 10)
    assert np.array_equal(got, local.search(q, 10)[1])  # answered whole
    call = next(c for c in remote.take_reports()[-1].calls if c.shard == 1)
    assert call.retried and call.failed is None and call.cpu_seconds > 0  # through Ray, and the report says so
    remote.search(q, 10)
    assert remote._clients[1] is not None and remote._clients[1].sock is not None  # the channel is back
    assert not any(c.retried for c in remote.take_reports()[-1].calls)


def test_an_unreachable_channel_is_left_for_a_while_and_its_shard_asked_through_ray(served):
    from ragcost.runtime.shard_channel import ChannelClient

    local, remote, x, labels = served
    q = _vectors(8, DIM, seed=6)
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: what a firewall's reject or a dead actor's port gives
    remote._drop_client(0)
    remote._clients[0] = ChannelClient(("127.0.0.1", port), b"x" * 64, 1.0)
    try:
        for first in (True, False):
            _, got = remote.search(q, 10)
            assert np.array_equal(got, local.search(q, 10)[1])  # answered whole either way
            call = next(c for c in remote.take_reports()[-1].calls if c.shard == 0)
            assert call.failed is None and call.retried is first  # the failed connect once; then Ray, no connect tried
            assert remote._clients[0] is None and remote._channel_after[0] > 0
    finally:
        remote._channel_after.clear()
    remote.search(q, 10)
    assert remote._clients[0] is not None and remote._clients[0].sock is not None  # after the back-off: the channel again


def test_filtered_search_and_the_exact_scan_work_per_shard(served):
    local, remote, x, labels = served
    q = _vectors(16, DIM, seed=2)
    allowed = labels[(labels // 3) % 5 < 2]  # 40%, in every shard
    params = {"ef": 96}
    a = local.search_filtered(q, 10, params, allowed)
    b = remote.search_filtered(q, 10, params, allowed)
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.exact_rows, b.exact_rows)
    few = labels[: N // SHARDS + 40]  # the first shard's and a few of the second's: the others are skipped
    s_e, l_e = scan_rows(x, labels, q, 10, rows_for_labels(labels, few))
    s_r, l_r = remote.scan_allowed(q, 10, few)
    assert np.array_equal(l_e, l_r)
    assert {c.shard for c in remote.take_reports()[-1].calls} == {0, 1}


def test_a_killed_shard_actor_is_restarted_and_the_query_answered_whole_by_it(served):
    import time

    import ray

    local, remote, x, labels = served
    q = _vectors(8, DIM, seed=3)
    remote.search(q, 10)
    before = next(c for c in remote.take_reports()[-1].calls if c.shard == 2).pid
    ray.kill(remote.actors[2], no_restart=False)  # Ray restarts it (max_restarts: 1); the kill is asynchronous
    end = time.monotonic() + 60
    while time.monotonic() < end:  # until the old process is gone: a call that reaches it first is no test
        try:
            if ray.get(remote.actors[2].info.remote(), timeout=5)["pid"] != before:
                break
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass  # dead, or restarting
        time.sleep(0.05)
    _, got = remote.search(q, 10)
    assert np.array_equal(got, local.search(q, 10)[1])
    call = next(c for c in remote.take_reports()[-1].calls if c.shard == 2)
    # answered by the restarted actor, whether the call reached the dead one and was retried or Ray had the new
    # one up first; never answered short
    assert call.failed is None and call.pid != before


@pytest.fixture(scope="module")
def kb_on_ray(ray_cluster, tmp_path_factory):
    """A 4-shard pipeline indexed here, its queries served from shard actors with no restarts."""
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    tmp = tmp_path_factory.mktemp("kb")
    docs = [(f"d{i}", f"Title {i}", f"Document number {i} talks about topic {i % 7} and item {i * 13 % 101}.", "t",
             2020 + i % 5, ["x"]) for i in range(120)]
    write_corpus(tmp / "kb.jsonl", docs)
    index = {"backend": "hnswlib", "kind": "hnsw", "build": {"M": 8, "ef_construction": 64}, "search": {"ef": 32},
             "shards": SHARDS, "serve": {"on": "ray", "address": ray_cluster.address, "cpus_per_shard": 0.25, "max_restarts": 0, "timeout_s": 60,
                       "nodes": NODES}}
    p = write_pipeline(tmp, index=index, stages=[{"type": "retrieve", "k": 5}])
    pipe = Pipeline.load(p)
    try:
        run_index(pipe)
    finally:
        pipe.close()
    return p


def test_queries_under_a_shard_kill_are_complete_or_flagged_partial_and_all_in_the_ledger(kb_on_ray):
    """Also: each shard's $ in the ledger and ``report`` is priced on its own node's resource (index.serve.nodes)."""
    import ray

    from ragcost.cost.ledger import Ledger
    from ragcost.runtime.api import Session

    answers, stop = [], threading.Event()
    with Session(kb_on_ray) as s:
        s.warm_up()
        first = s.query("Document number 17 talks about topic 3")
        assert first.partial is None and len(first.hits) == 5 and first.hits[0]["doc_id"] == "d17"
        assert {r["stage"] for r in first.rows} >= {f"retrieve:shard-{i}" for i in range(SHARDS)}  # each shard priced
        index = s.pipe.artifact().index

        def load() -> None:
            i = 0
            while not stop.is_set() and i < 400:
                answers.append(s.query(f"Document number {i % 120} talks about topic {i % 7}"))
                i += 1

        t = threading.Thread(target=load)
        t.start()
        while len(answers) < 5:
            threading.Event().wait(0.05)
        ray.kill(index.actors[1], no_restart=True)  # max_restarts: 0 and no restart: it stays dead
        while not any(a.partial for a in answers) and t.is_alive():
            threading.Event().wait(0.05)
        stop.set()
        t.join(timeout=120)
        run_id = s.run_id
    assert answers and any(a.partial for a in answers)
    for a in answers:
        assert a.ok and (len(a.hits) == 5 or a.partial), a.to_json()  # complete, or flagged
        if a.partial:
            assert a.partial == {"missing_shards": [1], "shards": SHARDS} and a.to_json()["partial"] == a.partial
    with Ledger(json.loads(kb_on_ray.read_text())["store"]) as led:
        rows, calls = led.read()
    mine = {r["query_id"]: r for r in rows if r["run_id"] == run_id}
    assert set(mine) == {first.id, *(a.id for a in answers)}  # none missing from the ledger
    for a in answers:
        assert (json.loads(mine[a.id]["partial"]) if mine[a.id]["partial"] else None) == a.partial
    from ragcost.cost.report import build_report

    report = build_report(json.loads(kb_on_ray.read_text())["store"])
    shards = {r.stage: r for r in report.stages if r.stage.startswith("retrieve:shard-")}
    assert sorted(shards) == [f"retrieve:shard-{i}" for i in range(SHARDS)]  # `ragcost report`: cost per shard
    assert all(r.usd > 0 for name, r in shards.items() if name != "retrieve:shard-1")
    _assert_priced_on_their_nodes(calls, set(mine), report, json.loads(kb_on_ray.read_text())["pricing"])


def test_a_shard_whose_restarts_are_spent_is_left_out_at_once_flagged_partial_and_in_the_ledger(kb_on_ray):
    """issue 39, item 4: kill one actor twice (kill -9) so that Ray's restart budget (max_restarts: 1) is spent. Every
    later query waited out timeout_s for the dead actor to come back (a 504 after 30 s with the defaults); now each is
    answered by the live shards within 2x its normal latency plus the connect timeout, flagged partial, in the ledger."""
    import os
    import signal
    import time
    import warnings

    import ray

    from ragcost.cost.ledger import Ledger
    from ragcost.runtime.api import Session

    p = _priced_copy(kb_on_ray, "restarts-spent.yaml", max_restarts=1, timeout_s=10, connect_timeout_s=2)
    texts = [f"Document number {i} talks about topic {i % 7}" for i in range(0, 120, 11)]
    with Session(p) as s:
        s.warm_up()
        index = s.pipe.artifact().index

        def timed(text: str):
            t0 = time.perf_counter()
            a = s.query(text)
            return a, time.perf_counter() - t0

        normal = sorted(timed(t)[1] for t in texts[:7])[3]  # the median whole answer

        def kill_shard_1() -> str:
            """kill -9 the actor's process; then wait until Ray has either restarted it ("restarted") or says it is
            dead for good ("dead") -- a query meanwhile would time a restart, not the dead shard."""
            pid = ray.get(index.actors[1].info.remote(), timeout=60)["pid"]
            os.kill(pid, signal.SIGKILL)
            end = time.monotonic() + 60
            while time.monotonic() < end:
                try:
                    if ray.get(index.actors[1].info.remote(), timeout=5)["pid"] != pid:
                        return "restarted"
                except ray.exceptions.ActorDiedError:
                    return "dead"
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    pass  # unavailable while Ray restarts it
                time.sleep(0.05)
            raise AssertionError("Ray neither restarted the actor nor reported it dead within 60 s")

        assert kill_shard_1() == "restarted"
        again = s.query(texts[0])
        assert again.partial is None and len(again.hits) == 5  # the first death: restarted, answered whole
        assert kill_shard_1() == "dead"  # the second: max_restarts (1) is spent
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            answers = [timed(t) for t in texts]
        run_id = s.run_id
    for a, took in answers:
        assert a.ok and a.partial == {"missing_shards": [1], "shards": SHARDS}, a.to_json()
        assert len(a.hits) == 5 and took < 2 * normal + 2, (took, normal)  # 2: connect_timeout_s
    dead = [str(w.message) for w in said if "shard 1's actor is dead" in str(w.message)]
    assert len(dead) == 1 and "index.serve.max_restarts: 1, spent" in dead[0] and "other 3 shard(s)" in dead[0], dead
    with Ledger(json.loads(kb_on_ray.read_text())["store"]) as led:
        rows, _ = led.read()
    mine = {r["query_id"]: r for r in rows if r["run_id"] == run_id}
    for a, _ in answers:
        assert json.loads(mine[a.id]["partial"]) == a.partial  # each has its ledger row, flagged


def _priced_copy(kb: Path, name: str, **serve) -> Path:
    """The kb_on_ray pipeline with ``index.serve`` updated (same built index: serve is not in the fingerprint)."""
    cfg = json.loads(kb.read_text())
    cfg["index"]["serve"].update(serve)
    p = kb.parent / name
    p.write_text(json.dumps(cfg, indent=2))
    return p


def _assert_priced_on_their_nodes(rows: list[dict], qids: set, report, book_path: str) -> None:
    """Two nodes, two prices: every shard row's $ is its measured CPU x its node's rate, by hand."""
    from ragcost.cost.pricebook import load_price_book

    book = load_price_book(book_path)
    shard_rows = [r for r in rows if r["query_id"] in qids and r["stage"].startswith("retrieve:shard-") and r["node"]]
    assert {r["node"] for r in shard_rows} == set(NODES)  # SPREAD put shards on both nodes
    for r in shard_rows:
        res = book.resources[NODES[r["node"]]]
        assert r["resource"] == NODES[r["node"]] and r["cpu_seconds"] > 0
        by_hand = r["cpu_seconds"] * res.usd_per_hour / 3600 / res.vcpus / r["items"]
        assert abs(r["cost_usd"] - by_hand) <= 1e-9 * by_hand, (r, by_hand)
    rate = {n: book.resources[NODES[n]].usd_per_hour / book.resources[NODES[n]].vcpus for n in NODES}
    assert len(set(rate.values())) == 2  # the two nodes' CPU-second prices differ, so a mix-up would show
    for row in (r for r in report.stages if r.stage.startswith("retrieve:shard-")):
        mine = [r for r in rows if r["stage"] == row.stage and r["node"]]
        assert [(n["node"], n["resource"]) for n in row.nodes] == sorted({(r["node"], r["resource"]) for r in mine})
        assert abs(sum(n["usd"] for n in row.nodes) - row.usd) <= 1e-12 + 1e-9 * row.usd
        assert row.label.startswith(f"{row.stage} @ ") and row.nodes[0]["resource"] in row.label


def test_a_node_map_naming_no_node_or_an_unknown_or_untimed_resource_is_one_line(kb_on_ray):
    from ragcost.errors import ConfigError
    from ragcost.runtime.pipeline import Pipeline

    stray = Pipeline.load(_priced_copy(kb_on_ray, "kb-stray.yaml", nodes={"10.9.9.9": "cpu"}))
    try:
        with pytest.raises(ConfigError, match=r"kb-stray\.yaml:\d+:\d+: index\.serve\.nodes: '10\.9\.9\.9' names no live "
                                              r"node .*127\.0\.0\.2, 127\.0\.0\.3") as e:
            stray.artifact()
        assert "\n" not in str(e.value)
    finally:
        stray.close()
    unknown = Pipeline.load(_priced_copy(kb_on_ray, "kb-unknown.yaml", nodes={"127.0.0.3": "c9-huge"}))
    try:
        for call in (unknown.check, unknown.artifact):  # `ragcost validate`, and before any actor starts
            with pytest.raises(ConfigError, match=r"kb-unknown\.yaml:\d+:\d+ \(index\.serve\.nodes\.127\.0\.0\.3\): "
                                                  r"unknown resource 'c9-huge'.*known: .*cpu") as e:
                call()
            assert "\n" not in str(e.value)
    finally:
        unknown.close()
    tokens = Pipeline.load(_priced_copy(kb_on_ray, "kb-tokens.yaml", resource="openai-text-embedding-3-small"))
    try:
        with pytest.raises(ConfigError, match=r"kb-tokens\.yaml:\d+:\d+: resource 'openai-text-embedding-3-small' is "
                                              r"tokens-priced; a shard actor's CPU is priced on .*kind: time"):
            tokens.check()
    finally:
        tokens.close()


@pytest.mark.parametrize("serve, says", [
    ({"on": "actors"}, r"index\.serve\.on: .*'process' or 'ray'"),
    ({"on": "ray", "replicas": 2}, r"index\.serve\.replicas"),
    ({"on": "ray", "cpus_per_shard": 0}, r"index\.serve\.cpus_per_shard"),
    ({"on": "ray", "nodes": {"head-node": "cpu"}}, r"index\.serve\.nodes.*'head-node' is not an IP address"),
])
def test_a_bad_serve_option_is_one_line_naming_the_field(tmp_path, serve, says):
    from ragcost.errors import ConfigError
    from ragcost.runtime.load import load_pipeline

    index = {"backend": "hnswlib", "kind": "hnsw", "shards": 2, "serve": serve}
    p = write_pipeline(tmp_path, index=index)
    with pytest.raises(ConfigError, match=says) as e:
        load_pipeline(p)
    assert "\n" not in str(e.value)


def test_serve_is_not_part_of_the_fingerprint(tmp_path):
    from ragcost.runtime.pipeline import Pipeline

    base = {"backend": "hnswlib", "kind": "hnsw", "shards": 2}
    a = Pipeline.load(write_pipeline(tmp_path, index=base))
    b = Pipeline.load(write_pipeline(tmp_path, index={**base, "serve": {"on": "ray"}}))
    assert a.index_config.serve.on == "process" and b.index_config.serve.on == "ray"
    assert a.index_fingerprint("rev") == b.index_fingerprint("rev")  # one built index, served either way
