"""A launched server still working at its startup deadline gets more time; a sleeping one not."""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path

import httpx

from taskhub import EnvTimeout
from taskhub.env import launch_server, wait_healthy

APP = """
import time

{before}

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route


async def health(request):
    return JSONResponse({{"status": "healthy"}})


app = Starlette(routes=[Route("/health", health)])
"""


def env_folder(tmp_path: Path, before: str) -> Path:
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "__init__.py").write_text("")
    (tmp_path / "server" / "app.py").write_text(APP.format(before=textwrap.dedent(before)))
    return tmp_path


async def start(folder: Path, timeout: float) -> tuple[str | None, float]:
    server = launch_server(folder)
    started = time.monotonic()
    try:
        async with httpx.AsyncClient() as http:
            try:
                path: str | None = await wait_healthy(
                    http, server.url, timeout=timeout, server=server
                )
            except EnvTimeout:
                path = None
        return path, time.monotonic() - started
    finally:
        server.stop()


def test_a_server_busy_importing_past_its_deadline_is_waited_for(tmp_path: Path) -> None:
    # busy for 3 s of wall time before the app exists: past a 2 s deadline, within its grace
    busy = "end = time.monotonic() + 3.0\nwhile time.monotonic() < end:\n    pass\n"
    path, waited = asyncio.run(start(env_folder(tmp_path, busy), timeout=2.0))
    assert path == "/health", waited
    assert waited > 2.0


def test_a_server_that_sleeps_past_its_deadline_is_not(tmp_path: Path) -> None:
    path, waited = asyncio.run(start(env_folder(tmp_path, "time.sleep(60)"), timeout=2.0))
    assert path is None
    assert 2.0 <= waited < 2.0 * 3  # its deadline, not the grace of a working server
