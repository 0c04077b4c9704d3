"""Raw-client fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from mm2py.client.cluster import ClusterClient
from mm2py.kafka_local import KafkaCluster


@pytest.fixture
async def src(source_cluster: KafkaCluster) -> AsyncIterator[ClusterClient]:
    async with ClusterClient(source_cluster.bootstrap) as c:
        yield c


@pytest.fixture
async def dst(target_cluster: KafkaCluster) -> AsyncIterator[ClusterClient]:
    async with ClusterClient(target_cluster.bootstrap) as c:
        yield c
