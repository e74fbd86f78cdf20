"""Real servers for tests, on 127.0.0.1: a scriptable OpenEnv-protocol env and an OpenAI stub.

``FakeEnv`` speaks the OpenEnv protocol (HTTP routes and WebSocket ``/ws``) with behaviour passed
as functions, so a test can build an env that answers garbage, hangs, closes mid-episode, sends
huge frames, speaks the 0.3 dialect, or refuses sessions at capacity. ``ModelServer`` is an
OpenAI-compatible chat-completions endpoint whose answers (text or ``tool_calls``) and failures
are scripted per model name, and which can refuse function tools as servers without tool support
do. Both run in uvicorn in a background thread (like httpx's test server).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect


class ServerThread:
    """Runs an ASGI app with uvicorn on a free loopback port in a daemon thread."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="error",
            lifespan="off",
            ws="websockets-sansio",
            ws_max_size=64 * 1024 * 1024,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        return self

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# A reply is a dict (sent as a JSON frame), a str (sent as text as is), bytes (a binary frame),
# the constant CLOSE (close the socket), or None (send nothing: the client must time out).
CLOSE = object()
Reply = dict[str, Any] | str | bytes | object | None
Handler = Callable[["Session", dict[str, Any]], Reply | Awaitable[Reply]]


def observation(
    obs: dict[str, Any], reward: Any = None, done: bool = False, dialect: str = "0.10"
) -> dict[str, Any]:
    """An observation frame in the given dialect (0.3: no metadata anywhere)."""
    data: dict[str, Any] = {"observation": dict(obs), "reward": reward, "done": done}
    if dialect != "0.3":
        data["observation"]["metadata"] = {}
        data["metadata"] = {"dialect": dialect}
    return {"type": "observation", "data": data}


def error(code: str, message: str = "bad") -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code}}


@dataclass
class Session:
    """State of one WebSocket session of a FakeEnv."""

    env: FakeEnv
    episode_id: str | None = None
    step_count: int = 0
    done: bool = False
    target: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    close_after_reply: bool = False
    """Set by a handler: the server closes the socket (1000) right after sending its reply."""


def counting_reset(session: Session, data: dict[str, Any]) -> Reply:
    """Default reset: a one-step 'say N' task; N comes from the seed."""
    session.episode_id = data.get("episode_id")
    session.step_count = 0
    session.done = False
    session.target = int(data.get("seed") or 0) % 100
    return observation({"question": f"say {session.target}"}, None, False, session.env.dialect)


def counting_step(session: Session, data: dict[str, Any]) -> Reply:
    """Default step: reward 1 when the answer is the target; done after one step."""
    if session.done:
        return error("EXECUTION_ERROR", "episode is over")
    session.step_count += 1
    session.done = True
    correct = str(data.get("answer", "")).strip() == str(session.target)
    return observation(
        {"feedback": "ok" if correct else "wrong"},
        1.0 if correct else 0.0,
        True,
        session.env.dialect,
    )


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "metadata": {"type": "object"}},
    "required": ["answer"],
    "additionalProperties": False,
}


class FakeEnv:
    """An OpenEnv-protocol server whose behaviour is passed as functions."""

    def __init__(
        self,
        *,
        on_reset: Handler = counting_reset,
        on_step: Handler = counting_step,
        dialect: str = "0.10",
        capacity: int | None = None,
        ws: bool = True,
        action_schema: dict[str, Any] | None = None,
        on_connect: Callable[[Session], Reply] | None = None,
        metadata: dict[str, Any] | None = None,
        open_delay: float = 0.0,
    ) -> None:
        """``open_delay``: seconds each WebSocket handshake waits for its answer (a session
        slow to create, a remote server); without ``ws``, the handshake is then refused."""
        self.on_reset = on_reset
        self.open_delay = open_delay
        self.metadata = metadata
        self.on_step = on_step
        self.dialect = dialect
        self.capacity = capacity
        self.action_schema = action_schema or ANSWER_SCHEMA
        self.on_connect = on_connect
        self.active = 0
        self.max_active = 0
        self.sessions_opened = 0
        self.handshakes: list[dict[str, str]] = []
        """The headers of every WebSocket handshake, in order."""
        self.frames: list[dict[str, Any]] = []
        self._http_session = Session(self)
        routes: list[Any] = [
            Route("/health", self._health),
            Route("/metadata", self._metadata),
            Route("/schema", self._schema),
            Route("/openapi.json", self._openapi),
            Route("/reset", self._http_reset, methods=["POST"]),
            Route("/step", self._http_step, methods=["POST"]),
            Route("/state", self._http_state),
        ]
        if ws:
            routes.append(WebSocketRoute("/ws", self._ws))
        elif open_delay:
            routes.append(WebSocketRoute("/ws", self._refuse))
        self.app = Starlette(routes=routes)
        self.thread = ServerThread(self.app)

    def start(self) -> FakeEnv:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.thread.stop()

    def __enter__(self) -> FakeEnv:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return self.thread.url

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "healthy"})

    async def _metadata(self, request: Request) -> Response:
        if self.metadata is not None:
            return JSONResponse(self.metadata)
        return JSONResponse(
            {"name": "fake", "description": "a scriptable test env", "version": self.dialect}
        )

    async def _schema(self, request: Request) -> Response:
        return JSONResponse({"action": self.action_schema, "observation": {}, "state": {}})

    async def _openapi(self, request: Request) -> Response:
        paths = {
            "/reset": {"post": {}},
            "/step": {"post": {}},
            "/state": {"get": {}},
            "/health": {"get": {}},
        }
        return JSONResponse({"openapi": "3.1.0", "paths": paths})

    async def _call(self, handler: Handler, session: Session, data: dict[str, Any]) -> Reply:
        reply = handler(session, data)
        if asyncio.iscoroutine(reply):
            reply = await reply
        return reply

    async def _http_reset(self, request: Request) -> Response:
        body = await request.json()
        reply = await self._call(self.on_reset, self._http_session, body)
        return self._http_reply(reply)

    async def _http_step(self, request: Request) -> Response:
        body = await request.json()
        reply = await self._call(self.on_step, self._http_session, body.get("action", {}))
        return self._http_reply(reply)

    async def _http_state(self, request: Request) -> Response:
        s = self._http_session
        return JSONResponse({"episode_id": s.episode_id, "step_count": s.step_count})

    def _http_reply(self, reply: Reply) -> Response:
        if isinstance(reply, dict) and reply.get("type") == "observation":
            return JSONResponse(reply["data"])
        if isinstance(reply, dict) and reply.get("type") == "error":
            return PlainTextResponse(reply["data"]["message"], status_code=500)
        if isinstance(reply, str):
            return PlainTextResponse(reply)
        return PlainTextResponse("no reply", status_code=500)

    async def _refuse(self, websocket: WebSocket) -> None:
        await asyncio.sleep(self.open_delay)
        await websocket.close()  # before accepting: the handshake gets HTTP 403

    async def _ws(self, websocket: WebSocket) -> None:
        if self.open_delay:
            await asyncio.sleep(self.open_delay)
        await websocket.accept()
        session = Session(self)
        self.sessions_opened += 1
        self.handshakes.append(dict(websocket.headers))
        if self.capacity is not None and self.active >= self.capacity:
            await websocket.send_text(json.dumps(error("CAPACITY_REACHED", "server full")))
            await websocket.close()
            return
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.on_connect is not None:
                if not await self._send(websocket, self.on_connect(session)):
                    return
            while True:
                text = await websocket.receive_text()
                frame = json.loads(text)
                self.frames.append(frame)
                kind = frame.get("type")
                if kind == "close":
                    await websocket.close()
                    return
                if kind == "reset":
                    reply = await self._call(self.on_reset, session, frame.get("data") or {})
                elif kind == "step":
                    reply = await self._call(self.on_step, session, frame.get("data") or {})
                elif kind == "state":
                    reply = {
                        "type": "state",
                        "data": {
                            "episode_id": session.episode_id,
                            "step_count": session.step_count,
                        },
                    }
                else:
                    reply = error("UNKNOWN_TYPE", f"unknown type {kind!r}")
                if not await self._send(websocket, reply):
                    return
                if session.close_after_reply:
                    await websocket.close()
                    return
        except WebSocketDisconnect:
            pass
        finally:
            self.active -= 1

    async def _send(self, websocket: WebSocket, reply: Reply) -> bool:
        """Send a reply; False when the socket was closed on purpose."""
        if reply is CLOSE:
            await websocket.close(code=1011)
            return False
        if reply is None:
            return True
        if isinstance(reply, bytes):
            await websocket.send_bytes(reply)
        elif isinstance(reply, str):
            await websocket.send_text(reply)
        else:
            await websocket.send_text(json.dumps(reply))
        return True


# --- OpenAI-compatible model server -------------------------------------------------------


def tool_message(*calls: tuple[str, dict[str, Any] | str], content: str | None = None) -> dict:
    """An assistant message with ``tool_calls``: ``(name, arguments)`` pairs, in order.

    Arguments given as a string are sent as they are (to script malformed JSON).
    """
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": f"call_{index}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
            for index, (name, arguments) in enumerate(calls)
        ],
    }


@dataclass
class ModelScript:
    """What the stub answers for one model name."""

    # Fixed text, or a function of the request body returning the reply text or a whole
    # assistant message (``tool_message(...)`` for tool calls).
    reply: str | Callable[[dict[str, Any]], str | dict[str, Any]] = "42"
    # Failures served before the first success: (status, body, headers).
    failures: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)
    # A raw body served instead of a completion (invalid JSON, no choices...).
    raw: str | None = None
    delay_s: float = 0.0
    # (status, body) answered to every request that carries ``tools``, as a server without
    # tool support does (llama.cpp without --jinja answers 500 "tools param requires --jinja").
    refuse_tools: tuple[int, str] | None = None


class ModelServer:
    """OpenAI-compatible ``POST /v1/chat/completions`` with scripted answers per model name."""

    def __init__(
        self, scripts: dict[str, ModelScript] | None = None, api_key: str | None = None
    ) -> None:
        self.scripts = scripts or {}
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(
            routes=[Route("/v1/chat/completions", self._complete, methods=["POST"])]
        )
        self.thread = ServerThread(self.app)

    def start(self) -> ModelServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.thread.stop()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"{self.thread.url}/v1"

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append({"body": body, "headers": dict(request.headers)})
        if self.api_key is not None:
            if request.headers.get("authorization") != f"Bearer {self.api_key}":
                return JSONResponse(
                    {"error": {"message": "Incorrect API key provided"}}, status_code=401
                )
        script = self.scripts.get(body.get("model"), ModelScript())
        if script.delay_s:
            await asyncio.sleep(script.delay_s)
        if script.failures:
            status, text, headers = script.failures.pop(0)
            return PlainTextResponse(text, status_code=status, headers=headers)
        if script.raw is not None:
            return PlainTextResponse(script.raw, media_type="application/json")
        if script.refuse_tools is not None and "tools" in body:
            status, text = script.refuse_tools
            return PlainTextResponse(text, status_code=status)
        reply = script.reply(body) if callable(script.reply) else script.reply
        message = reply if isinstance(reply, dict) else {"role": "assistant", "content": reply}
        return JSONResponse(
            {
                "id": "cmpl-test",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
            }
        )


def free_port() -> int:
    """A port nothing listens on right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_served(port: int | str, process: subprocess.Popen[bytes], what: str) -> None:
    """Wait until a server started by a README command answers ``/health``.

    Its imports take seconds, more on a busy machine: it fails if the server exits first or
    takes over 180 s.
    """
    import httpx  # not at the top: env projects built from this module do not install it

    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and process.poll() is None, f"{what} did not start"
        time.sleep(0.5)
