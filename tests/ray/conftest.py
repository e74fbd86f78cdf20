"""One simulated 2-node Ray cluster on loopback for every test under tests/ray/.

``ray.cluster_utils.Cluster`` starts real Ray nodes (a head and a second node, one CPU each)
as processes on this machine: 15–22 s and about 1 GB, so the whole suite starts it once. With
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` every Ray listener stays on 127.0.0.1. It is torn down
with ``shutdown()`` (never ``ray stop``, which kills every Ray process on the machine).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """The cluster, with this test process connected to it as the driver."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
