"""The small, flat family of ragcost errors.

Every message names the stage, file or field, the bad value, and the fix. The CLI
prints ``str(error)`` on one line and exits non-zero; ``--debug`` shows the traceback.
"""


class RagcostError(Exception):
    """Base class: a user-facing problem with a one-line message."""


class ConfigError(RagcostError):
    """A pipeline, index or price-book file is malformed or invalid."""


class UnknownNameError(ConfigError):
    """A YAML `type`/`backend`/`reader` names nothing registered."""


class FilterError(RagcostError):
    """A metadata filter expression is malformed or names an unknown field/operator."""


class IngestError(RagcostError):
    """A source cannot be read (missing path, unknown format, bad record)."""


class StoreError(RagcostError):
    """The document store cannot be opened or does not match the pipeline."""


class FingerprintError(RagcostError):
    """An artifact was made by something other than what the pipeline now says."""


class DependencyError(RagcostError):
    """An optional dependency (faiss-gpu, vllm, ...) is missing; the message says how to install it."""


class StageError(RagcostError):
    """A stage failed; the message names the stage."""


class ExecutorError(RagcostError):
    """The executor (a Ray cluster) cannot be reached or failed; the message names the address."""


class QueryError(RagcostError):
    """A query request is not one that can be answered (blank text, k out of range); the message names the value."""
