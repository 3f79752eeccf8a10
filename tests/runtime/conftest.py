"""The Ray tests' one cluster: started once per test session (seconds each start), stopped at its end."""

from __future__ import annotations

import os

import pytest


def ray_installed() -> None:
    try:
        import ray  # noqa: F401
        import ray.data  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("ray is not installed; scripts/test.sh installs the [ray] extra")
        pytest.skip("needs the [ray] extra: pip install 'ragcost[ray]'")


@pytest.fixture(scope="session")
def ray_cluster():
    """``ray start --head`` + one worker node on loopback, one CPU each (tests/ray_cluster.py)."""
    ray_installed()
    from tests.ray_cluster import LocalRayCluster

    with LocalRayCluster(nodes=2, cpus_per_node=1) as cluster:  # stopped (by pid) even when a test fails
        yield cluster
