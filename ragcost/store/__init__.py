"""Document stores: the DocumentStore protocol, chosen by URL scheme; the SQLAlchemy store is the first."""

from ragcost.store.base import DocumentStore, store_registry


def open_store(url: str, collection: str, fields: dict) -> DocumentStore:
    """The store registered for ``url``'s scheme, opened (tables created or migrated)."""
    from ragcost.store.store import Store

    return Store(url, collection, fields).open()


__all__ = ["DocumentStore", "open_store", "store_registry"]
