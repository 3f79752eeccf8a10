"""Index configuration: backend and kind, with build parameters kept apart from search parameters."""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoParams(_Strict):
    pass


class HNSWBuild(_Strict):
    M: int = Field(16, ge=2, le=256, description="graph degree (hnswlib M / faiss HNSW M)")
    ef_construction: int = Field(200, ge=8, description="candidate list size while building")


class HNSWSearch(_Strict):
    ef: int = Field(64, ge=1, description="candidate list size while searching (raised to k when smaller)")


class IVFBuild(_Strict):
    nlist: Union[int, Literal["auto"]] = Field(
        "auto", description="number of coarse clusters; auto = about 4*sqrt(N), at least 39 points each"
    )


class IVFSearch(_Strict):
    nprobe: int = Field(16, ge=1, description="clusters visited per query")


class IVFPQBuild(IVFBuild):
    m: int = Field(48, ge=1, description="sub-quantizers; must divide the dimension")
    nbits: int = Field(8, ge=1, le=16, description="bits per sub-quantizer code")


BUILD_PARAMS: dict[str, type[_Strict]] = {
    "flat": NoParams,
    "hnsw": HNSWBuild,
    "ivf_flat": IVFBuild,
    "ivf_pq": IVFPQBuild,
}
SEARCH_PARAMS: dict[str, type[_Strict]] = {
    "flat": NoParams,
    "hnsw": HNSWSearch,
    "ivf_flat": IVFSearch,
    "ivf_pq": IVFSearch,
}
KINDS_BY_BACKEND = {"hnswlib": ("hnsw",), "faiss": ("flat", "hnsw", "ivf_flat", "ivf_pq")}


def _sub(model: type[_Strict], data: dict, where: str, kind: str) -> dict:
    try:
        return model.model_validate(data).model_dump()
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(x) for x in err["loc"])
        known = ", ".join(model.model_fields) or "none"
        if err["type"] == "extra_forbidden":
            raise ValueError(f"{where}.{key}: unknown {where} parameter for kind {kind!r}; known: {known}") from None
        raise ValueError(f"{where}.{key}: {err['msg']} (got {err.get('input')!r})") from None


class IndexConfig(_Strict):
    """One vector index. ``build`` makes the artifact; ``search`` can change per query or sweep."""

    backend: Literal["hnswlib", "faiss"] = Field("hnswlib", description="index library")
    kind: Literal["flat", "hnsw", "ivf_flat", "ivf_pq"] = Field("hnsw", description="index structure")
    build: dict[str, Any] = Field(default_factory=dict, description="build parameters for this kind")
    search: dict[str, Any] = Field(default_factory=dict, description="search parameters for this kind")
    device: Literal["cpu", "gpu"] = Field("cpu", description="gpu uses faiss-gpu when installed")
    threads: int = Field(0, ge=0, description="threads for build and batch search; 0 = all cores")

    @model_validator(mode="after")
    def _check(self) -> "IndexConfig":
        kinds = KINDS_BY_BACKEND[self.backend]
        if self.kind not in kinds:
            raise ValueError(
                f"backend {self.backend!r} has no kind {self.kind!r}; use one of {', '.join(kinds)}"
                + (" or backend: faiss" if self.backend == "hnswlib" else "")
            )
        if self.device == "gpu" and self.backend != "faiss":
            raise ValueError("device: gpu needs backend: faiss (hnswlib is CPU only)")
        # Validate eagerly so a typo in build/search fails at load, not at build time.
        self.build = _sub(BUILD_PARAMS[self.kind], self.build, "build", self.kind)
        self.search = _sub(SEARCH_PARAMS[self.kind], self.search, "search", self.kind)
        return self

    def build_params(self) -> Any:
        return BUILD_PARAMS[self.kind].model_validate(self.build)

    def search_params(self, **overrides: Any) -> Any:
        return SEARCH_PARAMS[self.kind].model_validate({**self.search, **overrides})
