"""``ragcost serve``: the pipeline as an ASGI app over the Python API (micro-batching, SSE, tenants, metrics)."""
