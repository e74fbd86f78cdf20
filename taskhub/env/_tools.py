"""MCP tool envs on the wire: telling one apart, listing its tools, reading a tool's result.

An OpenEnv tool env (``CallToolAction``/``CallToolObservation``, OpenEnv 0.10) takes the
actions ``{"type": "list_tools"}`` (before or during an episode) and ``{"type": "call_tool",
"tool_name": ..., "arguments": {...}}``; a call's observation carries ``tool_name``,
``result`` (an MCP ``CallToolResult``: ``content`` parts, ``structured_content``, ``data``) and
``error`` (``error_type``, ``message``). The same tools are listed over HTTP by a JSON-RPC
``tools/list`` request to ``POST /mcp``.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

import httpx

from taskhub._errors import EnvError, EnvProtocolError
from taskhub._schema import ToolSpec
from taskhub.env._client import DEFAULT_MAX_FRAME_BYTES, DEFAULT_TIMEOUT_S, EnvSession, Transport
from taskhub.env._session import open_session

logger = logging.getLogger(__name__)

#: Action fields that make an env a tool env (OpenEnv's ``CallToolAction``).
TOOL_ACTION_FIELDS = frozenset({"tool_name", "arguments"})
#: Most tools read from one listing; more is a protocol error (a model cannot use thousands).
MAX_TOOLS = 256
#: Longest tool name and description kept, characters.
MAX_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 4000

ToolDiscovery = Literal["list_tools", "mcp"]


def is_tool_env(action_schema: dict[str, Any] | None) -> bool:
    """Whether an action schema is OpenEnv's ``CallToolAction`` (``tool_name``, ``arguments``)."""
    properties = (action_schema or {}).get("properties")
    return isinstance(properties, dict) and TOOL_ACTION_FIELDS <= set(properties)


def parse_tools(listed: Any, where: str) -> list[ToolSpec]:
    """Read a tool listing: ``ListToolsObservation.tools`` or a ``tools/list`` result's ``tools``.

    Both spellings of the argument schema are read (``input_schema``, MCP's ``inputSchema``).

    Raises:
        EnvProtocolError: The listing is not a list of named tools, or is too long.
    """
    if not isinstance(listed, list):
        raise EnvProtocolError(f"{where}: tools must be a list, got {listed!r:.200}")
    if len(listed) > MAX_TOOLS:
        raise EnvProtocolError(f"{where}: {len(listed)} tools listed; at most {MAX_TOOLS} are read")
    tools: list[ToolSpec] = []
    seen: set[str] = set()
    for index, entry in enumerate(listed):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
            raise EnvProtocolError(f"{where}: tool {index} has no usable name: {entry!r:.200}")
        if name in seen:
            raise EnvProtocolError(f"{where}: tool {name!r} is listed twice")
        seen.add(name)
        schema = entry.get("input_schema", entry.get("inputSchema"))
        if schema is None:
            schema = {"type": "object", "properties": {}}
        if not isinstance(schema, dict):
            raise EnvProtocolError(
                f"{where}: tool {name!r} has a non-object schema {schema!r:.200}"
            )
        description = entry.get("description") or ""
        tools.append(
            ToolSpec(
                name=name,
                description=str(description)[:MAX_DESCRIPTION_CHARS],
                input_schema=schema,
            )
        )
    return tools


async def discover_tools(
    http: httpx.AsyncClient,
    url: str,
    transport: Transport,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    session: EnvSession | None = None,
) -> tuple[list[ToolSpec], ToolDiscovery]:
    """List a tool env's tools: a ``list_tools`` step on a session, else ``POST /mcp``.

    Args:
        http: HTTP client (the HTTP transport and ``/mcp``).
        url: The server's base URL.
        transport: ``ws`` or ``http``.
        headers: WebSocket handshake headers.
        timeout: Deadline of each request, seconds.
        max_frame_bytes: Largest reply accepted.
        session: An open session on ``url`` to list them on (left open) instead of a new one
            (closed after).

    Returns:
        The tools, and how they were listed.

    Raises:
        EnvProtocolError: Neither way lists any tool (both failures are named).
    """
    own = session is None
    if session is None:
        session = open_session(
            url,
            transport,
            http=http,
            timeout=timeout,
            max_frame_bytes=max_frame_bytes,
            headers=headers,
        )
    try:
        result = await session.step({"type": "list_tools"})
        listed = result.observation.get("tools")
        if listed is not None:
            return parse_tools(listed, f"list_tools reply from {url}"), "list_tools"
        step_problem = (
            f"the list_tools step answered no tools: {json.dumps(result.observation)[:200]}"
        )
    except EnvError as exc:
        step_problem = f"the list_tools step failed: {exc}"
    finally:
        if own:
            await session.close()
    logger.info("%s: %s; trying POST /mcp", url, step_problem)
    try:
        return await _mcp_tools(http, url, timeout=timeout, max_bytes=max_frame_bytes), "mcp"
    except EnvError as exc:
        raise EnvProtocolError(
            f"{url} takes tool calls (its action has tool_name and arguments) but lists no "
            f"tools: {step_problem}; POST /mcp tools/list: {exc}",
            env_url=url,
        ) from None


async def _mcp_tools(
    http: httpx.AsyncClient, url: str, *, timeout: float, max_bytes: int
) -> list[ToolSpec]:
    """``tools/list`` over JSON-RPC ``POST /mcp``."""
    from taskhub.env._client import _loads, split_base_url

    endpoint = split_base_url(url)[0] + "/mcp"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    try:
        response = await http.post(endpoint, json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise EnvProtocolError(f"cannot reach {endpoint}: {exc}", env_url=endpoint) from None
    if response.status_code >= 400:
        raise EnvProtocolError(f"{endpoint} answered HTTP {response.status_code}", env_url=endpoint)
    if len(response.content) > max_bytes:
        raise EnvProtocolError(f"{endpoint}: reply larger than {max_bytes} bytes")
    try:
        reply = _loads(response.content)
    except ValueError as exc:
        raise EnvProtocolError(f"{endpoint}: reply is not JSON ({exc})") from None
    if not isinstance(reply, dict):
        raise EnvProtocolError(f"{endpoint}: reply is not a JSON-RPC object: {reply!r:.200}")
    if reply.get("error") is not None:
        raise EnvProtocolError(f"{endpoint}: JSON-RPC error {json.dumps(reply['error'])[:200]}")
    result = reply.get("result")
    listed = result.get("tools") if isinstance(result, dict) else None
    return parse_tools(listed, f"{endpoint} tools/list")


def tool_result(observation: dict[str, Any]) -> tuple[str, str | None]:
    """The text a tool call returned, and its error, from a ``CallToolObservation``.

    The result's ``content`` text parts are joined; a result without them is shown as JSON.
    A failed call (``error``, or an MCP result flagged ``is_error``) gives its message as the
    text too, so that the model reads why.

    Returns:
        ``(text, error)``: ``error`` is ``"error_type: message"``, or None for a success.
    """
    error = observation.get("error")
    if isinstance(error, dict) and error:
        kind = str(error.get("error_type") or "error")
        message = str(error.get("message") or "")
        return f"error ({kind}): {message}", f"{kind}: {message}"
    result = observation.get("result")
    text = _content_text(result)
    if isinstance(result, dict) and (result.get("is_error") or result.get("isError")):
        return f"error: {text}", f"tool_error: {text}"
    return text, None


def _content_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        content = result.get("content")
        if isinstance(content, list):
            parts = [
                str(part.get("text"))
                for part in content
                if isinstance(part, dict) and part.get("type") == "text" and "text" in part
            ]
            if parts:
                return "\n".join(parts)
        if "data" in result and result["data"] is not None:
            data = result["data"]
            return data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return json.dumps(result, ensure_ascii=False)
