"""A launched server still working at its startup deadline gets more time; a sleeping one not;
another process answering on its port is not its health."""

from __future__ import annotations

import asyncio
import os
import textwrap
import time
from pathlib import Path

import httpx
import pytest

import taskhub.env._launch as launch_module
from taskhub import EnvTimeout
from taskhub.env import PortTaken, launch_server, listens_on, wait_healthy
from tests.servers import FakeEnv

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


def test_a_port_another_server_took_first_is_not_health_and_the_launch_moves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskhub.validators import EnvDriver, ValidationConfig

    # a free port is free only until someone binds it: here another server has it already
    with FakeEnv() as other:
        port = int(other.url.rsplit(":", 1)[1])
        assert listens_on(os.getpid(), port) is True  # this process serves the fake env
        folder = env_folder(tmp_path, "")
        server = launch_server(folder, port=port)

        async def wait() -> str:
            async with httpx.AsyncClient() as http:
                return await wait_healthy(http, server.url, timeout=20.0, server=server)

        try:
            with pytest.raises(PortTaken, match=f"could not bind port {port}: another process"):
                asyncio.run(wait())
        finally:
            server.stop()
        assert listens_on(server.process.pid, port) is False

        # a validator's launch that meets the taken port tries again on another one
        ports = iter([port])
        real = launch_module.free_port
        monkeypatch.setattr(launch_module, "free_port", lambda: next(ports, None) or real())

        async def launch() -> int:
            async with httpx.AsyncClient() as http:
                config = ValidationConfig(startup_timeout_s=20.0)
                driver = EnvDriver(config=config, http=http, folder=folder)
                try:
                    return (await driver.launch()).port
                finally:
                    driver.stop()

        assert asyncio.run(launch()) != port
