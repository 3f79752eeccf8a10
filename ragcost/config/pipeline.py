"""The pipeline YAML: one pydantic model per block, validated once at load."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ragcost.config.base import Strict

from ragcost.config.fields import FieldType, parse_fields
from ragcost.config.index import IndexConfig

DEFAULT_PRICING = "pricing/default.yaml"  # a pipeline without pricing: falls back to the book in the package


class SourceConfig(Strict):
    path: Optional[str] = Field(None, description="file or folder, relative to the pipeline file")
    reader: Optional[str] = Field(None, description="jsonl | csv | parquet | folder | beir | pydoc-topics; inferred from path when omitted")
    duplicates: Literal["once", "keep"] = Field(
        "once", description="folder: files with the same bytes; once = the first by path is read and the copies named, "
                            "keep = every copy is a document")


class ChunkingConfig(Strict):
    size: Optional[int] = Field(
        None, ge=8, description="tokens per chunk, counted with the embedder's own tokenizer; default: the model's "
                                "window less its two special tokens (254 for all-MiniLM-L6-v2)")
    overlap: int = Field(32, ge=0, description="tokens shared by consecutive chunks")
    unit: Literal["tokens"] = "tokens"
    tail: Literal["none", "merge", "align"] = Field(
        "align", description="a last window shorter than min_tail: align = laid back to end at the text's end (measured "
                             "best on SciFact and Cranfield); merge = into the previous window; none = kept as a fragment")
    min_tail: Optional[int] = Field(None, ge=1, description="tokens below which the tail rule applies; default: half of size")
    title: Literal["every_chunk", "prepend", "dedupe", "none"] = Field(
        "every_chunk", description="where the title goes: every_chunk = before every chunk's window, the window "
                                   "shortened by the title's tokens (measured best on SciFact and Cranfield); prepend "
                                   "= before the text, so in the first chunk only, as BEIR and MTEB encode passages; "
                                   "dedupe = prepend unless the text already begins with it (ragcost 0.1); none = the "
                                   "text alone")

    @model_validator(mode="after")
    def _overlap(self) -> "ChunkingConfig":
        if self.size is not None and self.overlap >= self.size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than size ({self.size})")
        if self.size is not None and self.min_tail is not None and self.min_tail > self.size:
            raise ValueError(f"min_tail ({self.min_tail}) must be at most size ({self.size})")
        return self


class OnnxOptions(Strict):
    """How the ONNX Runtime embedder exports the model (at first use, into the ragcost cache)."""

    quantize: Literal["none", "int8"] = Field("none", description="int8: dynamic int8 quantisation of the exported "
                                                "weights (per channel); faster on CPUs with VNNI, slightly different vectors")


class StaticOptions(Strict):
    """How the static embedder distils the model (model2vec, at first use, into the ragcost cache)."""

    pca_dims: Optional[int] = Field(256, ge=8, description="PCA dimensions of the distilled token vectors; null keeps the model's")


class EmbedConfig(Strict):
    type: str = Field("sentence-transformers", description="embedder backend: sentence-transformers (torch), onnx "
                                                            "(ONNX Runtime, pip install 'ragcost[onnx]'), static (model2vec, "
                                                            "pip install 'ragcost[static]')")
    model: str = Field("all-MiniLM-L6-v2", description="a packaged model name or a local model folder; nothing is downloaded")
    dim: Optional[int] = Field(None, ge=8, description="truncate to this many dimensions and re-normalise; default: the model's")
    precision: Literal["float32", "float16", "int8", "binary"] = Field("float32", description="how the index stores vectors")
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="the number format the model computes in (type sentence-transformers): bfloat16 ran at "
                               "2.8x float32's texts/s on a CPU with AMX (bench.embed), with vectors within cosine 0.9999 "
                               "of float32's, and slower than float32 on a CPU without them")
    batch_size: int = Field(64, ge=1, description="texts per encode batch")
    single_thread_chars: int = Field(
        512, ge=0, description="type sentence-transformers on CPU: an encode whose texts total fewer characters than "
                               "this (one query, a few answer sentences) runs on one torch thread; a second thread "
                               "only waits to join on so little work (python -m bench.demo_latency --part threads); "
                               "longer encodes use every core (or RAGCOST_TORCH_THREADS); 0 = never")
    device: Literal["cpu", "cuda", "auto"] = Field("auto", description="auto = cuda when available")
    resource: Optional[str] = Field(None, description="price-book resource; default: the pipeline's")
    onnx: Optional[OnnxOptions] = Field(None, description="options of type: onnx")
    static: Optional[StaticOptions] = Field(None, description="options of type: static")

    @model_validator(mode="after")
    def _options_match_type(self) -> "EmbedConfig":
        for key in ("onnx", "static"):
            if getattr(self, key) is not None and self.type != key:
                raise ValueError(f"{key} options are set but type is {self.type!r}; set type: {key} or remove {key}")
        if self.dtype != "float32" and self.type != "sentence-transformers":
            raise ValueError(f"dtype {self.dtype} is for type sentence-transformers, not {self.type!r}; remove dtype "
                             "(for a faster onnx runtime use onnx: {quantize: int8})")
        return self


class UsefulConfig(Strict):
    """How `ragcost query` decides a retrieved document was useful (evaluation uses qrels instead)."""

    judge: Literal["score", "cited", "calibrated"] = Field(
        "score", description="score: final score >= threshold; cited: cited by the answer (and, where a grounded check ran, "
        "supported); calibrated: the expected number of relevant documents, the sum of each final document's "
        "P(relevant) from the calibration `ragcost eval --write` fits on qrels")
    calibration: Optional[str] = Field(None, description="judge: calibrated: the calibration file, relative to the pipeline; "
                                       "default <pipeline name>.calibration.json beside it")
    threshold: float = Field(0.5, allow_inf_nan=False, description="for judge: score: the last scoring stage's score "
                             "(cosine for retrieve and rescore, RRF for hybrid, the cross-encoder's); checked at load "
                             "against that stage's scale; `ragcost eval` calibrates it from relevance judgments")
    precision: float = Field(0.5, gt=0, le=1, description="what `ragcost eval` calibrates the threshold for: the share of "
                             "retrieved documents above it that the qrels judge relevant")
    objective: Literal["precision", "f1"] = Field("precision", description="what `ragcost eval` fits the threshold for: "
                                                  "precision (at least useful.precision) or f1 (the best F1)")
    min_recall: Optional[float] = Field(None, gt=0, le=1, description="objective: precision with a recall floor: the "
                                        "most precise threshold that keeps at least this share of the relevant documents")


class TracingConfig(Strict):
    """OpenTelemetry spans per stage (GenAI semantic conventions + cost), tail-sampled."""

    enabled: bool = Field(False, description="emit spans through the global OpenTelemetry tracer provider (pip install 'ragcost[otel]')")
    sample_fraction: float = Field(0.1, ge=0, le=1, description="share of ordinary queries kept; errors and queries slower than the running p95 are always kept")


REPLICA_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"  # a bounded label value: names a server, never a request
REPLICA_RULE = "use 1-64 letters, digits and . _ : - (starting with a letter or digit), e.g. web-1"


class ServeConfig(Strict):
    """`ragcost serve`: micro-batching, backpressure, limits and where API keys come from."""

    batch_window_ms: float = Field(5.0, ge=0, le=10_000, description="gather concurrent requests this long into one batch; 0 runs each request alone")
    max_batch: int = Field(64, ge=1, le=4096, description="most requests in one batch")
    max_queue: int = Field(256, ge=1, description="requests waiting beyond those running; more get 429 with Retry-After")
    deadline_s: float = Field(30.0, gt=0, description="a request not answered by then gets 504 and is recorded as such")
    max_body_bytes: int = Field(65_536, ge=256, description="larger request bodies get 413")
    keys: Optional[str] = Field(None, description="where API keys live: file:PATH (JSON, relative to the pipeline) or env:VAR; "
                                "maps each key to {tenant, filter}; never the keys themselves. None: no auth (loopback use)")
    keys_reload_s: float = Field(2.0, gt=0, le=3600, description="a keys file is read again this often when it changed (and on SIGHUP): revoked keys stop working")
    metrics_key: Optional[str] = Field(None, description="/metrics needs Authorization: Bearer TOKEN, the token read from file:PATH or env:VAR; None: open")
    refusal: str = Field("I can't help with that request.", min_length=1, description="the answer sent for a query a guard blocked (finish_reason content_filter)")
    header_timeout_s: float = Field(10.0, gt=0, le=600, description="a client must send its request line and headers within this, else the connection is closed")
    body_timeout_s: float = Field(10.0, gt=0, le=600, description="a client must send its whole body within this, else 408")
    http: Literal["auto", "httptools", "h11"] = Field("auto", description="the HTTP/1.1 parser: httptools (llhttp, C) or h11 "
                                                      "(pure Python; a 429 costs 1.5x the server CPU); auto: httptools when installed, else h11")
    drain_s: float = Field(30.0, gt=0, le=3600, description="on SIGTERM, requests in flight get this long to finish before the server exits")
    admission: Literal["deadline", "queue"] = Field("deadline", description="deadline: admit a request only when the measured service rate says it can finish "
                                                    "before deadline_s (else 429 with Retry-After from the drain rate); queue: only max_queue bounds the wait")
    gil_switch_ms: float = Field(0.25, ge=0.01, le=100, description="the interpreter's thread switch interval while serving "
                                 "(sys.setswitchinterval): the event loop that admits, refuses and answers requests waits at most about "
                                 "this long for the batch thread's Python work to let go; Python's default is 5")
    gc_full_s: float = Field(300.0, ge=0, le=86_400, description="while serving, the collector's full (oldest-generation) "
                             "collections are not left to its thresholds: one runs when the server has gone idle (nothing queued or "
                             "running) after serving, and under unbroken load at the latest this many seconds after the last; a full "
                             "collection walks every live object and holds the GIL throughout: at 2x saturation the collector's own rule "
                             "ran one every 10-20 s, each 30-90 ms of CPU during which no request (nor 429) was answered; "
                             "0: Python's own thresholds")
    warmup_queries: int = Field(8, ge=0, le=4096, description="at startup, before it says ready, the server runs a batch of 1 and a batch of this "
                                "many copies of a question made from the first stored chunk (recorded in no ledger) to measure its service "
                                "time, which admission by deadline goes by until real batches replace it; skipped for a pipeline with a "
                                "cache stage (the warm-up answer would be cached); 0: none (a cold server then admits one batch "
                                "until the first ends)")

    replica: Optional[str] = Field(None, description="this server's name among replicas sharing one ledger and cache: on its ledger rows, "
                                   "its lifetime rows and every /metrics sample's replica label (`ragcost serve --replica` overrides "
                                   "it); null: host:port. 1-64 letters, digits and . _ : -")

    cors_origins: list[str] = Field(default_factory=list, description="browser origins allowed to call the server "
                                    "(CORS), e.g. [https://app.example.com]; '*' allows any. Empty (the default): no "
                                    "CORS headers. Once set, a request from another origin is a 403 and runs nothing")

    @field_validator("cors_origins")
    @classmethod
    def _cors_origins(cls, v: list[str]) -> list[str]:
        for o in v:
            if o != "*" and not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:\d{1,5})?", o):
                raise ValueError(f"{o!r} is not an origin: write scheme://host[:port] with no path or trailing slash, "
                                 "e.g. https://app.example.com, or '*' for any")
        return v

    @field_validator("keys", "metrics_key")
    @classmethod
    def _keys(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.fullmatch(r"(file|env):.+", v):
            raise ValueError("use file:PATH or env:VAR; the keys themselves never go in the YAML")
        return v

    @field_validator("replica")
    @classmethod
    def _replica(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.fullmatch(REPLICA_PATTERN, v):
            raise ValueError(REPLICA_RULE)
        return v


class RayOptions(Strict):
    """How ``executor: ray`` embeds: Ray Data ``map_batches`` over a pool of actors, each loading the model once."""

    address: Optional[str] = Field(None, description="the cluster to join: its GCS host:port (as `ray start --head` prints "
                                   "it), ray://host:port, or auto; null starts a private local Ray for the run")
    workers: int = Field(2, ge=1, le=1024, description="embedding actors; each holds one copy of the model")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs each actor reserves (its torch threads)")
    connect_timeout_s: float = Field(10.0, gt=0, le=600, description="a cluster that does not answer within this is an error naming the address")


class StageConfig(BaseModel):
    """A stage: ``type`` names a registered stage, the other keys are its own params (validated by it)."""

    model_config = ConfigDict(extra="allow")
    type: str


class PipelineConfig(Strict):
    name: str = Field(description="short name; names the store tables and the index folder")
    store: Optional[str] = Field(None, description="SQLAlchemy URL; default duckdb:///.ragcost/<name>.duckdb")
    metadata: dict[str, str] = Field(default_factory=dict, description='typed filterable fields, e.g. {year: int, tags: "list[str]"}')
    source: Optional[Union[str, SourceConfig]] = Field(None, description="default source for `ragcost index`")
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    embed: EmbedConfig = Field(default_factory=EmbedConfig)
    index: Union[str, IndexConfig] = Field(default_factory=IndexConfig, description="an index YAML path or an inline index config")
    index_dir: Optional[str] = Field(None, description="where the built index lives; default .ragcost/<name>/index")
    pricing: str = Field(DEFAULT_PRICING, description="price book, relative to the pipeline file or the working directory; "
                         "left out, pricing/default.yaml there, else the default book shipped in the package")
    resource: str = Field("cpu", description="price-book resource that time-priced stages run on")
    useful: UsefulConfig = Field(default_factory=UsefulConfig, description="the query-time judge of a useful retrieved document")
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    stages: list[StageConfig] = Field(default_factory=lambda: [StageConfig(type="retrieve")])
    serve: ServeConfig = Field(default_factory=ServeConfig, description="`ragcost serve` settings")
    redact: list[str] = Field(default_factory=list, description="guard checks that redact documents before they are stored, e.g. [pii] (checked against the guard registry at load)")
    executor: Literal["local", "ray"] = Field("local", description="where `ragcost index` and `ragcost eval` embed the corpus: "
                                              "local (this process) or ray (a Ray cluster, pip install 'ragcost[ray]')")
    ray: Optional[RayOptions] = Field(None, description="options of executor: ray")

    @model_validator(mode="after")
    def _ray_options_need_ray(self) -> "PipelineConfig":
        if self.ray is not None and self.executor != "ray":
            raise ValueError(f"ray options are set but executor is {self.executor!r}; set executor: ray or remove ray")
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", v):
            raise ValueError("use letters, digits, '-' and '_' (it names tables and folders)")
        return v

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, v: dict[str, str]) -> dict[str, str]:
        parse_fields(v)
        return v

    @property
    def fields(self) -> dict[str, FieldType]:
        return parse_fields(self.metadata)

    @property
    def store_url(self) -> str:
        return self.store or f"duckdb:///.ragcost/{self.name}.duckdb"

    @property
    def index_path(self) -> Path:
        return Path(self.index_dir or f".ragcost/{self.name}/index")

    @property
    def ray_options(self) -> RayOptions:
        return self.ray or RayOptions()

    @property
    def source_config(self) -> SourceConfig:
        if self.source is None:
            return SourceConfig()
        return SourceConfig(path=self.source) if isinstance(self.source, str) else self.source


def stage_params(stage: StageConfig) -> dict[str, Any]:
    return {k: v for k, v in stage.model_dump().items() if k != "type"}
