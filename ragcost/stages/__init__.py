"""Built-in stages, registered by short name on import."""

from ragcost.stages import retrieve as _retrieve  # noqa: F401
from ragcost.stages import generate as _generate  # noqa: F401
from ragcost.stages import rerank as _rerank  # noqa: F401
from ragcost.stages import guard as _guard  # noqa: F401
from ragcost.stages import cache as _cache  # noqa: F401
from ragcost.stages import route as _route  # noqa: F401
from ragcost.records import Hit, QueryState
from ragcost.stages.base import Stage, StageParams, stage_registry

__all__ = ["Hit", "QueryState", "Stage", "StageParams", "stage_registry"]
