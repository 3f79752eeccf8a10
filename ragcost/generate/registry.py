"""The generate backends, by the name YAML gives in ``backend:`` (``extractive``, ``vllm``, ...).

It sits apart from :mod:`ragcost.generate.base` because :class:`~ragcost.generate.params.BackendParams`
checks ``backend`` against it, and the base class in turn takes those params: one module each
keeps the imports a line, not a loop. Register with ``@generator_registry.register("name")``.
"""

from __future__ import annotations

from ragcost.registry import Registry

generator_registry: Registry[type] = Registry("generate backend")
