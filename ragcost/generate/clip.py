"""A request's ``stop`` and ``max_tokens`` applied to any backend's text, streamed or whole.

A server that honours them natively stops by itself (cutting again finds nothing); a backend
without a server (extractive) is cut here, so every generator honours both. While streaming,
the last ``len(longest stop) - 1`` characters are held back until it is clear they do not begin
a stop sequence: no piece of a stop sequence ever leaves.
"""

from __future__ import annotations

from typing import Callable, Optional


class Clip:
    def __init__(self, stop: list[str], max_tokens: Optional[int], count: Callable[[str], int]) -> None:
        self.stop = [s for s in stop if s]
        self.max_tokens = max_tokens
        self.count = count
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.text = ""
        self.sent = 0  # characters already passed on
        self.finish: Optional[str] = None  # "stop" or "length" once the text was cut

    @classmethod
    def of(cls, options: dict, native: frozenset, count: Callable[[str], int]) -> Optional["Clip"]:
        """The clip a request's options need (None when there is nothing to cut); ``native`` options the server applies."""
        stop = options.get("stop") or []
        max_tokens = options.get("max_tokens") if "max_tokens" not in native else None
        if not stop and max_tokens is None:
            return None
        return cls([stop] if isinstance(stop, str) else list(stop), max_tokens, count)

    def _end(self, text: str) -> int:
        """Where ``text`` is cut (len(text) when it is not), setting ``finish``."""
        end = len(text)
        hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if hits:
            end, self.finish = min(hits), "stop"
        if self.max_tokens is not None and self.count(text[:end]) > self.max_tokens:
            lo, hi = 0, end  # the longest prefix within the budget (counts grow with the prefix)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self.count(text[:mid]) <= self.max_tokens:
                    lo = mid
                else:
                    hi = mid - 1
            end, self.finish = lo, "length"
        return end

    def feed(self, piece: str) -> str:
        """What of the stream may leave now."""
        if self.finish is not None:
            return ""
        self.text += piece
        end = self._end(self.text)
        safe = end if self.finish is not None else max(self.sent, len(self.text) - self.hold)
        out, self.sent = self.text[self.sent:safe], max(self.sent, safe)
        return out

    def close(self, text: str) -> tuple[str, str]:
        """(the final text, what of it has not left yet), from the backend's whole ``text``."""
        self.finish = None
        end = self._end(text)
        final = text[:end]
        return final, final[self.sent:] if len(final) > self.sent else ""
