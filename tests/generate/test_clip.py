"""A request's stop and max_tokens cut any backend's text, streamed piece by piece or whole."""

from __future__ import annotations

import pytest

from ragcost.generate.clip import Clip
from ragcost.generate.prompt import approx_tokens

TEXT = "Refunds take 30 days. Write to billing. Keep the receipt."


@pytest.mark.parametrize("stop,max_tokens,want,finish", [
    (["."], None, "Refunds take 30 days", "stop"),
    (["billing"], None, "Refunds take 30 days. Write to ", "stop"),
    (["days. W", "30"], None, "Refunds take ", "stop"),  # the earliest of several
    (["absent"], None, TEXT, None),
    ([], 3, TEXT[:12], "length"),  # 4 characters a token: 12 characters are 3 tokens
    (["."], 100, "Refunds take 30 days", "stop"),
    (["receipt"], 5, TEXT[:20], "length"),
])
@pytest.mark.parametrize("pieces", [1, 3, 7, len(TEXT)], ids=lambda n: f"{n}-char pieces")
def test_streamed_pieces_and_the_whole_text_are_cut_alike(stop, max_tokens, want, finish, pieces):
    clip = Clip(stop, max_tokens, approx_tokens)
    sent = "".join(clip.feed(TEXT[i:i + pieces]) for i in range(0, len(TEXT), pieces))
    final, rest = clip.close(TEXT)
    assert final == want and sent + rest == want and clip.finish == finish
    for s in stop:  # no piece of a stop sequence ever left, not even its start
        if s in TEXT:
            assert s not in sent + rest


def test_nothing_to_cut_is_no_clip():
    assert Clip.of({}, frozenset(), approx_tokens) is None
    assert Clip.of({"max_tokens": 5}, frozenset({"max_tokens"}), approx_tokens) is None  # the server applies it
    assert Clip.of({"stop": "x"}, frozenset({"stop"}), approx_tokens).stop == ["x"]  # cut again: idempotent
