"""The answer cache's backend layer: normalising, version-tied keys, entries, storage backends, the false-hit bound.

The stages that use it (``cache`` before retrieve/generate, ``cache_write`` after generate) live in
``ragcost.stages.cache``; this package imports nothing above the backend layer.
"""

from ragcost.cache.backends import CacheBackend, cache_backend_registry, open_backend
from ragcost.cache.bound import ThresholdLearner, wilson_upper
from ragcost.cache.entry import CacheEntry
from ragcost.cache.keys import exact_key, scope_key
from ragcost.cache.normalise import Normaliser

__all__ = ["CacheBackend", "CacheEntry", "Normaliser", "ThresholdLearner", "cache_backend_registry",
           "exact_key", "open_backend", "scope_key", "wilson_upper"]
