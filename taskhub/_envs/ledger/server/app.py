"""FastAPI application of the ledger environment (HTTP, WebSocket ``/ws``, ``/mcp``, Task API).

Run it from this env's folder::

    python -m uvicorn server.app:app --host 127.0.0.1 --port 8000

``MAX_CONCURRENT_ENVS`` (default 32) caps the WebSocket sessions served at once.
"""

from __future__ import annotations

import os

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

try:
    from ..models import LedgerObservation, LedgerState  # noqa: TID252
    from .ledger_environment import LedgerEnvironment
except ImportError:  # run from the env folder: `uvicorn server.app:app`
    from models import LedgerObservation, LedgerState  # type: ignore[import-not-found,no-redef]
    from server.ledger_environment import LedgerEnvironment  # type: ignore[import-not-found,no-redef]

#: Sessions served at once when ``MAX_CONCURRENT_ENVS`` is not set.
DEFAULT_MAX_CONCURRENT_ENVS = 32

app = create_app(
    LedgerEnvironment,
    CallToolAction,
    CallToolObservation,
    env_name="ledger",
    max_concurrent_envs=int(os.environ.get("MAX_CONCURRENT_ENVS", DEFAULT_MAX_CONCURRENT_ENVS)),
    state_cls=LedgerState,
    reset_observation_cls=LedgerObservation,
)


def main() -> None:
    """Serve the app (``python -m server.app [--host H] [--port P]``)."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description="Serve the ledger OpenEnv environment.")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
