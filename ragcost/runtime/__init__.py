"""The runtime: loading a pipeline, its parts, the one runner, querying and indexing."""
