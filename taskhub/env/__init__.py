"""Talking to OpenEnv environments: the async client, and finding or launching servers."""

from __future__ import annotations

from taskhub.env._client import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_TIMEOUT_S,
    EnvClient,
    EnvSession,
    HttpEnvSession,
    StepResult,
    fetch_json,
    split_base_url,
)
from taskhub.env._launch import (
    EnvHandle,
    EnvTarget,
    LocalServer,
    builtin_envs,
    launch_server,
    probe_transport,
    resolve_env,
    space_url,
    wait_healthy,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_TIMEOUT_S",
    "EnvClient",
    "EnvHandle",
    "EnvSession",
    "EnvTarget",
    "HttpEnvSession",
    "LocalServer",
    "StepResult",
    "builtin_envs",
    "fetch_json",
    "launch_server",
    "probe_transport",
    "resolve_env",
    "space_url",
    "split_base_url",
    "wait_healthy",
]
