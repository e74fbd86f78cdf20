"""Client of the ledger environment: OpenEnv's MCP tool client over WebSocket."""

from __future__ import annotations

from openenv.core.mcp_client import MCPToolClient


class LedgerEnv(MCPToolClient):
    """Client of a ledger server: ``reset``, ``list_tools``, ``call_tool``.

    Example:
        >>> async with LedgerEnv(base_url="http://127.0.0.1:8000") as env:
        ...     await env.reset(family="total", difficulty=2, seed=7)
        ...     tools = await env.list_tools()
        ...     price = await env.call_tool("lookup", item="rice")
    """
