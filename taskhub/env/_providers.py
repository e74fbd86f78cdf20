"""Env servers started by OpenEnv's own providers: ``uv run``, local Docker, hosted sandboxes.

``--env-provider NAME`` hands the starting of an env to the provider classes the ``openenv``
package ships (``openenv.core.containers.runtime``), where the env should not run in taskhub's
own Python: ``uv`` (``UVProvider``: ``uv run --isolated --project FOLDER``, the env's declared
dependencies in a fresh environment), ``docker`` (``LocalDockerProvider``: a container from an
image) and the hosted sandboxes (``hf-sandbox``, ``modal``, ``daytona``, ``novita``, ``aca``).
What ENV names depends on the provider: a folder, built-in env, Space id or ``git+URL`` for
``uv``; an image or a Space id (its Hugging Face registry image) for ``docker``; the provider's
own image source for the hosted ones. Their credentials come from each SDK's own environment
variables; options given here are recorded in ``run.json`` and so may not hold secrets.

The provider classes block (subprocesses, polling): they are driven from a worker thread.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import JsonValue

from taskhub._errors import EnvLaunchError
from taskhub.env._launch import builtin_envs
from taskhub.env._spawn import free_port

logger = logging.getLogger(__name__)

_RUNTIME = "openenv.core.containers.runtime"
#: Provider name -> (module under ``openenv.core.containers.runtime``, class, pip extra).
PROVIDERS: dict[str, tuple[str, str, str | None]] = {
    "uv": ("uv_provider", "UVProvider", None),
    "docker": ("providers", "LocalDockerProvider", None),
    "hf-sandbox": ("hf_sandbox_provider", "HFSandboxProvider", None),
    "modal": ("modal_provider", "ModalProvider", "modal"),
    "daytona": ("daytona_provider", "DaytonaProvider", "daytona"),
    "novita": ("novita_provider", "NovitaSandboxProvider", "novita"),
    "aca": ("aca_provider", "ACASandboxProvider", "aca"),
}
_SECRET_OPTION = re.compile(r"key|token|secret|password|credential", re.IGNORECASE)
_SPACE_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_provider(name: str, options: Mapping[str, JsonValue] | None = None) -> None:
    """Refuse an unknown provider name, or options that would put a secret in ``run.json``.

    Raises:
        EnvLaunchError: With the known names (and the closest one), or the option at fault.
    """
    if name not in PROVIDERS:
        import difflib

        close = difflib.get_close_matches(name, PROVIDERS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise EnvLaunchError(
            f"unknown env provider {name!r}: choose one of {', '.join(PROVIDERS)}.{hint}"
        )
    for key in options or {}:
        if _SECRET_OPTION.search(key):
            raise EnvLaunchError(
                f"env provider option {key!r} looks like a credential, and options are "
                f"recorded in run.json: set the {name} SDK's own environment variable instead"
            )


def provider_class(name: str) -> Any:
    """Import the OpenEnv class behind provider ``name``.

    Raises:
        EnvLaunchError: Unknown name, or ``openenv`` (or its SDK extra) is not installed.
    """
    check_provider(name)
    module_name, class_name, extra = PROVIDERS[name]
    try:
        module = importlib.import_module(f"{_RUNTIME}.{module_name}")
    except ImportError as exc:
        needs = f"openenv[{extra}]" if extra else "openenv"
        raise EnvLaunchError(
            f"env provider {name!r} needs {needs} ({exc}): pip install '{needs}'"
        ) from None
    return getattr(module, class_name)


@dataclass(frozen=True)
class ProviderTarget:
    """An ENV string resolved to what a provider starts, before anything is started."""

    spec: str
    kind: Literal["folder", "builtin", "space", "image", "git"]
    path: Path | None = None
    url: str | None = None


def provider_target(spec: str, name: str) -> ProviderTarget:
    """Decide what ``spec`` names for provider ``name`` (before anything is started).

    Raises:
        EnvLaunchError: Unknown provider, or ``spec`` is nothing that provider can start.
    """
    check_provider(name)
    text = spec.strip()
    path = Path(text).expanduser()
    if path.is_dir():
        return ProviderTarget(text, "folder", path=path.resolve())
    builtins = builtin_envs()
    if text in builtins:
        return ProviderTarget(text, "builtin", path=builtins[text])
    if name == "uv":
        if text.startswith("git+"):
            return ProviderTarget(text, "git")
        if _SPACE_ID.match(text):
            return ProviderTarget(text, "space")
        raise EnvLaunchError(
            f"env provider 'uv' runs an env folder, a built-in env ({', '.join(builtins)}), "
            f"a Space id (owner/name) or a git+URL; {text!r} is none of those"
        )
    if name == "docker" and _SPACE_ID.match(text) and ":" not in text:
        return ProviderTarget(text, "space")
    return ProviderTarget(text, "image")


def _hf_registry_image(space_id: str) -> str:
    # What openenv's EnvClient.from_env(use_docker=True) pulls for a Space.
    owner, name = space_id.split("/", 1)
    slug = re.sub(r"[^a-z0-9]", "-", f"{owner}-{name}".lower())
    return f"registry.hf.space/{slug}:latest"


@dataclass
class ProvidedServer:
    """One env server a provider started, stopped with ``stop``."""

    provider_name: str
    spec: str
    provider: Any
    url: str = ""
    folder: Path | None = None
    container: bool = True

    def stop(self) -> None:
        """Stop the server (a provider that fails to stop is logged, not raised)."""
        try:
            if self.container:
                self.provider.stop_container()
                self.provider.close()
            else:
                self.provider.stop()
        except Exception:  # stopping is best effort: the run's result is already written
            logger.exception("env provider %s did not stop %s", self.provider_name, self.url)


def _uv_server(
    spec: str,
    folder: Path | None,
    app: str,
    variables: dict[str, str],
    options: Mapping[str, JsonValue],
    startup_timeout: float,
) -> ProvidedServer:
    cls = provider_class("uv")
    if folder is not None:
        project = str(folder)
        # uvicorn runs in the caller's directory: put the folder on its import path, as
        # taskhub's own launcher does by running from the folder (UVICORN_APP_DIR).
        variables = {"UVICORN_APP_DIR": project, **variables}
    elif spec.startswith("git+"):
        project = spec
    elif _SPACE_ID.match(spec):
        project = f"git+https://huggingface.co/spaces/{spec}"
    else:
        raise EnvLaunchError(
            f"env provider 'uv' runs an env folder, a built-in env, a Space id or a git+URL, "
            f"not {spec!r}"
        )
    try:
        provider = cls(
            project_path=project,
            app=app,
            host="127.0.0.1",
            env_vars=variables,
            context_timeout_s=startup_timeout,
            **options,
        )
    except (RuntimeError, TypeError) as exc:
        raise EnvLaunchError(f"env provider 'uv' cannot start {spec!r}: {exc}") from None
    return ProvidedServer("uv", spec, provider, folder=folder, container=False)


def _container_server(
    name: str,
    spec: str,
    folder: Path | None,
    variables: dict[str, str],
    options: Mapping[str, JsonValue],
) -> ProvidedServer:
    cls = provider_class(name)
    if folder is not None:
        raise EnvLaunchError(
            f"env provider {name!r} runs an image, not the folder {folder}: build one first "
            f"(docker build -t NAME -f server/Dockerfile {folder}) and pass NAME as ENV"
        )
    image = _hf_registry_image(spec) if name == "docker" and _SPACE_ID.match(spec) else spec
    try:
        if name == "docker":
            provider = cls(**options)
        else:
            provider = cls(image=image, env_vars=variables, **options)
    except (RuntimeError, TypeError, ValueError, ImportError) as exc:
        raise EnvLaunchError(f"env provider {name!r} cannot start {spec!r}: {exc}") from None
    return ProvidedServer(name, image, provider)


def _start(server: ProvidedServer, variables: dict[str, str], timeout: float) -> str:
    """Start and wait (blocking): the URL of the healthy server."""
    provider = server.provider
    if server.container:
        if server.provider_name == "docker":
            url = provider.start_container(server.spec, port=free_port(), env_vars=variables)
        else:
            url = provider.start_container()
        server.url = str(url).rstrip("/")
        provider.wait_for_ready(server.url, timeout_s=timeout)
    else:
        server.url = str(provider.start(port=free_port())).rstrip("/")
        # In short rounds: each round first checks that `uv run` is still alive, so a failed
        # install is reported at once rather than after the whole timeout.
        deadline = time.monotonic() + timeout
        while True:
            try:
                provider.wait_for_ready(timeout_s=min(2.0, max(deadline - time.monotonic(), 0)))
                break
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise
    return server.url


async def start_provided(
    name: str,
    spec: str,
    *,
    folder: Path | None,
    app: str = "server.app:app",
    replicas: int = 1,
    max_sessions: int | None = None,
    options: Mapping[str, JsonValue] | None = None,
    startup_timeout: float = 90.0,
) -> list[ProvidedServer]:
    """Start ``replicas`` servers of ``spec`` with provider ``name`` and wait until healthy.

    Args:
        name: A key of ``PROVIDERS``.
        spec: The ENV string as given.
        folder: The env folder, for folders and built-in envs.
        app: The ASGI app (``openenv.yaml``'s ``app``), for ``uv``.
        replicas: Servers to start.
        max_sessions: Exported as ``MAX_CONCURRENT_ENVS`` to each server.
        options: Keyword arguments of the provider's constructor.
        startup_timeout: Seconds each server gets to answer ``/health``.

    Returns:
        The started servers (the caller stops them).

    Raises:
        EnvLaunchError: The provider is unknown, missing, refuses ``spec``, or a server did not
            start or become healthy in time (every server started is stopped first).
    """
    options = dict(options or {})
    check_provider(name, options)
    variables = {"MAX_CONCURRENT_ENVS": str(max_sessions)} if max_sessions else {}
    servers = []
    for _ in range(replicas):
        if name == "uv":
            server = _uv_server(spec, folder, app, variables, options, startup_timeout)
        else:
            server = _container_server(name, spec, folder, variables, options)
        servers.append(server)
    try:
        await asyncio.gather(
            *(asyncio.to_thread(_start, s, variables, startup_timeout) for s in servers)
        )
    except BaseException as exc:
        for server in servers:
            await asyncio.to_thread(server.stop)
        if isinstance(exc, Exception) and not isinstance(exc, EnvLaunchError):
            raise EnvLaunchError(
                f"env provider {name!r} could not start {spec!r}: {type(exc).__name__}: {exc}"
            ) from None
        raise
    for server in servers:
        logger.info("env provider %s started %s at %s", name, spec, server.url)
    return servers
