"""Protocol checks: the server starts, its routes answer, the WebSocket protocol holds.

The protocol must hold under malformed input, oversized frames and concurrent sessions. Raw
frames go through the ``websockets`` library directly, each wait under a deadline and each
received frame under ``max_size``: a hostile server gets a failed check, never a hung validator.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from taskhub import EnvCapacityError, EnvConnectError, EnvError, EnvTimeout
from taskhub.env import (
    OPENENV_HTTP,
    EnvClient,
    HttpDialect,
    learn_http_dialect,
    request_schema,
    split_base_url,
)

from ._actions import candidate_actions, hinted_actions, inline, repaired
from ._check import Finding, check, failed, passed, skipped
from ._driver import ActionPolicy, HttpReply, Trajectory, Transport, field_diff, http_call
from ._json import JsonObject
from ._subject import Product, Subject, noop_policy

# --- HTTP routes -------------------------------------------------------------------------------


async def fetch_metadata(subject: Subject) -> HttpReply:
    """``GET /metadata`` as the server answered it."""
    return await http_call(subject.driver, "/metadata")


#: The server's ``GET /metadata`` reply (the report carries its body).
METADATA = Product("metadata", fetch_metadata)


@check("protocol.health", level="protocol", needs=("server",))
async def check_health(subject: Subject) -> Finding:
    """GET /health answers 200."""
    reply = await http_call(subject.driver, "/health")
    measured: JsonObject = {"status": reply.status, "latency_s": round(reply.latency_s, 4)}
    if reply.status != 200:
        return failed(
            f"GET /health answered {reply.status or reply.error}",
            'Serve GET /health returning 200 {"status": "healthy"} (create_app does).',
            measured=measured,
            evidence=[reply.evidence()],
        )
    return passed("GET /health answers 200", measured=measured, evidence=[reply.evidence()])


@check("protocol.metadata", level="protocol", needs=("server",))
async def check_metadata(subject: Subject) -> Finding:
    """GET /metadata returns the env's name and description."""
    reply = await subject.get(METADATA)
    body = reply.json if isinstance(reply.json, dict) else None
    if (
        reply.status != 200
        or body is None
        or not isinstance(body.get("name"), str)
        or not isinstance(body.get("description"), str)
    ):
        return failed(
            "GET /metadata does not return an object with name and description",
            "Serve GET /metadata with name, description and version (create_app derives them "
            "from the environment's get_metadata()).",
            measured={"status": reply.status},
            evidence=[reply.evidence()],
        )
    return passed(
        f"GET /metadata names the env {body['name']!r}",
        measured={"name": body["name"], "version": body.get("version")},
    )


def _is_json_schema(value: Any) -> bool:
    return isinstance(value, dict) and bool(
        {"type", "properties", "$ref", "anyOf", "oneOf", "allOf"} & set(value)
    )


@check("protocol.schema", level="protocol", needs=("server",))
async def check_schema(subject: Subject) -> Finding:
    """GET /schema returns JSON schemas of the action, the observation and the state."""
    wire = await subject.get(WIRE)
    reply = wire.schema_reply
    body = reply.json if isinstance(reply.json, dict) else {}
    parts = {key: _is_json_schema(body.get(key)) for key in ("action", "observation", "state")}
    measured: JsonObject = {
        "status": reply.status,
        **{f"has_{k}": v for k, v in parts.items()},
        "has_reset_observation": _is_json_schema(body.get("reset_observation")),
    }
    if reply.status != 200 or not all(parts.values()):
        missing = [k for k, ok in parts.items() if not ok]
        return failed(
            f"GET /schema lacks a JSON schema for {', '.join(missing)}",
            "Serve GET /schema with the action, observation and state JSON schemas "
            "(create_app builds them from the pydantic models).",
            measured=measured,
            evidence=[reply.evidence()],
        )
    return passed("GET /schema describes the action, observation and state", measured=measured)


@check("protocol.openapi", level="protocol", needs=("server",))
async def check_openapi(subject: Subject) -> Finding:
    """GET /openapi.json is an OpenAPI document listing the env's routes."""
    reply = await http_call(subject.driver, "/openapi.json")
    body = reply.json if isinstance(reply.json, dict) else {}
    paths = body.get("paths")
    if (
        reply.status != 200
        or not isinstance(paths, dict)
        or not isinstance(body.get("openapi"), str)
    ):
        return failed(
            "GET /openapi.json is not an OpenAPI document",
            "Serve the app with FastAPI (create_app does), which publishes /openapi.json.",
            measured={"status": reply.status},
            evidence=[reply.evidence()],
        )
    return passed(
        f"/openapi.json lists {len(paths)} routes", measured={"paths": sorted(paths)[:40]}
    )


# --- WebSocket ---------------------------------------------------------------------------------

ReplyKind = Literal["error", "observation", "state", "other", "closed", "timeout", "binary"]


@dataclass
class RawReply:
    """What a raw frame got back."""

    kind: ReplyKind
    text: str = ""
    code: str | None = None
    close_code: int | None = None

    def evidence(self) -> JsonObject:
        """The reply, for reports."""
        out: JsonObject = {"reply": self.kind}
        if self.text:
            out["frame"] = self.text[:400]
        if self.code:
            out["code"] = self.code
        if self.close_code is not None:
            out["close_code"] = self.close_code
        return out


async def raw_recv(ws: ClientConnection, timeout: float) -> RawReply:
    """Read one frame under ``timeout`` and classify it."""
    try:
        async with asyncio.timeout(timeout):
            raw = await ws.recv()
    except TimeoutError:
        return RawReply("timeout")
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd is not None else None
        if code is None and "1009" in str(exc):
            code = 1009
        return RawReply("closed", close_code=code)
    if isinstance(raw, bytes):
        return RawReply("binary", raw[:100].hex())
    try:
        message = json.loads(raw)
    except ValueError:
        return RawReply("other", raw)
    if not isinstance(message, dict):
        return RawReply("other", raw)
    kind = message.get("type")
    if kind == "error":
        data = message.get("data")
        error_code = str(data.get("code")) if isinstance(data, dict) else None
        return RawReply("error", raw, code=error_code)
    if kind in ("observation", "state"):
        return RawReply(kind, raw)
    return RawReply("other", raw)


@contextlib.asynccontextmanager
async def raw_socket(subject: Subject) -> Any:
    """A raw WebSocket to the env's ``/ws`` (deadline on the handshake, limit on frames)."""
    driver = subject.driver
    if driver.url is None:
        raise EnvConnectError("no server")
    ws_url = split_base_url(driver.url)[1]
    try:
        ws = await connect(
            ws_url,
            open_timeout=driver.config.op_timeout_s,
            max_size=driver.config.max_frame_bytes,
            compression=None,
            close_timeout=1,
        )
    except InvalidStatus as exc:
        raise EnvConnectError(
            f"{ws_url} refused the WebSocket handshake with HTTP {exc.response.status_code}",
            code=str(exc.response.status_code),
        ) from None
    except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
        raise EnvConnectError(f"cannot open {ws_url}: {type(exc).__name__}: {exc}") from None
    try:
        yield ws
    finally:
        if ws.transport is not None:
            ws.transport.abort()


@dataclass
class Wire:
    """What the server speaks, as discovered before the first episode."""

    schema_reply: HttpReply
    """``GET /schema`` as answered."""
    openapi_reply: HttpReply | None = None
    """``GET /openapi.json`` as answered."""
    ws_frame: str = ""
    """The reset frame sent to ``/ws``."""
    ws_reply: RawReply | None = None
    """What ``/ws`` answered to it (None when no socket opened)."""
    ws_error: str | None = None
    """Why no WebSocket opened."""
    ws_usable: bool = False
    """Whether ``/ws`` speaks OpenEnv's protocol."""
    schema_source: str | None = None
    """Where the action schema came from: ``schema`` (``/schema``), ``openapi``, or None."""
    schema_disagreement: list[str] = field(default_factory=list)
    """How ``/schema``'s action differs from the step body the server validates."""
    nested_observation: bool | None = None
    """Whether HTTP replies nest the observation under ``observation`` (OpenEnv's body)."""
    attempts: list[JsonObject] = field(default_factory=list)
    """What was tried to play an episode, and what came back."""
    cause: str | None = None
    """Why no episode plays (None when one does)."""
    action: JsonObject | None = None
    """The first action the env accepted."""
    http_dialect: HttpDialect | None = None
    """The dialect of the server's HTTP episode routes, when it has them (``/ws`` or not)."""
    openapi_action: dict[str, Any] | None = None
    """The action schema of the step route in ``/openapi.json``, when it is typed."""
    slow_reset_s: float | None = None
    """How long a reset took, when it needed more than the request deadline."""


def _openapi_action(reply: HttpReply) -> tuple[HttpDialect | None, dict[str, Any] | None]:
    learnt = learn_http_dialect(reply.json)
    if learnt is None:
        return None, None
    dialect, action = learnt
    return dialect, inline(reply.json, action) if action else None


def _disagreement(declared: dict[str, Any], validated: dict[str, Any]) -> list[str]:
    """Fields the server requires that ``/schema`` does not describe, and the reverse."""
    declared_props = set(declared.get("properties") or {}) - {"metadata"}
    validated_props = set(validated.get("properties") or {}) - {"metadata"}
    if not validated_props:
        return []
    out = [
        f"the step route requires {name!r}, which /schema's action does not have"
        for name in sorted(set(validated.get("required") or []) - declared_props)
    ]
    out += [
        f"/schema's action requires {name!r}, which the step route does not take"
        for name in sorted(set(declared.get("required") or []) - validated_props)
    ]
    return out


async def _try_to_play(subject: Subject, wire: Wire, dialects: list[HttpDialect]) -> None:
    """Find a transport, reset kwargs and a first action the env accepts; set up the driver."""
    driver = subject.driver
    task = subject.tasks[0] if subject.tasks else None
    base = subject.reset_kwargs(task, tag="wire") if task is not None else {"seed": 1}
    resets = [base, {k: v for k, v in base.items() if k != "episode_id"}, {}]
    routes: list[tuple[Transport, HttpDialect | None]] = []
    if wire.ws_usable:
        routes.append(("ws", None))
    routes += [("http", d) for d in dialects]
    reset_errors: list[str] = []
    step_errors: list[str] = []
    waited_long = False
    for transport, dialect in routes:
        driver.transport = transport
        driver.dialect = dialect or OPENENV_HTTP
        kwargs = None
        timeouts = 0
        first: dict[str, Any] = {}
        for candidate in resets:
            trajectory = await driver.play(candidate, lambda i, r: None, max_steps=0)
            wire.attempts.append(
                {"transport": transport, "reset": candidate, "error": _text(trajectory.error)}
            )
            if trajectory.error is None:
                kwargs = candidate
                first = trajectory.first.observation if trajectory.first else {}
                _raise_deadline(subject, wire, trajectory.duration_s)
                break
            timeouts += isinstance(trajectory.error, EnvTimeout)
            reset_errors.append(_text(trajectory.error) or "")
        if kwargs is None and timeouts == len(resets) and not waited_long:
            waited_long = True  # every reset timed out: a slow env gets one long wait
            slow = await _slow_reset(subject, wire, base)
            if slow is not None:
                kwargs = base
                first = slow.first.observation if slow.first else {}
        if kwargs is None:
            continue
        if transport == "http" and dialect is not None and kwargs is not base:
            driver.dialect = _with_reset_keys(dialect, kwargs)
        if transport == "http":
            wire.http_dialect = driver.dialect
        candidates = candidate_actions(driver.action_schema)
        if wire.openapi_action is not None:
            candidates += [a for a in candidate_actions(wire.openapi_action) if a not in candidates]
        # a choice the reset observation lists (legal_moves...) goes right after the emptiest
        hints = hinted_actions(driver.action_schema, first)
        for position, (hinted, _hint) in enumerate(hints[:3], start=1):
            if hinted not in candidates:
                candidates.insert(min(position, len(candidates)), hinted)
        tried = 0
        while candidates and tried < MAX_FIRST_ACTIONS:
            action = candidates.pop(0)
            tried += 1
            trajectory = await driver.play(kwargs, _once(action), max_steps=1)
            error = _text(trajectory.error)
            wire.attempts.append({"transport": transport, "action": action, "error": error})
            fixed = repaired(action, error or "") if error else None
            if fixed is not None and fixed not in candidates:
                candidates.insert(0, fixed)  # the server said which value it wants
            if trajectory.error is None and (trajectory.steps or trajectory.done):
                wire.action = action
                wire.cause = None
                driver.choice_hint = next((h for a, h in hints if a == action), None)
                if action != subject.noop_action():
                    driver.first_action = action
                if transport == "http":
                    reply = await http_call(
                        driver, driver.dialect.reset_path, method="POST", json_body=kwargs
                    )
                    if isinstance(reply.json, dict):
                        wire.nested_observation = isinstance(reply.json.get("observation"), dict)
                return
            step_errors.append(error or "step was not answered")
    driver.transport = None
    driver.dialect = OPENENV_HTTP
    if not routes:
        wire.cause = "the server has neither a working /ws nor POST /reset and POST /step"
    elif step_errors:
        wire.cause = (
            f"reset works but every step was refused ({len(step_errors)} actions tried): "
            f"{_most_common(step_errors)}"
        )
    else:
        wire.cause = f"every reset failed ({len(reset_errors)} tried): {_most_common(reset_errors)}"


#: Most first actions tried on one transport before the env is said to refuse them all.
MAX_FIRST_ACTIONS = 8
#: A slow env's request deadline: this many times its measured reset, plus a margin (seconds).
SLOW_FACTOR, SLOW_MARGIN_S = 2.0, 5.0


async def _slow_reset(subject: Subject, wire: Wire, kwargs: JsonObject) -> Trajectory | None:
    """Reset once more under the startup deadline; if it answers, raise the request deadline.

    An env whose reset does real work (a simulation's warm-up, a dataset load) may need more
    than the request deadline, on a loaded machine most of all: it is measured, not refused.
    """
    driver = subject.driver
    configured = subject.config.op_timeout_s
    driver.op_timeout_s = max(subject.config.startup_timeout_s, configured)
    trajectory = await driver.play(kwargs, lambda i, r: None, max_steps=0)
    wire.attempts.append(
        {
            "transport": driver.transport,
            "reset": kwargs,
            "deadline_s": driver.op_timeout_s,
            "error": _text(trajectory.error),
            "duration_s": round(trajectory.duration_s, 2),
        }
    )
    if trajectory.error is not None:
        driver.op_timeout_s = configured
        return None
    wire.slow_reset_s = round(trajectory.duration_s, 2)
    driver.op_timeout_s = min(
        driver.op_timeout_s, max(configured, SLOW_FACTOR * trajectory.duration_s + SLOW_MARGIN_S)
    )
    return trajectory


def _raise_deadline(subject: Subject, wire: Wire, reset_s: float) -> None:
    """A reset that answered in over half the request deadline raises it, as a slow one does.

    A reset whose time varies with the machine's load (a warm-up) that once answered in
    time would otherwise time out in the next check.
    """
    driver = subject.driver
    configured = subject.config.op_timeout_s
    if reset_s > configured / 2:
        wire.slow_reset_s = round(reset_s, 2)
        driver.op_timeout_s = max(
            driver.op_timeout_s,
            min(
                max(configured, subject.config.startup_timeout_s),
                SLOW_FACTOR * reset_s + SLOW_MARGIN_S,
            ),
        )


def _once(action: JsonObject) -> ActionPolicy:
    """A policy that sends ``action`` once."""
    return lambda i, _r: action if i == 0 else None


def _with_reset_keys(dialect: HttpDialect, kwargs: JsonObject) -> HttpDialect:
    keys = tuple(kwargs)
    if dialect.reset_keys is not None:
        keys = tuple(k for k in dialect.reset_keys if k in kwargs) or keys
    return dialect.model_copy(update={"reset_keys": keys or ()})


def _text(error: Exception | None) -> str | None:
    return f"{type(error).__name__}: {error}"[:300] if error is not None else None


def _most_common(errors: list[str]) -> str:
    """The error seen most often (the first of them on a tie), shortened."""
    best = max(errors, key=errors.count) if errors else "no answer"
    return best[:300]


async def discover_wire(subject: Subject) -> Wire:
    """Learn how the server speaks, and find a first episode that plays.

    The schemas come from ``/schema``, else from the request bodies ``/openapi.json``
    describes; the transport is ``/ws`` when it speaks OpenEnv's protocol, else HTTP in the
    dialect the OpenAPI document gives (or, without one, OpenEnv's wrapped body and then the
    bare one). Reset kwargs and first actions are tried until one episode plays. The driver is
    set up with what is found, so every later episode speaks the server's wire.
    """
    driver = subject.driver
    reply = await http_call(driver, "/schema")
    body = reply.json if isinstance(reply.json, dict) else {}
    wire = Wire(schema_reply=reply)
    if reply.status == 200 and all(
        _is_json_schema(body.get(key)) for key in ("action", "observation", "state")
    ):
        driver.schema = body
        wire.schema_source = "schema"
    wire.openapi_reply = await http_call(driver, "/openapi.json")
    dialect, openapi_action = _openapi_action(wire.openapi_reply)
    wire.openapi_action = openapi_action
    declared = driver.action_schema
    if openapi_action is not None:
        if declared is None:
            driver.schema = {**(driver.schema or {}), "action": openapi_action}
            wire.schema_source = "openapi"
        else:
            wire.schema_disagreement = _disagreement(inline(declared, declared), openapi_action)
            if wire.schema_disagreement:
                driver.schema = {**(driver.schema or {}), "action": openapi_action}
                wire.schema_source = "openapi"
    wire.ws_frame = json.dumps(
        {"type": "reset", "data": {"seed": 1, "episode_id": "taskhub-ws-probe"}}
    )
    try:
        async with raw_socket(subject) as ws:
            await ws.send(wire.ws_frame)
            wire.ws_reply = await raw_recv(ws, driver.config.op_timeout_s)
    except EnvConnectError as exc:
        wire.ws_error = str(exc)
    if wire.ws_reply is not None:
        wire.ws_usable = wire.ws_reply.kind == "observation" or (
            wire.ws_reply.kind == "error" and wire.ws_reply.code is not None
        )
    dialects: list[HttpDialect] = []
    if dialect is not None:
        dialects = [dialect]
        if openapi_action is None:  # an untyped step body: either shape may be the one
            dialects.append(dialect.model_copy(update={"wrap_action": not dialect.wrap_action}))
    elif await _has_http_episodes(subject):
        dialects = [OPENENV_HTTP, OPENENV_HTTP.model_copy(update={"wrap_action": False})]
    wire.http_dialect = dialects[0] if dialects else None
    if (
        wire.ws_reply is not None
        and wire.ws_reply.kind == "error"
        and wire.ws_reply.code == ("CAPACITY_REACHED")
    ):
        driver.transport = "ws"  # a server at capacity: protocol.websocket reports it
        wire.cause = "/ws refused the first session with CAPACITY_REACHED"
        return wire
    await _try_to_play(subject, wire, dialects)
    return wire


#: How the server speaks (transport, schemas); the driver is set up from it.
WIRE = Product("wire", discover_wire)


def unfinished_wire(seconds: float) -> Wire:
    """The wire of a server whose discovery did not finish within ``seconds``."""
    why = f"the protocol discovery did not finish within {seconds:g}s"
    return Wire(schema_reply=HttpReply("GET /schema", error=why), cause=why)


@check("protocol.websocket", level="protocol", needs=("server",), provides=("ws",))
async def check_websocket(subject: Subject) -> Finding:
    """The WebSocket /ws accepts a session and answers reset with an observation frame."""
    wire = await subject.get(WIRE)
    transport = subject.driver.transport
    if wire.ws_reply is None:
        return failed(
            f"no WebSocket episode session: {wire.ws_error}",
            "Serve the OpenEnv WebSocket endpoint /ws (create_app does): episodes over HTTP "
            "cannot carry a session, so concurrent episodes trample one global env.",
            measured={"http_fallback": transport == "http"},
            evidence=[wire.ws_error],
        )
    reply = wire.ws_reply
    evidence = [{"sent": wire.ws_frame[:300], **reply.evidence()}]
    if reply.kind == "observation":
        return passed("/ws answers reset with an observation frame", evidence=evidence)
    if reply.kind == "error" and reply.code == "CAPACITY_REACHED":
        return failed(
            "/ws refused the first session with CAPACITY_REACHED",
            "Accept at least one session (max_concurrent_envs >= 1).",
            evidence=evidence,
        )
    if reply.kind == "error":
        # the protocol works; the reset itself failed on these kwargs (protocol.episode judges)
        return passed("/ws answers frames (reset with a bare seed was refused)", evidence=evidence)
    fallback = " (episodes were played over HTTP instead)" if transport == "http" else ""
    return failed(
        f"/ws answered OpenEnv's reset frame with {reply.kind}: it speaks another "
        f"protocol{fallback}",
        'Answer {"type": "reset"} frames with {"type": "observation", "data": {...}} '
        "(create_app's /ws does), or serve no /ws at all.",
        evidence=evidence,
    )


async def _has_http_episodes(subject: Subject) -> bool:
    reply = await http_call(subject.driver, "/openapi.json")
    paths = reply.json.get("paths") if isinstance(reply.json, dict) else None
    if isinstance(paths, dict):
        return "/reset" in paths and "/step" in paths
    probe = await http_call(subject.driver, "/reset", method="POST", json_body={})
    return probe.status is not None and probe.status < 404


@check(
    "protocol.episode",
    level="protocol",
    needs=("server",),
    uses=("protocol.schema", "protocol.websocket"),
    provides=("episode",),
)
async def check_episode(subject: Subject) -> Finding:
    """A whole episode runs: reset, then a step, both answered with observations."""
    wire = await subject.get(WIRE)
    transport = subject.driver.transport
    if transport is None or wire.cause is not None:
        return failed(
            f"no episode plays: {wire.cause}",
            "Serve /ws (or at least POST /reset and POST /step) as OpenEnv's create_app does; "
            "reset() must return an observation and step() must accept the actions the "
            "schema describes.",
            measured={"attempts": len(wire.attempts)},
            evidence=wire.attempts[-6:],
        )
    task = subject.tasks[0] if subject.tasks else None
    kwargs = subject.reset_kwargs(task) if task is not None else {"seed": 1}
    action = subject.noop_action()
    driver = subject.driver
    trajectory = await driver.play(kwargs, lambda i, r: action if i == 0 else None, max_steps=1)
    limit = subject.config.startup_timeout_s
    if isinstance(trajectory.error, EnvTimeout) and driver.op_timeout_s < limit:
        # the discovery's episode answered in time: a reset whose time varies with the
        # machine's load gets one long wait, and the deadline it needed
        driver.op_timeout_s = limit
        trajectory = await driver.play(kwargs, lambda i, r: action if i == 0 else None, max_steps=1)
        if trajectory.error is None:
            wire.slow_reset_s = round(trajectory.duration_s, 2)
            driver.op_timeout_s = min(limit, SLOW_FACTOR * trajectory.duration_s + SLOW_MARGIN_S)
            driver.op_timeout_s = max(driver.op_timeout_s, subject.config.op_timeout_s)
    evidence: list[Any] = [trajectory.describe()]
    if trajectory.error is not None or trajectory.first is None:
        return failed(
            f"an episode does not run over {transport}: {trajectory.error}",
            "reset() must return an observation for the taskset's kwargs and step() must "
            "accept the actions the schema describes.",
            evidence=evidence,
        )
    if not trajectory.steps and not trajectory.first.done:
        return failed(
            "step was not answered",
            driver.in_transport(
                "Answer step frames with observations.",
                f"Answer POST {driver.dialect.step_path} with an observation.",
            ),
            evidence=evidence,
        )
    slow = (
        f" (a reset takes {wire.slow_reset_s:g}s: requests were given "
        f"{subject.driver.op_timeout_s:g}s)"
        if wire.slow_reset_s is not None
        else ""
    )
    return passed(
        f"reset and step answer with observations over {transport}{slow}",
        measured={
            "transport": transport,
            "first_action": action,
            "slow_reset_s": wire.slow_reset_s,
            "op_timeout_s": subject.driver.op_timeout_s,
        },
        evidence=evidence,
    )


@check("protocol.wire_format", level="protocol", needs=("server",), uses=("protocol.episode",))
async def check_wire_format(subject: Subject) -> Finding:
    """Episodes speak OpenEnv's wire format: ``/ws`` frames, or OpenEnv's HTTP routes and bodies.

    A server in another dialect is still played (every later check runs over what works);
    this is the one finding that says how it differs, so that OpenEnv's own clients can talk
    to it.
    """
    wire = await subject.get(WIRE)
    driver = subject.driver
    if driver.transport is None or wire.cause is not None:
        return skipped("no episode plays (protocol.episode says why)")
    if driver.transport == "ws":
        return passed("episodes run over /ws in OpenEnv's frames")
    dialect = driver.dialect
    differences = []
    if not dialect.wrap_action:
        differences.append('the step body is the bare action, not {"action": {...}}')
    if wire.nested_observation is False:
        differences.append(
            'replies carry the observation at the top level, not under "observation"'
        )
    if (dialect.reset_path, dialect.step_path) != ("/reset", "/step"):
        differences.append(f"the routes are {dialect.reset_path} and {dialect.step_path}")
    measured: JsonObject = {"dialect": dialect.model_dump(), "nested": wire.nested_observation}
    if differences:
        return failed(
            f"the HTTP episode routes differ from OpenEnv's wire format: {'; '.join(differences)}",
            "Serve the env with OpenEnv's create_app (POST /reset, POST /step with "
            '{"action": {...}}, replies {"observation": {...}, "reward": r, "done": d}, and '
            "/ws), so that OpenEnv's clients and trainers can play it.",
            measured=measured,
            evidence=differences,
        )
    return passed("the HTTP episode routes speak OpenEnv's bodies", measured=measured)


def _client(subject: Subject) -> EnvClient:
    driver = subject.driver
    return EnvClient(
        driver.url or "",
        timeout=driver.config.op_timeout_s,
        connect_timeout=driver.config.op_timeout_s,
        max_frame_bytes=driver.config.max_frame_bytes,
    )


@check("protocol.concurrency", level="protocol", needs=("episode", "ws"))
async def check_concurrency(subject: Subject) -> Finding:
    """The server serves as many concurrent sessions as declared (or as it was asked for)."""
    declared = subject.env.declared_sessions
    asked = declared or subject.config.sessions
    probe = min(asked or subject.config.sessions, 16)
    clients = [_client(subject) for _ in range(probe)]
    task = subject.tasks[0] if subject.tasks else None

    async def open_one(index: int, client: EnvClient) -> str:
        kwargs = subject.reset_kwargs(task) if task else {"seed": index}
        try:
            await client.reset(**kwargs)
        except EnvCapacityError:
            return "CAPACITY_REACHED"
        except EnvError as exc:
            return f"{type(exc).__name__}: {exc}"[:200]
        return "ok"

    outcomes: list[str] = []
    for attempt in range(2):  # sessions of earlier checks may still be closing server-side
        try:
            outcomes = await asyncio.gather(*(open_one(i, c) for i, c in enumerate(clients)))
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        if outcomes.count("ok") == probe or attempt == 1:
            break
        await asyncio.sleep(0.5)
        clients = [_client(subject) for _ in range(probe)]
    achieved = outcomes.count("ok")
    measured: JsonObject = {
        "declared": declared,
        "asked": asked,
        "probed": probe,
        "achieved": achieved,
        "capacity_reached": outcomes.count("CAPACITY_REACHED"),
    }
    errors = [o for o in outcomes if o not in ("ok", "CAPACITY_REACHED")]
    if achieved == 0 or errors:
        return failed(
            f"{achieved} of {probe} concurrent sessions opened; errors: {errors[:3]}",
            "Serve concurrent sessions: one env instance per WebSocket session.",
            measured=measured,
            evidence=errors[:5],
        )
    if achieved < probe:
        return failed(
            f"asked for {asked} concurrent sessions, served {achieved} "
            f"({outcomes.count('CAPACITY_REACHED')} CAPACITY_REACHED)",
            "Pass max_concurrent_envs=int(os.environ.get('MAX_CONCURRENT_ENVS', N)) to "
            "create_app and declare the value under variables: in openenv.yaml.",
            measured=measured,
        )
    return passed(f"{achieved} concurrent sessions served", measured=measured)


# --- HTTP episodes -----------------------------------------------------------------------------

HttpOutcome = Literal["none", "unknown", "stateless", "broken", "carries", "shared", "isolated"]


@dataclass
class HttpEpisode:
    """What an episode played over the server's HTTP routes showed."""

    outcome: HttpOutcome
    """``stateless``: a /ws server's HTTP routes serve a fresh env per request. ``broken``:
    an HTTP-only server's episode does not carry across requests. ``shared``: one env serves
    every HTTP client. ``carries`` / ``isolated``: the episode works (and each client has its
    own). ``none``: no HTTP routes; ``unknown``: it could not be seen."""
    summary: str
    measured: JsonObject = field(default_factory=dict)
    evidence: list[Any] = field(default_factory=list)
    remediation: str = ""


async def _http_state(session: Any) -> tuple[JsonObject | None, str | None]:
    try:
        return await session.state(), None
    except EnvError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:300]


#: What to do about HTTP routes that serve a fresh env per request.
STATELESS_REMEDIATION = (
    "Play episodes over /ws (OpenEnv's clients do), and say so; to let HTTP clients play too, "
    "keep each HTTP episode's env between requests behind a session id the reset returns."
)


async def probe_http_episode(subject: Subject) -> HttpEpisode:
    """Play one episode over the server's HTTP routes, then reset a second HTTP client.

    A step that fails right after a successful reset, a state that fails after a step, or a
    step count that does not advance while it does over /ws: the routes serve a fresh env per
    request. A second client's reset that changes the first client's state: one global env.
    """
    driver = subject.driver
    wire = await subject.get(WIRE)
    dialect = wire.http_dialect
    if dialect is None:
        return HttpEpisode("none", "the server has no HTTP episode routes (POST /reset and /step)")
    over_ws = driver.transport == "ws"
    task = subject.tasks[0]
    action = subject.noop_action()
    kwargs = subject.reset_kwargs(task, tag="http-a")
    measured: JsonObject = {"transport": driver.transport, "dialect": dialect.model_dump()}

    def fresh(what: str, evidence: JsonObject) -> HttpEpisode:
        if over_ws:
            return HttpEpisode(
                "stateless",
                f"{what}: the HTTP routes serve a fresh env per request (episodes play only "
                "over /ws)"[:600],
                {**measured, "http_stateless": True},
                [evidence],
                STATELESS_REMEDIATION,
            )
        return HttpEpisode(
            "broken",
            what[:500],
            measured,
            [evidence],
            f"Keep one env per episode across HTTP requests: a {dialect.step_path} on a fresh, "
            "never-reset env fails or acts on a blank episode.",
        )

    async with driver.session("http", dialect) as first:
        try:
            await first.reset(**kwargs)
        except EnvError as exc:
            return HttpEpisode("unknown", f"an HTTP reset failed: {exc}"[:400], measured)
        state_0, state_0_error = await _http_state(first)
        try:
            result = await first.step(action)
        except EnvError as exc:
            also = (
                f"; GET {dialect.state_path} failed after the reset too: {state_0_error}"
                if state_0_error is not None and "HTTP 5" in state_0_error
                else ""
            )
            return fresh(
                f"HTTP POST {dialect.step_path} failed right after a successful reset: "
                f"{str(exc)[:300]}{also}",
                {
                    "reset": kwargs,
                    "action": action,
                    "error": str(exc)[:400],
                    "state_after_reset": state_0 if state_0_error is None else state_0_error,
                },
            )
        state_1, state_error = await _http_state(first)
        if state_1 is None and state_error is not None and (state_0 is not None or over_ws):
            if state_0 is not None or "HTTP 5" in state_error:
                return fresh(
                    f"GET {dialect.state_path} failed after an HTTP reset and step: {state_error}",
                    {
                        "reset": kwargs,
                        "action": action,
                        "state_after_reset": state_0,
                        "state_error": state_error,
                    },
                )
        if over_ws:
            count_0 = (state_0 or {}).get("step_count")
            count_1 = (state_1 or {}).get("step_count")
            measured["step_count"] = [count_0, count_1]
            if isinstance(count_0, int) and count_0 == count_1 and not result.done:
                played = await driver.play(
                    subject.reset_kwargs(task, tag="http-ws"),
                    noop_policy(subject),
                    max_steps=1,
                    snapshots=True,
                )
                counts = [s.get("step_count") for s in played.states]
                if played.final_state is not None:
                    counts.append(played.final_state.get("step_count"))
                measured["ws_step_count"] = counts
                if len(set(counts)) < 2:
                    return HttpEpisode(
                        "carries",
                        "HTTP /step answers; the state counts steps no more over /ws than over "
                        "HTTP (runtime.state_contract judges it)",
                        measured,
                    )
                return fresh(
                    f"HTTP /step did not advance the episode: step_count stayed {count_0} "
                    f"while over /ws it went {counts}",
                    {"reset": kwargs, "action": action, "http_states": [state_0, state_1]},
                )
            return HttpEpisode("carries", "HTTP /reset and /step carry an episode", measured)
        if state_1 is None:
            return HttpEpisode(
                "unknown",
                f"the server has no working state route ({state_error}): whether HTTP clients "
                "share one env cannot be seen",
                measured,
            )
        again, _ = await _http_state(first)
        if again != state_1:
            return HttpEpisode(
                "unknown",
                "two GET /state calls with nothing in between differ (the state holds a clock "
                "or counter): whether HTTP clients share one env cannot be seen",
                {**measured, "state_drift": field_diff(state_1, again)},
            )
        other = subject.reset_kwargs(
            subject.tasks[-1], seed=int(kwargs.get("seed", 0)) + 1, tag="http-b"
        )
        async with driver.session("http", dialect) as second:
            try:
                await second.reset(**other)
            except EnvError as exc:
                return HttpEpisode(
                    "unknown", f"a second client's reset failed: {exc}"[:300], measured
                )
        state_2, _ = await _http_state(first)
    changes = field_diff(state_1, state_2)
    measured["changed_fields"] = len(changes)
    evidence: JsonObject = {
        "client_a_reset": kwargs,
        "client_b_reset": other,
        "client_a_state_before": state_1,
        "client_a_state_after": state_2,
        "diff": changes,
    }
    if changes:
        return HttpEpisode(
            "shared",
            "a second HTTP client's reset changed the first client's episode "
            f"(one global env serves every client): {'; '.join(changes[:3])}",
            measured,
            [evidence],
            f"Keep one env per client (an episode id that {dialect.reset_path} returns and "
            f"{dialect.step_path} names): with one module-level env, concurrent episodes "
            "trample each other.",
        )
    return HttpEpisode(
        "isolated", "a second HTTP client's reset left the first client's episode alone", measured
    )


#: One episode over the HTTP routes (read by runtime.http_episode and protocol.http_stateless).
HTTP_EPISODE = Product("http_episode", probe_http_episode)


@check("protocol.http_stateless", level="protocol", needs=("episode",))
async def check_http_stateless(subject: Subject) -> Finding:
    """A /ws server's HTTP routes carry an episode, rather than a fresh env per request.

    OpenEnv's ``create_app`` serves ``POST /reset`` and ``/step`` with a fresh env per request
    while ``/ws`` carries the episodes: an HTTP client's step then fails (a 500) or acts on a
    blank env that never advances. The env is usable over /ws; HTTP clients cannot play it.
    """
    if subject.driver.transport != "ws":
        return skipped("episodes are played over HTTP: runtime.http_episode judges them")
    probe = await subject.get(HTTP_EPISODE)
    if probe.outcome == "stateless":
        return failed(
            probe.summary, probe.remediation, measured=probe.measured, evidence=probe.evidence
        )
    if probe.outcome in ("carries", "isolated"):
        return passed(probe.summary, measured=probe.measured)
    return skipped(probe.summary, measured=probe.measured)


# --- malformed input ---------------------------------------------------------------------------


def invalid_action(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """An action that certainly violates ``schema`` (a wrong type in every typed field).

    A required field the schema leaves untyped (``Any``) gets a value that is no action at all.
    """
    props = (schema or {}).get("properties") or {}
    required = set((schema or {}).get("required") or [])
    wrong: dict[str, Any] = {}
    for name, spec in props.items():
        if name == "metadata" or not isinstance(spec, dict):
            continue
        kind = spec.get("type")
        if isinstance(kind, str):
            wrong[name] = "not an object" if kind in ("object", "array") else {"bad": [1]}
        elif "enum" in spec:
            wrong[name] = {"bad": [1]}
        elif name in required and not any(k in spec for k in ("anyOf", "oneOf", "allOf", "$ref")):
            # a required field typed Any: a value that is no action at all must still be refused
            wrong[name] = {"__taskhub_invalid__": [1]}
    if wrong:
        return wrong
    if (schema or {}).get("additionalProperties") is False:
        return {"__taskhub_invalid__": 1}
    return None


@dataclass
class Probe:
    """One malformed frame and what a healthy server must do with it."""

    name: str
    frame: str | bytes
    recoverable: bool  # the session must stay usable afterwards


#: Seconds a launched server that still runs gets to answer /health after a probe.
ALIVE_GRACE_S = 10.0


async def _alive(subject: Subject, *, reset: bool = True) -> tuple[bool, str]:
    """Whether the server still serves: its process runs, /health and a fresh reset answer.

    With ``reset=False`` the reset is left out (between probes: a slow env's resets are
    costly; the last probe is followed by one).

    A launched server whose process still runs gets ``ALIVE_GRACE_S`` to answer /health again:
    on a loaded machine a server busy with the probe's aftermath is slow, not dead.
    """
    grace_until = time.monotonic() + max(subject.config.op_timeout_s, ALIVE_GRACE_S)
    while True:
        server = subject.driver.server
        if server is not None and server.process.poll() is not None:
            code = server.process.returncode
            return False, f"the server process exited with code {code}"
        health = await http_call(subject.driver, "/health")
        if health.status is not None:
            break
        if server is None or time.monotonic() >= grace_until:
            return False, f"/health no longer answers: {health.error}"
        await asyncio.sleep(0.2)
    if not reset:
        return True, "alive"
    task = subject.tasks[0] if subject.tasks else None
    trajectory = await subject.driver.play(
        subject.reset_kwargs(task) if task else {"seed": 1}, lambda i, r: None, max_steps=0
    )
    if trajectory.error is not None and trajectory.error.code != "429":  # rate limited: alive
        return False, f"a new session no longer resets: {trajectory.error}"
    return True, "alive"


async def _probe_ws(subject: Subject, probe: Probe) -> JsonObject:
    timeout = subject.config.op_timeout_s
    task = subject.tasks[0] if subject.tasks else None
    reset = json.dumps(
        {"type": "reset", "data": subject.reset_kwargs(task) if task else {"seed": 1}}
    )
    outcome: JsonObject = {"probe": probe.name}
    try:
        async with raw_socket(subject) as ws:
            await ws.send(reset)
            first = await raw_recv(ws, timeout)
            if first.kind != "observation":
                outcome["problem"] = f"reset before the probe got {first.kind}"
                outcome.update(first.evidence())
                return outcome
            try:
                await ws.send(probe.frame)
            except ConnectionClosed:
                pass
            reply = await raw_recv(ws, timeout)
            outcome.update(reply.evidence())
            if reply.kind == "timeout":
                outcome["problem"] = f"no reply within {timeout:g}s"
            elif reply.kind in ("observation", "state"):
                outcome["problem"] = "accepted: answered with an observation instead of an error"
            elif reply.kind in ("other", "binary"):
                outcome["problem"] = "answered with a frame that is not an OpenEnv error"
            elif reply.kind == "closed" and probe.recoverable:
                outcome["problem"] = "closed the session instead of answering an error frame"
            elif probe.recoverable:
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(json.dumps({"type": "state"}))
                after = await raw_recv(ws, timeout)
                if after.kind != "state":
                    outcome["problem"] = f"the session is unusable after the error ({after.kind})"
    except EnvConnectError as exc:
        outcome["problem"] = f"cannot open a session: {exc}"
    return outcome


async def _http_reset(subject: Subject) -> None:
    task = subject.tasks[0] if subject.tasks else None
    kwargs = subject.reset_kwargs(task) if task else {"seed": 1}
    keys = subject.driver.dialect.reset_keys
    if keys is not None:
        kwargs = {k: v for k, v in kwargs.items() if k in keys}
    await http_call(
        subject.driver, subject.driver.dialect.reset_path, method="POST", json_body=kwargs
    )


async def _probe_http(subject: Subject, name: str, path: str, content: bytes) -> JsonObject:
    reply = await http_call(subject.driver, path, method="POST", content=content)
    outcome: JsonObject = {"probe": name, **reply.evidence()}
    if reply.status is None:
        outcome["problem"] = f"no answer: {reply.error}"
    elif reply.status >= 500:
        outcome["problem"] = f"answered HTTP {reply.status} (a crash) instead of a 4xx error"
    elif reply.status < 400:
        outcome["problem"] = f"accepted with HTTP {reply.status}"
    return outcome


def reset_takes_body(wire: Wire, dialect: HttpDialect) -> bool:
    """Whether the reset route reads a body: not when ``/openapi.json`` says it takes none."""
    spec = wire.openapi_reply.json if wire.openapi_reply is not None else None
    if not isinstance(spec, dict) or not isinstance(spec.get("paths"), dict):
        return True
    operation = (spec["paths"].get(dialect.reset_path) or {}).get("post")
    if not isinstance(operation, dict):
        return True
    return bool(operation.get("requestBody")) or bool(request_schema(spec, dialect.reset_path))


#: The runtime checks malformed input waits for: they find the most common defects in a few
#: episodes, and a slow env's budget must reach them (a server the probes crash is relaunched).
MALFORMED_AFTER = ("runtime.http_episode", "runtime.termination", "runtime.step_after_done")


@check("protocol.malformed_input", level="protocol", needs=("episode",), uses=MALFORMED_AFTER)
async def check_malformed_input(subject: Subject) -> Finding:
    """Malformed frames (bad JSON, unknown type, invalid action...) get errors; the server lives."""
    outcomes: list[JsonObject] = []
    if subject.driver.transport == "ws":
        probes = [
            Probe("bad_json", "{not json", True),
            Probe("unknown_type", json.dumps({"type": "__taskhub_unknown__"}), True),
            Probe("missing_data", json.dumps({"type": "step"}), True),
        ]
        bad_action = invalid_action(subject.driver.action_schema)
        if bad_action is not None:
            probes.append(
                Probe("invalid_action", json.dumps({"type": "step", "data": bad_action}), True)
            )
        probes += [
            Probe("non_object", "[1, 2, 3]", False),
            Probe("binary", b"\x00\xff\x00taskhub", False),
        ]
        for index, probe in enumerate(probes):
            outcomes.append(await _probe_ws(subject, probe))
            alive, why = await _alive(subject, reset=index == len(probes) - 1)
            if not alive:
                outcomes[-1]["problem"] = f"the server died on it: {why}"
                break
    else:
        dialect = subject.driver.dialect
        schema = subject.driver.action_schema
        bad_action = invalid_action(schema) or {"__taskhub_invalid__": {}}
        body = {"action": bad_action} if dialect.wrap_action else bad_action
        http_probes = [
            ("bad_json", dialect.step_path, b"{not json"),
            ("invalid_action", dialect.step_path, json.dumps(body).encode()),
        ]
        if dialect.reset_keys != () and reset_takes_body(await subject.get(WIRE), dialect):
            # a reset route that takes no body may ignore whatever is sent
            http_probes.append(("non_object", dialect.reset_path, b"[1, 2, 3]"))
        # an empty body is no action at all: a bare step route that plays it (every field
        # optional) grades nothing as if it were a move
        http_probes.insert(2, ("empty_body", dialect.step_path, b"{}"))
        if dialect.wrap_action and (schema or {}).get("required"):
            empty = json.dumps({"action": {}}).encode()
            http_probes.insert(3, ("missing_fields", dialect.step_path, empty))
        live = False  # a live episode, so that only the body is at fault
        for index, (name, path, content) in enumerate(http_probes):
            if name != "non_object" and not live:
                await _http_reset(subject)
                live = True
            outcomes.append(await _probe_http(subject, name, path, content))
            # a refused body leaves the episode as it was; an accepted one may have ended it
            live = live and "problem" not in outcomes[-1]
            alive, why = await _alive(subject, reset=index == len(http_probes) - 1)
            if not alive:
                outcomes[-1]["problem"] = f"the server died on it: {why}"
                break
    problems = [o for o in outcomes if "problem" in o]
    measured: JsonObject = {
        "probes": len(outcomes),
        "mishandled": len(problems),
        "transport": subject.driver.transport,
    }
    if problems:
        first = problems[0]
        return failed(
            f"{len(problems)} malformed input(s) mishandled; {first['probe']}: {first['problem']}",
            subject.driver.in_transport(
                "Validate every frame: answer bad input with an error frame (INVALID_JSON, "
                "UNKNOWN_TYPE, VALIDATION_ERROR), keep the session usable, and never let an "
                "exception escape the handler.",
                "Validate every request body: answer bad input with HTTP 4xx (400 for bad "
                "JSON, 422 for an invalid action), keep the episode in play, and never let an "
                "exception escape the handler.",
            ),
            measured=measured,
            evidence=outcomes,
        )
    return passed(
        f"{len(outcomes)} malformed inputs answered with errors; the server survived",
        measured=measured,
        evidence=outcomes,
    )


@check("protocol.frame_limit", level="protocol", needs=("episode", "ws"), disrupts=True)
async def check_frame_limit(subject: Subject) -> Finding:
    """An oversized frame is refused (close 1009 or an error frame) and the server survives."""
    size = subject.config.oversize_frame_bytes
    field = subject.text_field() or "answer"
    head = json.dumps({"type": "step", "data": {field: ""}})[:-3]
    frame = head + "x" * max(size - len(head) - 3, 0) + '"}}'
    timeout = max(subject.config.op_timeout_s, 10.0)
    task = subject.tasks[0] if subject.tasks else None
    outcome: JsonObject = {"frame_bytes": len(frame)}
    try:
        async with raw_socket(subject) as ws:
            await ws.send(
                json.dumps({"type": "reset", "data": subject.reset_kwargs(task) if task else {}})
            )
            await raw_recv(ws, timeout)
            try:
                async with asyncio.timeout(timeout):
                    await ws.send(frame)
            except (ConnectionClosed, TimeoutError):
                pass
            reply = await raw_recv(ws, timeout)
            outcome.update(reply.evidence())
    except EnvConnectError as exc:
        outcome["reply"] = f"cannot open a session: {exc}"
        reply = RawReply("other")
    alive, why = await _alive(subject)
    outcome["server_alive"] = alive
    if not alive:
        return failed(
            f"the server died on a {len(frame)}-byte frame: {why}",
            "Bound the WebSocket frame size (uvicorn --ws-max-size) so big frames are refused.",
            measured=outcome,
            evidence=[outcome],
        )
    if reply.kind in ("closed", "error"):
        return passed(
            f"a {len(frame)}-byte frame was refused ({reply.kind}); the server survived",
            measured=outcome,
        )
    return failed(
        f"a {len(frame)}-byte frame was answered with {reply.kind}",
        "Refuse frames larger than the env needs (uvicorn --ws-max-size, default 16 MiB): "
        "unbounded frames let one client exhaust the server's memory.",
        measured=outcome,
        evidence=[outcome],
    )
