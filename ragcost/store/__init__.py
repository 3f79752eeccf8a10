"""Document stores: the DocumentStore protocol, chosen by URL scheme; the SQLAlchemy store is the first."""

from ragcost.errors import StoreError
from ragcost.urls import shown_url, url_problem
from ragcost.store.base import ChunkRecord, DocumentRecord, DocumentStore, content_hash, store_registry
from ragcost.store.sql import SQLStore  # noqa: F401  (registers duckdb and postgresql)

EXAMPLE_URL = "duckdb:///.ragcost/kb.duckdb"


def scheme_of(url: str) -> str:
    """The backend name of a store URL (``postgresql+psycopg://`` -> ``postgresql``)."""
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(url).get_backend_name()
    except Exception:  # noqa: BLE001  (any unparsable URL gets the same one-line answer)
        raise StoreError(f"store URL {shown_url(url)!r} is not a database URL; example: {EXAMPLE_URL}") from None


def open_store(url: str, collection: str, fields: dict, read_only: bool = False) -> DocumentStore:
    """The store registered for ``url``'s scheme, opened (tables created or migrated; ``read_only``: neither,
    where the store supports it)."""
    scheme = scheme_of(url)
    problem = url_problem(url)
    if problem:
        raise StoreError(f"store {problem}")
    if scheme not in store_registry:
        raise StoreError(f"store URL {shown_url(url)!r}: no store for scheme {scheme!r}; installed: {store_registry.known()}; "
                         f"example: {EXAMPLE_URL}")
    store = store_registry.get(scheme)(url, collection, fields)
    return store.open(read_only=True) if read_only and _takes_read_only(store) else store.open()


def _takes_read_only(store) -> bool:
    import inspect

    return "read_only" in inspect.signature(store.open).parameters


__all__ = ["ChunkRecord", "DocumentRecord", "DocumentStore", "SQLStore", "content_hash", "open_store", "scheme_of",
           "store_registry"]
