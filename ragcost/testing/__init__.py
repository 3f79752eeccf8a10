"""Contract test classes for every kind of backend, for a plugin's own tests as for ragcost's.

A backend's test class inherits its kind's contract and gives what the contract asks for (a class
attribute or a fixture, as each module's docstring says); pytest then runs every inherited test
against it (Haystack's DocumentStoreBaseTests style)::

    from ragcost.testing.index import IndexContract

    class TestMyIndex(IndexContract):
        config = IndexConfig(backend="my-index", kind="flat")

The modules import pytest, so they need it installed (ragcost's ``dev`` extra, or a plugin's own
test requirements); nothing in ragcost imports them. One module per kind: ``embedder``, ``generator``,
``guard``, ``index``, ``reranker``, ``router``, ``stage``, ``store``; ``vectors`` holds the seeded data
the index contract searches.
"""
