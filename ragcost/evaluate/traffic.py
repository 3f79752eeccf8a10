"""The traffic eval prices a configuration at: how many queries reach the model in one call when served.

Batching makes a query's embedding several times cheaper, but only when queries arrive together. The
price book declares the traffic (``queries_per_month``: 1M a month is 0.38 queries a second), and at
that rate a server almost never has two queries in hand at once, so eval prices one query at a time
unless told otherwise:

- ``one`` (the default for a pipeline that sets no ``serve:`` batch window): batches of 1;
- ``serve`` (the default when the pipeline sets ``serve.batch_window_ms``): the batch `ragcost serve`
  forms at the book's declared rate, ``1 + rate x window`` queries rounded (arrivals in the window
  join the first), at most ``serve.max_batch``;
- ``N`` (an integer, ``--traffic 64``): batches of N, e.g. a nightly batch job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ragcost.errors import ConfigError

SECONDS_PER_MONTH = 730 * 3600  # the month of ragcost.cost.bill (730 hours)
MAX_BATCH = 4096


@dataclass(frozen=True)
class Traffic:
    """Queries per call, and the words that say where that number came from."""

    batch: int
    how: str  # "one", "serve" or "option"
    label: str

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "how": self.how, "label": self.label}


def declared_rate(book: Any) -> float:
    """Queries per second at the price book's declared traffic."""
    return float(book.queries_per_month) / SECONDS_PER_MONTH


def resolve(pipe: Any, option: Optional[str] = None) -> Traffic:
    """The traffic for ``pipe``: ``option`` (one, serve or an integer) when given, else the pipeline's."""
    book = pipe.price_book
    rate = declared_rate(book)
    per_month = f"{book.queries_per_month:,} queries/month"
    if option is None:
        option = "serve" if "batch_window_ms" in pipe.config.serve.model_fields_set else "one"
    text = str(option).strip().lower()
    if text in ("one", "1"):
        return Traffic(1, "one", f"one query at a time (the book's {per_month}, {rate:.2g}/s)")
    if text == "serve":
        s = pipe.config.serve
        batch = max(1, min(s.max_batch, round(1 + rate * s.batch_window_ms / 1000)))
        return Traffic(batch, "serve", f"batches of {batch}: serve's {s.batch_window_ms:g} ms window at the book's {per_month} "
                                       f"({rate:.2g}/s)")
    try:
        batch = int(text)
    except ValueError:
        batch = 0
    if not 1 <= batch <= MAX_BATCH:
        raise ConfigError(f"--traffic {option!r}: use one, serve or a batch size 1-{MAX_BATCH} (e.g. --traffic 64 for a batch job)")
    return Traffic(batch, "option", f"batches of {batch} (--traffic {batch})")
