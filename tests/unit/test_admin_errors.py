"""The admin client's errors read as sentences (issue 53.6): aiokafka names the addresses it
tried as Python tuples (``('127.0.0.1', 9, <AddressFamily.AF_INET: 2>)``); the tool's message
names them as host:port."""

from __future__ import annotations

import socket

import pytest

from compactor.cluster import admin
from compactor.errors import ClusterNotReadyError


def test_an_unreachable_cluster_is_named_as_host_and_port() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ClusterNotReadyError) as err:
        admin.describe(f"127.0.0.1:{port}", timeout_s=10)
    message = err.value.message
    assert f"127.0.0.1:{port}" in message
    assert "AddressFamily" not in message and "('" not in message, message
