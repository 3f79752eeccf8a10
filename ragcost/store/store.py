"""Old import path, kept while ``runtime/indexing.py`` and tests still import from it.

Use ``ragcost.store.base.content_hash`` and ``ragcost.store.sql.SQLStore`` (or ``open_store``).
"""

from ragcost.store.base import ChunkRecord, DocumentRecord, content_hash
from ragcost.store.sql import SQLStore as Store

__all__ = ["ChunkRecord", "DocumentRecord", "Store", "content_hash"]
