"""The prompt: retrieved chunks numbered [1], [2], ... within a token budget; citations parsed back."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

from ragcost.errors import ConfigError, DependencyError
from ragcost.generate.params import BackendParams
from ragcost.records import Hit

CITE = re.compile(r"\[(\d{1,3})\]")


@dataclass
class Prompt:
    """What one request sends, and which chunk each [n] stands for."""

    system: str
    user: str
    sources: list[Hit] = field(default_factory=list)  # sources[n-1] is [n]
    context_tokens: int = 0  # counted with the backend's counter
    dropped: int = 0  # chunks left out by the budget
    question: str = ""  # the query as asked, for backends that answer without an LLM (extractive)
    options: dict = field(default_factory=dict)  # request options the backend's server applies (QueryState.options)

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]

    def text(self) -> str:
        """The plain prompt for /v1/completions and vllm.LLM.generate."""
        return f"{self.system}\n\n{self.user}"


def approx_tokens(text: str) -> int:
    # ~4 characters a token for English BPE vocabularies; set `tokenizer:` for exact counts.
    return (len(text) + 3) // 4


@lru_cache(maxsize=8)
def _tokenizer(path: str):
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - tokenizers ships with transformers
        raise DependencyError("generate: tokenizer: needs the `tokenizers` package; pip install tokenizers") from None
    p = Path(path)
    f = p / "tokenizer.json" if p.is_dir() else p
    if not f.is_file():
        raise ConfigError(f"generate: tokenizer: {path!r} has no tokenizer.json; give the model folder or the file")
    return Tokenizer.from_file(str(f))


def token_counter(params: BackendParams) -> Callable[[str], int]:
    if params.tokenizer is None:
        return approx_tokens
    tok = _tokenizer(params.tokenizer)
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def _fit(text: str, budget: int, count: Callable[[str], int]) -> str:
    """The longest word prefix of ``text`` within ``budget`` tokens (binary search on words)."""
    words = text.split()
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def build_prompt(question: str, hits: list[Hit], params: BackendParams, count: Optional[Callable[[str], int]] = None) -> Prompt:
    """Number the top chunks [1..n] and keep as many whole chunks as ``context_tokens`` allows.

    The first chunk is cut to the budget rather than dropped, so a prompt always has context
    when anything was retrieved.
    """
    count = count or token_counter(params)
    blocks: list[str] = []
    sources: list[Hit] = []
    used = 0
    candidates = hits[: params.max_chunks]
    for h in candidates:
        n = len(sources) + 1
        head = f"[{n}] {h.title}\n" if h.title else f"[{n}] "
        body = " ".join(h.passage.split())  # the title is in the head: not twice
        block = head + body
        cost = count(block) + 1  # +1 for the blank line between blocks
        if used + cost > params.context_tokens:
            if sources:
                break
            block = head + _fit(body, params.context_tokens - count(head) - 1, count)
            cost = count(block) + 1
        blocks.append(block)
        sources.append(h)
        used += cost
    context = "\n\n".join(blocks) if blocks else "(no passages were retrieved)"
    user = params.template.format(context=context, question=question)
    return Prompt(params.system, user, sources, used, len(candidates) - len(sources), question)


def cited(answer: str, sources: list[Hit]) -> list[str]:
    """Document ids the answer cites as [n], in first-cited order; numbers out of range are ignored."""
    out: list[str] = []
    for m in CITE.finditer(answer or ""):
        n = int(m.group(1))
        if 1 <= n <= len(sources) and sources[n - 1].doc_id not in out:
            out.append(sources[n - 1].doc_id)
    return out
