"""The stage contract: validated params, cheap __init__, optional warm_up, one batch method."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ragcost.cost.usage import UsageRecord
from ragcost.registry import Registry

if TYPE_CHECKING:
    from ragcost.pipeline import Pipeline


class StageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Optional[str] = Field(None, description="label in reports; default: the stage type")
    resource: Optional[str] = Field(None, description="price-book resource; default: the pipeline's")


@dataclass(slots=True)  # many per query: slots make them cheaper to build and smaller
class Hit:
    label: int
    doc_id: str
    score: float
    title: str = ""
    text: str = ""
    chunk_no: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class QueryState:
    """One query as it flows through the stages."""

    text: str
    id: str = ""
    k: int = 10
    filter: Optional[dict] = None
    vector: Optional[np.ndarray] = None
    hits: list[Hit] = field(default_factory=list)
    answer: Optional[str] = None
    citations: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)  # per-query facts a stage reports (strategy, truncation)
    error: Optional[str] = None


class Stage(ABC):
    """A stage reports only what it alone knows (tokens, strategies, bytes) on the usage record."""

    type: ClassVar[str]
    Params: ClassVar[type[StageParams]] = StageParams

    def __init__(self, params: StageParams, pipeline: "Pipeline") -> None:
        self.params = params
        self.pipeline = pipeline

    @property
    def name(self) -> str:
        return self.params.name or self.type

    @property
    def resource(self) -> str:
        return self.params.resource or self.pipeline.config.resource

    def warm_up(self) -> None:
        """Load heavy things once, before the first batch."""

    @abstractmethod
    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        """Process a batch; fill ``usage`` with what only this stage knows."""


stage_registry: Registry[type[Stage]] = Registry("stage type")
