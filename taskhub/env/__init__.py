"""Talking to OpenEnv environments: the client, launching servers, tool envs, the Task API."""

from __future__ import annotations

from taskhub.env._apps import ServedApp, find_app
from taskhub.env._client import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_TIMEOUT_S,
    EnvClient,
    EnvSession,
    StepResult,
    Transport,
    split_base_url,
)
from taskhub.env._dockerfile import Dockerfile, ShellCommand, read_dockerfiles
from taskhub.env._http import (
    OPENENV_HTTP,
    HttpDialect,
    HttpEnvSession,
    fetch_json,
    learn_http_dialect,
    parse_http_reply,
    request_schema,
    retry_after,
)
from taskhub.env._launch import (
    EnvHandle,
    EnvTarget,
    LocalServer,
    PortTaken,
    builtin_envs,
    child_pids,
    launch_server,
    listens_on,
    probe_transport,
    probe_wire,
    resolve_env,
    space_url,
    start_server,
    wait_healthy,
)
from taskhub.env._pool import (
    CAPACITY_PROBE_EVERY,
    DEFAULT_IDLE_TIMEOUT_S,
    PooledSession,
    SessionPool,
)
from taskhub.env._session import open_session
from taskhub.env._tasks import TaskApiClient, TaskSplit, env_tasks, env_tasks_async
from taskhub.env._tools import discover_tools, is_tool_env, parse_tools, tool_result

__all__ = [
    "CAPACITY_PROBE_EVERY",
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_TIMEOUT_S",
    "Dockerfile",
    "EnvClient",
    "EnvHandle",
    "EnvSession",
    "EnvTarget",
    "HttpDialect",
    "HttpEnvSession",
    "LocalServer",
    "OPENENV_HTTP",
    "PooledSession",
    "PortTaken",
    "ServedApp",
    "SessionPool",
    "ShellCommand",
    "StepResult",
    "TaskApiClient",
    "TaskSplit",
    "Transport",
    "builtin_envs",
    "child_pids",
    "discover_tools",
    "env_tasks",
    "env_tasks_async",
    "fetch_json",
    "find_app",
    "is_tool_env",
    "launch_server",
    "learn_http_dialect",
    "listens_on",
    "open_session",
    "parse_http_reply",
    "parse_tools",
    "probe_transport",
    "probe_wire",
    "read_dockerfiles",
    "request_schema",
    "resolve_env",
    "retry_after",
    "space_url",
    "split_base_url",
    "start_server",
    "tool_result",
    "wait_healthy",
]
