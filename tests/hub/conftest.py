"""Fixtures for tests that drive the real huggingface_hub and datasets clients against HubServer.

The root ``tests/conftest.py`` has already pointed ``HF_ENDPOINT`` at ``TASKHUB_TEST_HUB_PORT``
(and set ``HF_HOME``, ``HF_HUB_DISABLE_XET``) before anything imported huggingface_hub, so the
server must listen on exactly that port.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import pytest

from tests.hub.hub_server import HubServer

HF_TEST_TOKEN = "hf_test_token"
HF_TEST_USER = "testuser"


@pytest.fixture(scope="session")
def hub_server() -> Iterator[HubServer]:
    """The loopback Hub that ``HF_ENDPOINT`` points at, for the whole session."""
    port = int(os.environ["TASKHUB_TEST_HUB_PORT"])
    with HubServer("127.0.0.1", port, tokens={HF_TEST_TOKEN: HF_TEST_USER}) as server:
        assert server.url == os.environ["HF_ENDPOINT"]
        yield server
    # A 500 reaches the client as a generic HTTP error; fail loudly with the server's traceback.
    assert not server.errors, "the test Hub server crashed:\n" + "\n".join(server.errors)


@pytest.fixture(scope="session")
def hf_token(hub_server: HubServer) -> str:
    """A token the server accepts, for user ``testuser``."""
    return HF_TEST_TOKEN


@pytest.fixture(scope="session")
def make_repo_id() -> Callable[[], str]:
    """Hands out repo ids never used before in this session (for module-scoped fixtures)."""
    counter = itertools.count(1)
    return lambda: f"testorg/ds-{next(counter)}"


@pytest.fixture
def repo_id(make_repo_id: Callable[[], str]) -> str:
    """A fresh repo id, not yet created on the server."""
    return make_repo_id()
