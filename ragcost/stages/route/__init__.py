"""Routing: the ``route`` stage and its registered routers (rules, knn, context_length)."""

from ragcost.stages.route import context_length as _context_length  # noqa: F401  (registers the router)
from ragcost.stages.route import knn as _knn  # noqa: F401
from ragcost.stages.route import rules as _rules  # noqa: F401
from ragcost.stages.route.base import Decision, Router, RouterParams, router_registry
from ragcost.stages.route.stage import Route, RouteParams

__all__ = ["Decision", "Route", "RouteParams", "Router", "RouterParams", "router_registry"]
