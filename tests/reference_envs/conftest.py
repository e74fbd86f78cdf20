"""Fixtures of the reference env tests: each env served by a real uvicorn subprocess."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.reference_envs.refenv_helpers import ENV_NAMES, EnvServer, start_server, stop_server


@pytest.fixture(scope="module", params=ENV_NAMES)
def env_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnvServer]:
    """Each reference env served by a real uvicorn subprocess, stopped at teardown."""
    server = start_server(request.param, tmp_path_factory.mktemp("env-logs"))
    try:
        yield server
    finally:
        code = stop_server(server)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal: -15 is a clean stop.
    assert code in (0, -signal.SIGTERM), f"{server.name} did not stop cleanly ({code})"
    assert "Finished server process" in server.log_tail(), server.log_tail()
