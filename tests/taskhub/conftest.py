"""Fixtures of the core tests: the ledger tool env served once for every test that needs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reference_envs.refenv_helpers import EnvServer, start_server, stop_server


@pytest.fixture(scope="session")
def ledger_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvServer]:
    """The ledger reference env (MCP tools, Task API) in a uvicorn subprocess."""
    server = start_server("ledger", tmp_path_factory.mktemp("ledger-logs"))
    try:
        yield server
    finally:
        stop_server(server)
