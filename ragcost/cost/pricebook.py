"""The versioned price book (``pricing/*.yaml``): what a second of an instance, a token, a GB-month costs.

Three kinds of resource, told apart by ``kind``:

- ``time``: an instance (CPU or GPU) at ``usd_per_hour``; ``concurrency`` is how many requests
  it serves at once when a usage record does not say how many shared its busy time.
- ``tokens``: a hosted model or embedding API at $ per 1M input / cached-input / output tokens;
  without ``cached_input_per_1m`` cached tokens bill at the input price (no discount assumed).
- ``storage``: $ per GB-month for the index in RAM and on disk, amortised per query by the
  book's ``queries_per_month``. GB here is GiB (2**30 bytes), as cloud block storage and RAM are sold.

A book may also declare ``fleet``: always-on capacity that ragcost does not run itself (a vLLM GPU
server, a hosted vector database on an instance), as a count of instances of a ``time`` resource::

    fleet:
      gpu-h100: {count: 2, note: "two vLLM servers behind the load balancer, on all month"}

Every hour of a report's window then pays ``count x usd_per_hour`` of that resource, busy or not
(:mod:`ragcost.cost.bill`). A fleet entry naming an unknown or non-time resource is refused.

A book may declare ``wrong_answer_usd``: what one wrong answer costs its user, the price at which
``ragcost report`` charges the answer cache's expected false hits (:mod:`ragcost.cache.savings`).

Every price names its ``source`` (a URL or a document, never empty) and the date it was taken
(``as_of``: its own, else the book's); a date in the future or before 2000 is refused, and a price
older than the book's ``max_age_days`` (default 365) is reported stale by :func:`book_age`.

Cost itself is computed in :mod:`ragcost.cost.compute`, never here.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, Field, model_validator

from ragcost.config.base import Strict, position
from ragcost.config.loader import read_yaml, validate
from ragcost.errors import ConfigError

# A price is a finite number: `.inf` or `1e400` would make every cost $inf and every share nan%.
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
KINDS = ("time", "tokens", "storage")
EARLIEST = date(2000, 1, 1)  # no cloud or API list price this book prices is older


def today_utc() -> date:
    return datetime.now(timezone.utc).date()


def _past_date(v: date) -> date:
    # One day of grace: a price taken "today" east of UTC is tomorrow's date in UTC.
    if v > today_utc() + timedelta(days=1):
        raise ValueError(f"{v} is in the future; use the date the price was published or observed")
    if v < EARLIEST:
        raise ValueError(f"{v} is before {EARLIEST}; use the date the price was published or observed")
    return v


def _named_source(v: str) -> str:
    if not v.strip():
        raise ValueError("is empty; name the URL or document the price was taken from")
    return v


PriceDate = Annotated[date, AfterValidator(_past_date)]
Source = Annotated[str, AfterValidator(_named_source)]


class TimeResource(Strict):
    """An instance billed by the hour."""

    kind: Literal["time"]
    usd_per_hour: NonNeg
    concurrency: Annotated[int, Field(ge=1)] = 1
    # A CPU instance's vCPUs (e.g. c7i.large = 2): a CPU stage pays the CPU-seconds it consumed
    # x $/h / 3600 / vcpus. Without vcpus (a GPU) the resource is priced by busy wall time.
    vcpus: Optional[Annotated[int, Field(ge=1)]] = None
    # Its memory, GiB: `ragcost plan` corpus mode fits index shards into it.
    ram_gib: Optional[Annotated[float, Field(gt=0)]] = None
    source: Source
    as_of: Optional[PriceDate] = None  # when this price was published/observed; default: the book's as_of
    note: Optional[str] = None


class TokenResource(Strict):
    """A hosted model billed per 1M tokens."""

    kind: Literal["tokens"]
    input_per_1m: NonNeg
    output_per_1m: NonNeg
    cached_input_per_1m: Optional[NonNeg] = None
    source: Source
    as_of: Optional[PriceDate] = None  # when this price was published/observed; default: the book's as_of
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
    source: Source
    as_of: Optional[PriceDate] = None  # when this price was published/observed; default: the book's as_of
    note: Optional[str] = None


Resource = Annotated[Union[TimeResource, TokenResource, StorageResource], Field(discriminator="kind")]


MAX_FLEET = 100_000  # instances of one resource always on: more is a typo (10**15 GPUs), not a fleet


class FleetEntry(Strict):
    """Always-on instances of one time resource, paid for every hour whether they serve or idle."""

    count: Annotated[int, Field(ge=0, le=MAX_FLEET, description=f"instances always on (0 = none), at most {MAX_FLEET:,}")]
    note: Optional[str] = None

    @model_validator(mode="before")
    @classmethod
    def _a_mapping(cls, data: Any) -> Any:
        if isinstance(data, (int, float, str)) and not isinstance(data, bool):
            raise ValueError(f"a fleet entry is a mapping: write {{count: {data}}} (and an optional note: ...)")
        return data


class PriceBook(Strict):
    """A whole price book; ``name`` is where it came from (for messages), not part of the YAML."""

    version: Annotated[str, Field(min_length=1)]
    as_of: PriceDate  # when the book was compiled; a price without its own as_of is taken as of this date
    max_age_days: Annotated[int, Field(gt=0)] = 365  # older prices are reported stale by `ragcost report`
    currency: Literal["USD"] = "USD"
    queries_per_month: Annotated[int, Field(gt=0)]
    resources: dict[str, Resource]
    fleet: dict[str, FleetEntry] = Field(default_factory=dict)  # always-on capacity ragcost does not run
    wrong_answer_usd: Optional[NonNeg] = Field(None, description="what one wrong answer costs you, $ (a cache's false "
                                               "hit): `ragcost report` prices the cache's expected false hits with it; "
                                               "unset: not priced")
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


def price_date(book: PriceBook, name: str) -> date:
    """The date resource ``name``'s price was taken: its own ``as_of``, else the book's."""
    return book.resource(name).as_of or book.as_of


def book_age(book: PriceBook, today: Optional[date] = None) -> dict[str, Any]:
    """Version, dates and age of a book, and its prices older than ``max_age_days`` (oldest first).

    Plain values, for ``report --json`` and the terminal alike.
    """
    today = today or today_utc()
    dated = sorted((price_date(book, n), n) for n in book.resources)
    stale = [{"resource": n, "as_of": d.isoformat(), "age_days": (today - d).days}
             for d, n in dated if (today - d).days > book.max_age_days]
    oldest = dated[0] if dated else (book.as_of, None)
    return {
        "name": book.name, "version": book.version, "as_of": book.as_of.isoformat(),
        "oldest_price": {"resource": oldest[1], "as_of": oldest[0].isoformat(), "age_days": (today - oldest[0]).days},
        "max_age_days": book.max_age_days, "stale": stale,
    }


def stale_warning(age: dict[str, Any]) -> Optional[str]:
    """One line naming the prices older than ``max_age_days``, or None when none is."""
    stale = age["stale"]
    if not stale:
        return None
    listed = ", ".join(f"{s['resource']} ({s['as_of']}, {s['age_days']} days)" for s in stale)
    return (f"warning: {len(stale)} price(s) in {age['name']} (version {age['version']}) are older than "
            f"max_age_days {age['max_age_days']}: {listed}; check them against current list prices and your bill, "
            f"then update as_of and bump version")


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
    for name, res in book.resources.items():
        if res.as_of is not None and res.as_of > book.as_of:
            pos = position(data, ["resources", name, "as_of"])
            where = f"{source}:{pos[0]}:{pos[1]}" if pos else source
            raise ConfigError(f"{where}: resources.{name}.as_of: {res.as_of} is after the book's as_of {book.as_of}; "
                              f"a price cannot be newer than the book that lists it: update the book's as_of and version")
    for name, entry in book.fleet.items():
        pos = position(data, ["fleet", name])
        where = f"{source}:{pos[0]}:{pos[1]}" if pos else source
        res = book.resources.get(name)
        if res is None:
            known = ", ".join(sorted(n for n, r in book.resources.items() if r.kind == "time")) or "(none)"
            raise ConfigError(f"{where}: fleet.{name}: unknown resource {name!r}; a fleet entry names a time resource "
                              f"of this book (known: {known}) -- add it under resources or fix the name")
        if not isinstance(res, TimeResource):
            raise ConfigError(f"{where}: fleet.{name}: resource {name!r} is {res.kind}-priced; always-on capacity "
                              "is an instance billed by the hour (kind: time)")
    return book


def load_price_book(path: str | Path) -> PriceBook:
    """Read and validate ``pricing/*.yaml``; a bad price names file:line:col and the field."""
    return parse_price_book(read_yaml(path), str(path))


def default_price_book_path() -> Path:
    """The default book, shipped inside the package (the repository's ``pricing/default.yaml`` links to it)."""
    return Path(__file__).resolve().parent / "books" / "default.yaml"
