"""The versioned price book (``pricing/*.yaml``): what a second of an instance, a token, a GB-month costs.

Three kinds of resource, told apart by ``kind``:

- ``time``: an instance (CPU or GPU) at ``usd_per_hour``; ``concurrency`` is how many requests
  it serves at once when a usage record does not say how many shared its busy time.
- ``tokens``: a hosted model or embedding API at $ per 1M input / cached-input / output tokens;
  without ``cached_input_per_1m`` cached tokens bill at the input price (no discount assumed).
- ``storage``: $ per GB-month for the index in RAM and on disk, amortised per query by the
  book's ``queries_per_month``. GB here is GiB (2**30 bytes), as cloud block storage and RAM are sold.

Cost itself is computed in :mod:`ragcost.cost.compute`, never here.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field

from ragcost.config.base import Strict
from ragcost.config.loader import read_yaml, validate
from ragcost.errors import ConfigError

# A price is a finite number: `.inf` or `1e400` would make every cost $inf and every share nan%.
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
KINDS = ("time", "tokens", "storage")


class TimeResource(Strict):
    """An instance billed by the hour."""

    kind: Literal["time"]
    usd_per_hour: NonNeg
    concurrency: Annotated[int, Field(ge=1)] = 1
    # A CPU instance's vCPUs (e.g. c7i.large = 2): a CPU stage pays the CPU-seconds it consumed
    # x $/h / 3600 / vcpus. Without vcpus (a GPU) the resource is priced by busy wall time.
    vcpus: Optional[Annotated[int, Field(ge=1)]] = None
    source: str
    note: Optional[str] = None


class TokenResource(Strict):
    """A hosted model billed per 1M tokens."""

    kind: Literal["tokens"]
    input_per_1m: NonNeg
    output_per_1m: NonNeg
    cached_input_per_1m: Optional[NonNeg] = None
    source: str
    note: Optional[str] = None

    @property
    def cached_price(self) -> float:
        # An unstated cache discount is not assumed: cached tokens bill as input.
        return self.input_per_1m if self.cached_input_per_1m is None else self.cached_input_per_1m


class StorageResource(Strict):
    """Index storage billed per GiB-month."""

    kind: Literal["storage"]
    ram_usd_per_gb_month: NonNeg
    disk_usd_per_gb_month: NonNeg
    source: str
    note: Optional[str] = None


Resource = Annotated[Union[TimeResource, TokenResource, StorageResource], Field(discriminator="kind")]


class PriceBook(Strict):
    """A whole price book; ``name`` is where it came from (for messages), not part of the YAML."""

    version: str
    as_of: date
    currency: Literal["USD"] = "USD"
    queries_per_month: Annotated[int, Field(gt=0)]
    resources: dict[str, Resource]
    description: Optional[str] = None

    _name: str = "<price book>"

    @property
    def name(self) -> str:
        return self._name

    def resource(self, name: str, source_hint: str | None = None) -> TimeResource | TokenResource | StorageResource:
        """The named resource; an unknown name is a ConfigError listing the known ones."""
        try:
            return self.resources[name]
        except KeyError:
            where = f"{source_hint}: " if source_hint else ""
            known = ", ".join(sorted(self.resources)) or "(none)"
            raise ConfigError(
                f"{where}unknown resource {name!r} in {self._name} (version {self.version}); "
                f"known: {known}; add it to the price book"
            ) from None


def check_resources(book: PriceBook, refs: dict[str, str]) -> None:
    """Every resource a pipeline names (name -> "file:line:col" of the reference) must be in the book."""
    for name, where in refs.items():
        book.resource(name, where)


def parse_price_book(data: Any, source: str) -> PriceBook:
    """Validate already-parsed YAML (ruamel tree, for line numbers) as a price book."""
    if data is None:
        raise ConfigError(f"{source}: the price book is empty; see pricing/default.yaml for an example")
    book = validate(PriceBook, data, source)
    book._name = source
    return book


def load_price_book(path: str | Path) -> PriceBook:
    """Read and validate ``pricing/*.yaml``; a bad price names file:line:col and the field."""
    return parse_price_book(read_yaml(path), str(path))


def default_price_book_path() -> Path:
    """The book shipped with the repository (``pricing/default.yaml``)."""
    return Path(__file__).resolve().parents[2] / "pricing" / "default.yaml"
