"""Fixtures of the back-end unit tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.unit.backends.scripted_http import Handler, Server


@pytest.fixture
def serve() -> Iterator[Callable[[list[Handler]], Server]]:
    servers: list[Server] = []

    def start(handlers: list[Handler]) -> Server:
        servers.append(Server(handlers))
        return servers[-1]

    yield start
    for s in servers:
        s.close()
