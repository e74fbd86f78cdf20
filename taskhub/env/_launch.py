"""Resolve an ENV string to running servers: URL, Hub Space, env folder, or built-in env.

Local envs (a folder in OpenEnv layout, or a built-in one) are launched the way OpenEnv runs
them outside Docker, ``python -m uvicorn server.app:app`` from the folder (from the subfolder
its Dockerfile's ``WORKDIR`` copies, when the app is found there), on free loopback ports,
and stopped when the ``EnvHandle`` closes, including on Ctrl-C. On Linux the servers are also
told to die with their parent, so a killed runner leaves no orphan behind. How a folder is
served is worked out here (``server_command``); the process is started by
``taskhub.env._spawn``, with the standard library alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx

from taskhub._errors import (
    EnvCapacityError,
    EnvConnectError,
    EnvError,
    EnvLaunchError,
    EnvProtocolError,
    EnvTimeout,
)
from taskhub._schema import EnvInfo, HttpDialect, ToolSpec
from taskhub.env._apps import find_app, read_manifest
from taskhub.env._client import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_TIMEOUT_S,
    EnvClient,
    Transport,
    split_base_url,
)
from taskhub.env._http import fetch_json, learn_http_dialect
from taskhub.env._spawn import ServerCommand, free_port, spawn_server
from taskhub.env._tools import ToolDiscovery, discover_tools, is_tool_env

if TYPE_CHECKING:
    from taskhub.env._providers import ProvidedServer, ProviderTarget

logger = logging.getLogger(__name__)

#: Seconds a launched server gets to answer ``GET /health``.
DEFAULT_STARTUP_TIMEOUT_S = 90.0

EnvKind = Literal["url", "space", "folder", "builtin"]
_SPACE_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def builtin_envs() -> dict[str, Path]:
    """Return the built-in environments shipped with taskhub, by name."""
    spec = importlib.util.find_spec("taskhub._envs")
    if spec is None or not spec.submodule_search_locations:
        return {}
    root = Path(next(iter(spec.submodule_search_locations)))
    return {p.parent.name: p.parent for p in sorted(root.glob("*/openenv.yaml")) if p.is_file()}


def space_url(space_id: str) -> str:
    """Return the URL a Hub Space ``owner/name`` is served at.

    Lowercased, with every character outside ``[a-z0-9]`` turned into ``-``.
    """
    owner, name = space_id.split("/", 1)
    slug = re.sub(r"[^a-z0-9]", "-", f"{owner}-{name}".lower())
    return f"https://{slug}.hf.space"


@dataclass(frozen=True)
class EnvTarget:
    """An ENV string resolved to what it names, before anything is started."""

    spec: str
    kind: EnvKind
    url: str | None = None
    path: Path | None = None


def resolve_env(spec: str) -> EnvTarget:
    """Decide what ``spec`` names, in this order: URL, folder, built-in name, Space id.

    Raises:
        EnvLaunchError: ``spec`` is none of those (with the closest built-in name).
    """
    text = spec.strip()
    if re.match(r"^(https?|wss?)://", text):
        split_base_url(text)  # validates
        return EnvTarget(text, "url", url=text)
    path = Path(text).expanduser()
    if path.is_dir():
        return EnvTarget(text, "folder", path=path.resolve())
    builtins = builtin_envs()
    if text in builtins:
        return EnvTarget(text, "builtin", path=builtins[text])
    if _SPACE_ID.match(text):
        return EnvTarget(text, "space", url=space_url(text))
    import difflib

    close = difflib.get_close_matches(text, builtins, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise EnvLaunchError(
        f"env {text!r} is not a URL, an existing folder, a built-in env "
        f"({', '.join(builtins) or 'none installed'}) or a Space id (owner/name).{hint}"
    )


_BEYOND_PACKAGE = re.compile(r"^\s*from\s+\.\.", re.MULTILINE)


def as_package(folder: Path, app: str) -> str | None:
    """``app`` as served from the folder's parent, when the env's code imports its package.

    OpenEnv's envs are packages (``chess_env/__init__.py``, ``server/`` inside) whose server
    modules import their models with ``from ..models import ...`` or ``from chess_env.models
    import ...``: their Dockerfiles install the folder as a package. Served as ``server.app``
    from the folder, the first reaches beyond the top-level package and the second finds no
    ``chess_env``. With the folder's parent on ``sys.path``, ``chess_env`` imports in place
    (``<package>.server.app`` is served when the code imports beyond ``server/``).
    """
    name = folder.name
    if not (folder / "__init__.py").is_file() or not name.isidentifier():
        return None
    own = re.compile(rf"^\s*(?:from|import)\s+{name}\b", re.MULTILINE)
    top = folder / app.partition(":")[0].split(".")[0]
    sources = sorted(top.rglob("*.py")) if top.is_dir() else [top.with_suffix(".py")]
    imports_own = False
    for source in sources[:200]:
        try:
            text = source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if _BEYOND_PACKAGE.search(text):
            return f"{name}.{app}"
        imports_own = imports_own or own.search(text) is not None
    return app if imports_own else None


def server_command(folder: Path) -> ServerCommand:
    """How ``folder`` is served: its app (``find_app``), from where, with which paths.

    Raises:
        EnvLaunchError: No app to serve can be found.
    """
    served = find_app(folder)
    packaged = (
        as_package(folder, served.app) if served.workdir == "." and not served.app_dir else None
    )
    if packaged is None:
        return ServerCommand(
            served.app,
            workdir=served.workdir,
            app_dir=served.app_dir,
            pythonpath=served.pythonpath,
            note=served.how,
        )
    note = f"served as {packaged} from the folder's parent: its modules import the package"
    return ServerCommand(
        packaged,
        app_dir="..",  # the folder's parent holds the package
        pythonpath=served.pythonpath,
        note="; ".join(filter(None, [served.how, note])),
    )


@dataclass
class LocalServer:
    """One launched env server process."""

    folder: Path
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    scratch: Path | None = None
    """The temp folder ``launch_server`` made for the log (none given): ``stop`` removes it."""

    @property
    def url(self) -> str:
        """Base URL of the server."""
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 20) -> str:
        """Return the last lines the server printed."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 2.0) -> None:
        """Terminate the server, then kill it if it does not exit in time.

        The temp folder of its log, when ``launch_server`` made one, goes with it.
        """
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def launch_server(
    folder: Path,
    *,
    port: int | None = None,
    max_sessions: int | None = None,
    log_dir: Path | None = None,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
) -> LocalServer:
    """Start the env in ``folder`` with uvicorn on a loopback port (does not wait for it).

    Args:
        folder: An env folder (``find_app`` says which ASGI app it serves).
        port: Port to bind; a free one when None.
        max_sessions: Exported as ``MAX_CONCURRENT_ENVS`` for envs that read it.
        log_dir: Where the server's output goes (a temp dir when None).
        python: Interpreter to run (this one by default).
        env: Variables set for the server on top of this process's environment.

    Raises:
        EnvLaunchError: No app to serve can be found.
    """
    command = server_command(folder)
    port = port or free_port()
    scratch = None if log_dir else Path(tempfile.mkdtemp(prefix="taskhub-env-"))
    log_dir = log_dir or scratch
    assert log_dir is not None
    log_path = log_dir / f"{folder.name}-{port}.log"
    process = spawn_server(
        folder,
        command,
        port=port,
        log_path=log_path,
        max_sessions=max_sessions,
        python=python,
        env=env,
    )
    logger.info("launched %s on port %d (pid %d)", folder.name, port, process.pid)
    return LocalServer(folder, port, process, log_path, scratch)


#: A launched server still working at its startup deadline (its CPU time rising: imports on a
#: loaded machine) waits on, up to this many times the deadline; one that sleeps does not.
STARTUP_GRACE_FACTOR = 3.0
#: Seconds of CPU a server must have used since the last look to count as working.
_WORKING_CPU_S = 0.05


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is ``pid``, read from ``/proc`` (none where there is none)."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    out = []
    for entry in entries:
        try:
            fields = _stat_fields(int(entry))
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(entry))
    return out


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # the command name is in parentheses and may hold spaces: split after the last ')'
    return stat.rsplit(")", 1)[-1].split()


def _cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) of a process and of its live children, or None off Linux."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    for proc in [pid, *child_pids(pid)]:
        try:
            fields = _stat_fields(proc)
        except OSError:
            if proc == pid:
                return None
            continue
        # utime and stime: the 14th and 15th fields of the line
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


class PortTaken(EnvLaunchError):
    """Another process answers on the port a launched server was given (it took the port first).

    A free port is only free until someone binds it: a launch tried again gets another one.
    """


#: Launches of one server tried when another process takes its port first.
PORT_ATTEMPTS = 3


def listens_on(pid: int, port: int) -> bool | None:
    """Whether ``pid`` (or a child of it) holds the socket that listens on loopback ``port``.

    Read from ``/proc``; None where that cannot tell (no ``/proc``, or no listening socket
    on the port is visible there).
    """
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()  # sl local_address rem_address st ... inode
            if len(fields) > 9 and fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for owner in [pid, *child_pids(pid)]:
        try:
            fds = os.listdir(f"/proc/{owner}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{owner}/fd/{fd}") in inodes:
                    return True
    return False


async def wait_healthy(
    http: httpx.AsyncClient,
    base_url: str,
    *,
    timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
    server: LocalServer | None = None,
) -> str:
    """Poll ``GET /health`` until the server is up; return the path that said so.

    ``/health`` answering 200 means up. A ``/health`` that answers 404 means a server that is
    up but has no health route: the wait ends at once, and ``/`` is asked instead (returned
    when it answers below 500).

    A launched ``server`` that is still working when ``timeout`` passes (its CPU time rose
    since the last look: imports on a loaded machine) is given more time, up to
    ``STARTUP_GRACE_FACTOR`` times ``timeout``; one that sleeps or hangs is not.

    An answer on a launched ``server``'s port from a socket the server does not hold is
    another process's (it bound the port first): the wait goes on until the server exits.

    Raises:
        PortTaken: Another process answers on the port, and the launched one exited.
        EnvLaunchError: The launched process exited first.
        EnvTimeout: No healthy answer within ``timeout`` (and the grace, while it worked).
    """
    started = time.monotonic()
    deadline, limit = started + timeout, started + timeout * STARTUP_GRACE_FACTOR
    # the server's CPU time, sampled once a window: "working" is a rise over the last window
    window = max(1.0, timeout / 6)
    samples: list[float | None] = [_cpu_seconds(server.process.pid) if server else None]
    sampled_at = started
    delay = 0.05
    last = "no answer"
    taken = False  # another process answered on the launched server's port
    while True:
        now = time.monotonic()
        if server is not None and now - sampled_at >= window:
            samples = [samples[-1], _cpu_seconds(server.process.pid)]
            sampled_at = now
        if now >= deadline:
            before, latest = samples[0], samples[-1]
            working = (
                len(samples) == 2
                and before is not None
                and latest is not None
                and latest - before >= _WORKING_CPU_S
            )
            if not working or now >= limit:
                break
            deadline = min(limit, now + window)
            logger.info("%s is still starting (its CPU time rises): waiting on", base_url)
        if server is not None and server.process.poll() is not None:
            if taken:
                raise PortTaken(
                    f"env server {server.folder.name} could not bind port {server.port}: "
                    f"{last}. Its output ends with:\n{server.log_tail()}"
                )
            raise EnvLaunchError(
                f"env server {server.folder.name} exited with code {server.process.returncode} "
                f"before becoming healthy. Its output ends with:\n{server.log_tail()}"
            )
        try:
            response = await http.get(base_url + "/health", timeout=5.0)
            if server is not None and listens_on(server.process.pid, server.port) is False:
                taken = True
                last = f"another process answers on port {server.port}"
            elif response.status_code == 200:
                return "/health"
            elif response.status_code == 404:
                root = await http.get(base_url + "/", timeout=5.0)
                logger.info("%s has no /health (404); / answered %d", base_url, root.status_code)
                return "/" if root.status_code < 500 else "/health"
            else:
                last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    tail = f" Its output ends with:\n{server.log_tail()}" if server is not None else ""
    waited = time.monotonic() - started
    within = f"{timeout:g}s" if waited < timeout * 1.5 else f"{waited:.0f}s (it was still working)"
    raise EnvTimeout(
        f"{base_url}/health did not answer 200 within {within} (last: {last}).{tail}",
        env_url=base_url,
    )


async def start_server(
    http: httpx.AsyncClient,
    folder: Path,
    *,
    timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
    on_launch: Callable[[LocalServer], None] | None = None,
    launched: LocalServer | None = None,
    **launch: Any,
) -> tuple[LocalServer, str]:
    """Launch the env in ``folder`` (``launch_server``) and wait until it answers.

    A server whose port another process took first is launched again on a new port, up to
    ``PORT_ATTEMPTS`` times; a server that fails otherwise is stopped.

    Args:
        http: The client that asks for its health.
        folder: The env folder.
        timeout: The startup deadline (``wait_healthy``).
        on_launch: Called with each server launched, before it is healthy.
        launched: A server of ``folder`` launched already: the first one waited for.
        launch: ``launch_server``'s other arguments.

    Returns:
        The healthy server, and the path that said so.
    """
    for attempt in range(1, PORT_ATTEMPTS + 1):
        if launched is not None:
            server, launched = launched, None
        else:
            server = launch_server(folder, **launch)
            if on_launch is not None:
                on_launch(server)
        try:
            return server, await wait_healthy(http, server.url, timeout=timeout, server=server)
        except PortTaken as exc:
            server.stop()
            if attempt == PORT_ATTEMPTS:
                raise
            logger.warning("%s", exc)
        except BaseException:
            server.stop()
            raise
    raise AssertionError("unreachable: the last attempt returns or raises")


#: Seconds the transport probe waits for ``/ws`` to answer its reset frame.
PROBE_RESET_TIMEOUT_S = 5.0
#: A transport probe still running after this many seconds (a remote server, an env whose
#: sessions take time to create) has the run's first sessions opened beside it
#: (``EnvHandle.first_resets``); a faster server gets them as the first episodes start.
SLOW_PROBE_S = 0.05


async def probe_wire(
    http: httpx.AsyncClient,
    base_url: str,
    *,
    timeout: float = 15.0,
    headers: dict[str, str] | None = None,
) -> tuple[Transport, HttpDialect | None]:
    """Find how a server plays episodes: ``/ws``, else HTTP in the dialect it speaks.

    ``/ws`` counts when it answers a reset frame in OpenEnv's protocol (an observation, or an
    error frame with a code); a ``/ws`` that speaks another protocol, closes or stays silent is
    passed over for HTTP. The HTTP dialect (paths, action wrapping, reset keys) is read from
    ``/openapi.json``; a server without one gets OpenEnv's when ``POST /reset`` exists.

    Args:
        http: HTTP client.
        base_url: The server.
        timeout: Deadline of the handshake and of the HTTP reads, seconds.
        headers: WebSocket handshake headers (a private Space's token).

    Returns:
        ``("ws", None)`` or ``("http", dialect)``.

    Raises:
        EnvConnectError: The server has neither (the message says what each answered).
    """
    transport, dialect, session = await _probe(http, base_url, timeout=timeout, headers=headers)
    if session is not None:
        await session.close()
    return transport, dialect


async def _probe(
    http: httpx.AsyncClient,
    base_url: str,
    *,
    timeout: float = 15.0,
    headers: dict[str, str] | None = None,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> tuple[Transport, HttpDialect | None, EnvClient | None]:
    """``probe_wire``, and the WebSocket session it opened.

    The session is given when it answered the probe's reset and is still open; the caller
    closes it, or plays on it.
    """
    client = EnvClient(
        base_url,
        connect_timeout=timeout,
        timeout=PROBE_RESET_TIMEOUT_S,
        headers=headers,
        max_frame_bytes=max_frame_bytes,
    )
    kept: EnvClient | None = None
    ws_problem: str
    try:
        await client.connect()
        await client.reset()
        # the short deadline was the probe's: what runs on the session next gets the usual one
        client.timeout = DEFAULT_TIMEOUT_S
        kept = client
        return "ws", None, client
    except EnvConnectError as exc:
        if exc.code not in ("404", "403", "405"):
            raise
        ws_problem = f"has no WebSocket /ws (HTTP {exc.code})"
    except EnvCapacityError:
        return "ws", None, None
    except EnvProtocolError as exc:
        if exc.code is not None:  # an OpenEnv error frame: the protocol works
            return "ws", None, None
        ws_problem = f"speaks another protocol on /ws ({exc})"
    except EnvError as exc:
        ws_problem = f"/ws did not answer a reset frame ({type(exc).__name__}: {exc})"
    finally:
        if kept is None:
            await client.close()
    http_base = split_base_url(base_url)[0]
    try:
        spec = await fetch_json(http, http_base, "/openapi.json", timeout=timeout)
    except (EnvConnectError, EnvTimeout, EnvProtocolError):
        spec = {}
    learnt = learn_http_dialect(spec)
    if learnt is not None:
        logger.warning("%s %s: playing over HTTP, one episode at a time", base_url, ws_problem)
        return "http", learnt[0], None
    raise EnvConnectError(
        f"{base_url} {ws_problem} and no POST /reset + /step in /openapi.json: it does not "
        "serve the OpenEnv protocol",
        env_url=base_url,
    )


async def probe_transport(
    http: httpx.AsyncClient, base_url: str, *, timeout: float = 15.0
) -> Transport:
    """Return ``ws`` when the server plays over ``/ws``, ``http`` when only over HTTP.

    Raises:
        EnvConnectError: The server has neither.
    """
    transport, _ = await probe_wire(http, base_url, timeout=timeout)
    return transport


@dataclass
class EnvHandle:
    """Running env servers for a run: resolved, launched if local, probed, described.

    Use as an async context manager; local servers stop on exit::

        async with EnvHandle.open("arith", http=http, replicas=2) as env:
            print(env.info.urls)
    """

    target: EnvTarget | ProviderTarget
    http: httpx.AsyncClient
    replicas: int = 1
    max_sessions: int | None = None
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S
    headers: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    servers: list[LocalServer] = field(default_factory=list)
    info: EnvInfo | None = None
    provider: str | None = None
    provider_options: dict[str, Any] = field(default_factory=dict)
    provided: list[ProvidedServer] = field(default_factory=list)
    launched: list[LocalServer] = field(default_factory=list)
    """Servers of a local env launched for this handle already (a Ray node's worker launches
    them before it imports the runner): waited for instead of launching as many; stopped
    with the others."""
    keep_session: bool = False
    """Keep the WebSocket session the transport probe opened (and tool discovery used) for
    ``take_session``; closed at the end of ``start`` otherwise."""
    first_resets: list[dict[str, Any]] = field(default_factory=list)
    """The resets of the run's first episodes (with ``keep_session``). When the transport
    probe takes longer than ``SLOW_PROBE_S`` (sessions are slow to open: a remote server, a
    sandbox per session), a session is opened for each but the first, spread over the
    servers, and sends it, while the probe goes on; the probe's session then sends the
    first. ``take_sessions`` hands them over, each reset's reply unread
    (``EnvClient.send_reset``). A faster server gets its sessions as the first episodes
    start, a few milliseconds apart, which also spreads their first requests."""
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    """Largest frame the kept sessions accept."""
    _session: EnvClient | None = field(default=None, init=False, repr=False)
    _warm: list[EnvClient] = field(default_factory=list, init=False, repr=False)

    @classmethod
    def open(
        cls,
        spec: str,
        *,
        http: httpx.AsyncClient,
        replicas: int = 1,
        max_sessions: int | None = None,
        headers: dict[str, str] | None = None,
        log_dir: Path | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
        provider: str | None = None,
        provider_options: dict[str, Any] | None = None,
        launched: Sequence[LocalServer] = (),
        keep_session: bool = False,
        first_resets: Sequence[dict[str, Any]] = (),
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> EnvHandle:
        """Resolve ``spec``; servers start when the handle is entered.

        With ``provider`` (``uv``, ``docker``, a hosted sandbox: see ``taskhub.env._providers``)
        OpenEnv's provider of that name starts the servers instead of taskhub's launcher.
        ``launched`` are servers of the env launched already (``EnvHandle.launched``).
        ``keep_session`` keeps the session the probe opened for ``take_session``; with
        ``first_resets``, a slow server also gets the first episodes' sessions opened and
        reset beside it, for ``take_sessions``.
        """
        target: EnvTarget | ProviderTarget
        if provider is not None:
            from taskhub.env._providers import provider_target

            target = provider_target(spec, provider)
        else:
            target = resolve_env(spec)
        return cls(
            target,
            http,
            replicas=replicas,
            max_sessions=max_sessions,
            headers=dict(headers or {}),
            log_dir=log_dir,
            startup_timeout=startup_timeout,
            provider=provider,
            provider_options=dict(provider_options or {}),
            launched=list(launched),
            keep_session=keep_session,
            first_resets=list(first_resets) if keep_session else [],
            max_frame_bytes=max_frame_bytes,
        )

    async def __aenter__(self) -> EnvHandle:
        try:
            await self.start()
        except BaseException:
            await self._close_session()
            self.stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close_session()
        self.stop()

    def take_session(self) -> EnvClient | None:
        """The open WebSocket session the probe reset once (on ``info.urls[0]``).

        The caller plays on it and closes it. None when none was kept (no ``keep_session``,
        an HTTP server, a probe that ended in an error frame), or it was taken already.
        """
        session, self._session = self._session, None
        return session

    def take_sessions(self) -> list[EnvClient]:
        """``take_session``'s session (if any), then those opened for ``first_resets``.

        The caller plays on them and closes them. Those opened for ``first_resets`` have
        sent their reset (``reset_ahead``), and then the probe's has too.
        """
        session, warm, self._warm = self.take_session(), self._warm, []
        return [session, *warm] if session is not None else warm

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        warm, self._warm = self._warm, []
        closing = [client.close() for client in warm]
        if session is not None:
            closing.append(session.close())
        if closing:
            await asyncio.shield(asyncio.gather(*closing))

    async def start(self) -> EnvInfo:
        """Launch local servers (if any), wait for health, probe the transport, read metadata."""
        target = self.target
        if self.provider is not None or target.kind not in ("folder", "builtin"):
            for server in self.launched:  # launched for a local env: not this one
                server.stop()
        if self.provider is not None:
            from taskhub.env._providers import start_provided

            app = read_manifest(target.path).get("app") if target.path else None
            self.provided = await start_provided(
                self.provider,
                target.spec,
                folder=target.path,
                app=app if isinstance(app, str) else "server.app:app",
                replicas=self.replicas,
                max_sessions=self.max_sessions,
                options=self.provider_options,
                startup_timeout=self.startup_timeout,
            )
            urls = [s.url for s in self.provided]
        elif target.kind in ("folder", "builtin"):
            assert target.path is not None
            # every server launched, these first: stop() ends them, whatever fails
            launched = self.servers = list(self.launched)
            if target.kind == "builtin" and importlib.util.find_spec("openenv") is None:
                raise EnvLaunchError(
                    f"built-in env {target.spec!r} needs the OpenEnv server library: "
                    "pip install 'taskhub-openenv[envs]'"
                )
            path = target.path.resolve()
            ours = [s for s in self.launched if s.folder.resolve() == path][: self.replicas]
            for server in self.launched:
                if server not in ours:  # another env's, or one too many
                    server.stop()
            early: list[LocalServer | None] = [*ours, *[None] * (self.replicas - len(ours))]
            started = await asyncio.gather(
                *(
                    start_server(
                        self.http,
                        target.path,
                        timeout=self.startup_timeout,
                        on_launch=launched.append,
                        launched=server,
                        max_sessions=self.max_sessions,
                        log_dir=self.log_dir,
                    )
                    for server in early
                )
            )
            self.servers = [server for server, _ in started]
            urls = [s.url for s in self.servers]
        else:
            assert target.url is not None
            urls = [split_base_url(target.url)[0]]
        # independent round trips, at once (the two reads never raise an EnvError)
        reads = asyncio.gather(
            _optional_json(self.http, urls[0], "/metadata"),
            _optional_json(self.http, urls[0], "/schema"),
        )
        warming: asyncio.Task[list[EnvClient]] | None = None

        def open_beside() -> None:  # the probe is slow: sessions are slow to open here
            nonlocal warming
            logger.info(
                "%s: no answer to the probe within %g s; opening %d more sessions beside it",
                urls[0],
                SLOW_PROBE_S,
                len(self.first_resets) - 1,
            )
            warming = asyncio.get_running_loop().create_task(self._open_warm(urls))

        slow = (
            asyncio.get_running_loop().call_later(SLOW_PROBE_S, open_beside)
            if len(self.first_resets) > 1
            else None
        )
        try:
            transport, dialect, self._session = await _probe(
                self.http, urls[0], headers=self.headers, max_frame_bytes=self.max_frame_bytes
            )
        finally:
            if slow is not None:
                slow.cancel()
            metadata, schema = await reads
            if warming is not None:
                self._warm = await warming
        if transport != "ws":
            await self._close_session()
        action_schema = schema.get("action") if isinstance(schema, dict) else None
        action_schema = action_schema if isinstance(action_schema, dict) else None
        tools, discovery = await _tools_of(
            self.http, urls[0], transport, action_schema, self.headers, self._session
        )
        if not self.keep_session:
            await self._close_session()
        elif self._session is not None and warming is not None:
            try:
                await self._session.send_reset(**self.first_resets[0])
            except EnvError:
                await self._session.close()
                self._session = None
        self.info = EnvInfo(
            spec=target.spec,
            kind=target.kind,
            urls=urls,
            transport=transport,
            http_dialect=dialect,
            metadata=metadata if isinstance(metadata, dict) else None,
            action_schema=action_schema,
            path=str(target.path) if target.path else None,
            tools=tools,
            tool_discovery=discovery,
            server_openenv=openenv_version(metadata),
            provider=self.provider,
        )
        return self.info

    async def _open_warm(self, urls: list[str]) -> list[EnvClient]:
        """Open a session for each of ``first_resets`` but the first, and send its reset.

        The first goes to ``urls[1]`` (the probe's is on ``urls[0]``), and so on round them.

        Returns:
            Those that sent it; a session that failed is closed (the pool opens another).
        """
        resets = self.first_resets[1:]
        clients = [
            EnvClient(
                urls[(index + 1) % len(urls)],
                connect_timeout=self.startup_timeout,
                max_frame_bytes=self.max_frame_bytes,
                headers=self.headers,
            )
            for index in range(len(resets))
        ]
        outcomes = await asyncio.gather(
            *(client.send_reset(**reset) for client, reset in zip(clients, resets, strict=True)),
            return_exceptions=True,
        )
        sent = []
        for client, outcome in zip(clients, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                await client.close()
                if not isinstance(outcome, Exception):
                    raise outcome
            else:
                sent.append(client)
        return sent

    def stop(self) -> None:
        """Stop every server this handle launched."""
        for server in self.servers:
            server.stop()
        for provided in self.provided:
            provided.stop()
        self.provided = []


async def _tools_of(
    http: httpx.AsyncClient,
    url: str,
    transport: Transport,
    action_schema: dict[str, Any] | None,
    headers: dict[str, str],
    session: EnvClient | None = None,
) -> tuple[list[ToolSpec] | None, ToolDiscovery | None]:
    """A tool env's tools (None for other envs, and for a tool env that lists none)."""
    if not is_tool_env(action_schema):
        return None, None
    try:
        return await discover_tools(http, url, transport, headers=headers, session=session)
    except EnvError as exc:
        logger.warning("%s: %s; its actions are offered by their schema alone", url, exc)
        return None, None


def openenv_version(metadata: Any) -> str | None:
    """The server's OpenEnv version, when ``/metadata`` gives it (``openenv_version``)."""
    if not isinstance(metadata, dict):
        return None
    for key in ("openenv_version", "openenv", "framework_version"):
        value = metadata.get(key)
        if isinstance(value, str) and 0 < len(value) <= 64:
            return value
        if isinstance(value, dict) and isinstance(value.get("version"), str):
            return str(value["version"])[:64]
    return None


async def _optional_json(http: httpx.AsyncClient, base_url: str, path: str) -> Any:
    try:
        return await fetch_json(http, base_url, path)
    except EnvError as exc:
        logger.info("%s%s unavailable: %s", base_url, path, exc)
        return None
