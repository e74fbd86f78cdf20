"""Talking to OpenEnv environments: the async client, and finding or launching servers."""

from __future__ import annotations

from taskhub.env._client import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_TIMEOUT_S,
    EnvClient,
    EnvSession,
    StepResult,
    Transport,
    split_base_url,
)
from taskhub.env._http import (
    OPENENV_HTTP,
    HttpDialect,
    HttpEnvSession,
    fetch_json,
    learn_http_dialect,
    parse_http_reply,
)
from taskhub.env._launch import (
    EnvHandle,
    EnvTarget,
    LocalServer,
    builtin_envs,
    launch_server,
    probe_transport,
    probe_wire,
    resolve_env,
    space_url,
    wait_healthy,
)
from taskhub.env._pool import (
    CAPACITY_PROBE_EVERY,
    DEFAULT_IDLE_TIMEOUT_S,
    PooledSession,
    SessionPool,
)
from taskhub.env._session import open_session

__all__ = [
    "CAPACITY_PROBE_EVERY",
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_TIMEOUT_S",
    "EnvClient",
    "EnvHandle",
    "EnvSession",
    "EnvTarget",
    "HttpDialect",
    "HttpEnvSession",
    "LocalServer",
    "OPENENV_HTTP",
    "PooledSession",
    "SessionPool",
    "StepResult",
    "Transport",
    "builtin_envs",
    "fetch_json",
    "launch_server",
    "learn_http_dialect",
    "open_session",
    "parse_http_reply",
    "probe_transport",
    "probe_wire",
    "resolve_env",
    "space_url",
    "split_base_url",
    "wait_healthy",
]
