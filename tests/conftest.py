"""Shared test setup: a private Hugging Face home, a loopback Hub endpoint, no internet; the
ledger tool env served once for every test that needs it."""

from __future__ import annotations

import os
import socket
import tempfile


# huggingface_hub and datasets read these when they are imported, so they are set here, before
# any test module can import them. HF_ENDPOINT points at the Hub-compatible server that
# tests/hub/hub_server.py starts on this port (see tests/hub/conftest.py). Each process picks its
# own port and home: an xdist worker inherits the controller's environment, and every worker
# serves its own Hub.
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_HF_HOME = tempfile.mkdtemp(prefix="taskhub-test-hf-")
os.environ["TASKHUB_TEST_HUB_PORT"] = str(_free_port())
os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{os.environ['TASKHUB_TEST_HUB_PORT']}"
os.environ["HF_HOME"] = _HF_HOME
os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
os.environ.pop("HF_TOKEN", None)
os.environ.pop("OPENAI_API_KEY", None)
os.environ.pop("OPENAI_BASE_URL", None)


from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402

from tests.reference_envs.refenv_helpers import EnvServer, start_server, stop_server  # noqa: E402

# the xdist groups of the tests that share a costly fixture
pytest_plugins = ["tests.xdist_groups"]


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (taskhub uses asyncio.TaskGroup and asyncio.timeout)."""
    return "asyncio"


@pytest.fixture(scope="session")
def ledger_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvServer]:
    """The ledger reference env (MCP tools, Task API) in a uvicorn subprocess, once per run."""
    server = start_server("ledger", tmp_path_factory.mktemp("ledger-logs"))
    try:
        yield server
    finally:
        stop_server(server)
