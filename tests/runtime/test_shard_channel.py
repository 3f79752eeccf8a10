"""The shard actors' direct channel (ragcost/runtime/shard_channel.py), server and client in this process."""

from __future__ import annotations

import json
import socket
import struct

import numpy as np
import pytest

from ragcost.runtime.shard_channel import ChannelClient, ChannelError, ChannelServer, encode

TOKEN = b"0123abcd" * 8


def _echo(op, header, arrays):
    if op == "boom":
        raise ValueError("the shard could not search")
    q = arrays["queries"]
    q += 0  # the arrays are writable: a backend may want to touch them
    return {"cpu_seconds": 0.5, "node": "127.0.0.1", "sums": q.sum(axis=1), "k": header["k"],
            "allowed": arrays.get("allowed", np.zeros(0, np.int64))}


def _closed_unanswered(s: socket.socket) -> bool:
    """The server closed the connection without a reply (an orderly close, or a reset over unread bytes)."""
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


@pytest.fixture()
def server():
    srv = ChannelServer("127.0.0.1", TOKEN, _echo)
    yield srv
    srv.close()


def test_a_request_and_its_reply_carry_the_header_and_the_arrays_exactly(server):
    c = ChannelClient(server.address, TOKEN, 5)
    q = np.arange(12, dtype=np.float32).reshape(3, 4)
    allowed = np.array([5, 9, 2**40], np.int64)
    for _ in range(3):  # one connection, request after request
        c.send({"op": "search", "k": 7}, [("queries", q), ("allowed", allowed)])
        got = c.receive(5)
        assert got["k"] == 7 and got["cpu_seconds"] == 0.5 and got["node"] == "127.0.0.1"
        assert np.array_equal(got["sums"], q.sum(axis=1)) and got["sums"].dtype == np.float32
        assert np.array_equal(got["allowed"], allowed) and got["allowed"].dtype == np.int64
    c.close()


def test_an_error_in_the_shard_comes_back_and_closes_the_connection(server):
    c = ChannelClient(server.address, TOKEN, 5)
    c.send({"op": "boom", "k": 1}, [("queries", np.zeros((1, 2), np.float32))])
    with pytest.raises(ChannelError, match="ValueError: the shard could not search"):
        c.receive(5)
    assert c.sock is None  # a later request opens a new connection
    c.send({"op": "search", "k": 1}, [("queries", np.ones((1, 2), np.float32))])
    assert c.receive(5)["sums"].tolist() == [2.0]


def test_a_client_without_the_token_is_never_answered(server):
    wrong = ChannelClient(server.address, b"f" * 64, 5)
    wrong.send({"op": "search", "k": 1}, [("queries", np.zeros((1, 2), np.float32))])
    with pytest.raises(ChannelError):
        wrong.receive(5)


def test_a_frame_naming_an_object_array_or_running_past_its_bytes_is_refused(server):
    for arrays in ([["queries", "|O", [1]]], [["queries", "<f4", [1000, 1000]]]):
        s = socket.create_connection(server.address, timeout=5)
        s.sendall(encode({"token": TOKEN.decode()}, []))
        head = json.dumps({"op": "search", "k": 1, "arrays": arrays}).encode()
        s.sendall(struct.pack(">I", len(head)) + struct.pack(">I", 8) + head + b"\0" * 8)
        assert _closed_unanswered(s)  # nothing evaluated, nothing allocated for the claimed shape
        s.close()


def test_before_the_token_a_large_or_malformed_frame_is_refused_unread(server):
    for frame in (struct.pack(">II", 10, 1 << 30) + b"{}",  # claims a GiB: never allocated
                  struct.pack(">II", 2, 0) + b"[]"):  # not an object
        s = socket.create_connection(server.address, timeout=5)
        s.sendall(frame)
        assert _closed_unanswered(s)
        s.close()
    c = ChannelClient(server.address, TOKEN, 5)  # the server still answers
    c.send({"op": "search", "k": 1}, [("queries", np.ones((1, 2), np.float32))])
    assert c.receive(5)["sums"].tolist() == [2.0]


def test_a_server_that_is_gone_is_a_channel_error():
    srv = ChannelServer("127.0.0.1", TOKEN, _echo)
    address = srv.address
    srv.close()
    c = ChannelClient(address, TOKEN, 2)
    with pytest.raises(ChannelError):
        c.send({"op": "search", "k": 1}, [("queries", np.zeros((1, 2), np.float32))])
        c.receive(2)
