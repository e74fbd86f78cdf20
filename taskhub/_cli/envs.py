"""``taskhub env``: the built-in environments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Annotated

import typer

from taskhub._errors import EnvLaunchError
from taskhub.env._apps import read_manifest
from taskhub.env._launch import builtin_envs, resolve_env

app = typer.Typer(help="Built-in OpenEnv environments.", no_args_is_help=True)


@app.command("list")
def list_envs(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the built-in environments."""
    rows = []
    for name, path in builtin_envs().items():
        manifest = read_manifest(path)
        rows.append({"name": name, "version": manifest.get("version"), "path": str(path)})
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        typer.echo(f"{row['name']:<12} {row['version'] or '':<8} {row['path']}")


@app.command("serve")
def serve(
    env: Annotated[str, typer.Argument(help="A built-in env name or an env folder.")],
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    max_sessions: Annotated[
        int | None, typer.Option(help="MAX_CONCURRENT_ENVS for the server.", min=1)
    ] = None,
) -> None:
    """Run an env server in the foreground (Ctrl-C stops it), as uvicorn would from its folder."""
    from taskhub._cli import fail

    try:
        target = resolve_env(env)
        if target.path is None:
            raise EnvLaunchError(f"{env!r} is a remote env; nothing to serve")
        manifest = read_manifest(target.path)
    except EnvLaunchError as exc:
        raise fail(exc) from None
    environ = dict(os.environ)
    if max_sessions is not None:
        environ["MAX_CONCURRENT_ENVS"] = str(max_sessions)
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        str(manifest.get("app", "server.app:app")),
        "--host",
        host,
        "--port",
        str(port),
    ]
    typer.echo(f"serving {target.path} on http://{host}:{port} (WebSocket /ws)", err=True)
    try:
        code = subprocess.call(argv, cwd=target.path, env=environ)
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code=code)
