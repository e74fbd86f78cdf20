"""OpenEnv's Task API client: an env's own tasks, by split and index.

An env that implements ``TaskProvider`` (OpenEnv 0.10) serves ``GET /list_environments`` (its
name), ``GET /{env}/splits`` and ``POST /{env}/num_tasks``, ``/{env}/task``,
``/{env}/task_range``, ``/{env}/tasks``; a route the env does not implement answers 501. A task
is started with ``reset(split=..., index=...)``, which is how ``env_tasks`` writes its rows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from taskhub._errors import (
    EnvConnectError,
    EnvProtocolError,
    EnvTimeout,
    TaskApiUnsupported,
    TasksetError,
)
from taskhub._schema import Task
from taskhub._tls import default_ssl_context
from taskhub.env._client import DEFAULT_MAX_FRAME_BYTES, _loads, split_base_url

#: Tasks read from one split at most (a bounded copy of a huge or streamed split).
MAX_TASKS = 100_000
#: Tasks asked for per ``task_range`` request.
PAGE = 1000
#: Largest task spec kept in a row's ``metadata`` (bigger ones keep their id only).
MAX_SPEC_BYTES = 16_384
DEFAULT_TASK_API_TIMEOUT_S = 30.0

_T = TypeVar("_T")


@dataclass(frozen=True)
class TaskSplit:
    """One split the env lists."""

    name: str
    type: str | None = None


class TaskApiClient:
    """Reads an env's tasks over OpenEnv's Task API (HTTP).

    Example::

        async with httpx.AsyncClient() as http:
            api = TaskApiClient("http://127.0.0.1:8000", http=http)
            splits = await api.splits()
            first = await api.task(splits[0].name, 0)
    """

    def __init__(
        self,
        base_url: str,
        *,
        http: httpx.AsyncClient,
        env_name: str | None = None,
        timeout: float = DEFAULT_TASK_API_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        """Prepare requests to the server at ``base_url``.

        Args:
            base_url: The env server.
            http: The HTTP client.
            env_name: The env's name in the routes; read from ``/list_environments`` (else
                ``/metadata``) when None.
            timeout: Deadline of each request, seconds.
            max_bytes: Largest reply accepted.
        """
        self.base_url = split_base_url(base_url)[0]
        self._http = http
        self._env_name = env_name
        self.timeout = timeout
        self.max_bytes = max_bytes

    async def _request(self, method: str, path: str, body: Any = None) -> Any:
        url = self.base_url + path
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._http.request(method, url, json=body)
        except TimeoutError:
            raise EnvTimeout(
                f"{method} {url}: no answer within {self.timeout:g}s", env_url=url
            ) from None
        except httpx.HTTPError as exc:
            raise EnvConnectError(f"{method} {url}: {exc}", env_url=url) from None
        if response.status_code in (404, 405, 501):
            raise TaskApiUnsupported(
                f"{method} {url}: HTTP {response.status_code}: the env does not serve OpenEnv's "
                f"Task API here ({response.text[:200]})",
                env_url=url,
                code=str(response.status_code),
            )
        if response.status_code >= 400:
            raise EnvProtocolError(
                f"{method} {url}: HTTP {response.status_code}: {response.text[:300]}",
                env_url=url,
                code=str(response.status_code),
            )
        if len(response.content) > self.max_bytes:
            raise EnvProtocolError(f"{method} {url}: reply larger than {self.max_bytes} bytes")
        try:
            return _loads(response.content)
        except ValueError as exc:
            raise EnvProtocolError(f"{method} {url}: reply is not JSON ({exc})") from None

    async def env_name(self) -> str:
        """The env's name as its Task API routes spell it."""
        if self._env_name is not None:
            return self._env_name
        try:
            names = await self._request("GET", "/list_environments")
        except TaskApiUnsupported:
            names = None
        name: Any = names[0] if isinstance(names, list) and names else None
        if not isinstance(name, str):
            metadata = await self._request("GET", "/metadata")
            name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not re.match(r"^[\w.-]{1,128}$", name):
            raise EnvProtocolError(
                f"{self.base_url}: cannot tell the env's name for the Task API routes "
                f"(/list_environments and /metadata gave {name!r:.100})"
            )
        self._env_name = name
        return name

    async def _route(self, verb: str) -> str:
        return f"/{quote(await self.env_name(), safe='')}/{verb}"

    async def splits(self) -> list[TaskSplit]:
        """The splits the env lists."""
        listed = await self._request("GET", await self._route("splits"))
        if not isinstance(listed, list):
            raise EnvProtocolError(f"{self.base_url}: splits must be a list, got {listed!r:.200}")
        out = []
        for entry in listed:
            if isinstance(entry, str):
                out.append(TaskSplit(entry))
            elif isinstance(entry, dict) and isinstance(entry.get("name"), str):
                kind = entry.get("type")
                out.append(TaskSplit(entry["name"], kind if isinstance(kind, str) else None))
            else:
                raise EnvProtocolError(f"{self.base_url}: a split without a name: {entry!r:.200}")
        return out

    async def num_tasks(self, split: str) -> int:
        """How many tasks ``split`` has."""
        reply = await self._request("POST", await self._route("num_tasks"), {"split": split})
        count = reply.get("num_tasks") if isinstance(reply, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise EnvProtocolError(f"{self.base_url}: num_tasks of {split!r} is {reply!r:.200}")
        return count

    async def task(self, split: str, index: int) -> Any:
        """The task spec at ``index`` of ``split``."""
        body = {"split": split, "index": index}
        reply = await self._request("POST", await self._route("task"), body)
        if not isinstance(reply, dict) or "task" not in reply:
            raise EnvProtocolError(f"{self.base_url}: task reply without a task: {reply!r:.200}")
        return reply["task"]

    async def task_range(self, split: str, start: int | None, stop: int | None) -> list[Any]:
        """The task specs of ``split`` in ``[start, stop)``."""
        body = {"split": split, "start": start, "stop": stop}
        reply = await self._request("POST", await self._route("task_range"), body)
        tasks = reply.get("tasks") if isinstance(reply, dict) else None
        if not isinstance(tasks, list):
            raise EnvProtocolError(f"{self.base_url}: task_range reply is {reply!r:.200}")
        return tasks

    async def all_tasks(self, split: str, *, limit: int = MAX_TASKS) -> list[Any]:
        """Every task spec of ``split`` (at most ``limit``), read in pages."""
        count = min(await self.num_tasks(split), limit)
        specs: list[Any] = []
        while len(specs) < count:
            page = await self.task_range(split, len(specs), min(count, len(specs) + PAGE))
            if not page:
                raise EnvProtocolError(
                    f"{self.base_url}: split {split!r} has {count} tasks but task_range stopped "
                    f"at {len(specs)}"
                )
            specs.extend(page[: count - len(specs)])
        return specs


def _task_id(spec: Any, env: str, split: str, index: int) -> str:
    if isinstance(spec, dict):
        for key in ("task_id", "id"):
            value = spec.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                return str(value)[:512]
    return f"{env}-{split}-{index}"


def _metadata(spec: Any) -> dict[str, Any]:
    text = json.dumps(spec, ensure_ascii=False, default=str)
    if len(text.encode()) > MAX_SPEC_BYTES:
        return {"task_spec_bytes": len(text.encode())}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"task_spec": value}


async def env_tasks_async(
    url: str, *, http: httpx.AsyncClient, limit: int = MAX_TASKS
) -> tuple[str, dict[str, list[Task]]]:
    """An env's own tasks as taskset rows: each resets by ``split`` and ``index``.

    Row ids are the specs' ``task_id`` (or ``id``) when unique, else ``<env>-<split>-<i>``; a
    row's ``metadata`` is its task spec (when it is small).

    Returns:
        The env's name and its rows by split.

    Raises:
        TaskApiUnsupported: The env does not serve the Task API.
        EnvError: The env cannot be reached or answers something else than the Task API.
    """
    api = TaskApiClient(url, http=http)
    name = await api.env_name()
    splits: dict[str, list[Task]] = {}
    seen: set[str] = set()
    for split in await api.splits():
        rows = []
        for index, spec in enumerate(await api.all_tasks(split.name, limit=limit)):
            task_id = _task_id(spec, name, split.name, index)
            if task_id in seen:
                task_id = f"{name}-{split.name}-{index}"
            seen.add(task_id)
            rows.append(
                Task(
                    task_id=task_id,
                    reset={"split": split.name, "index": index},
                    metadata=_metadata(spec),
                )
            )
        splits[split.name] = rows
    return name, splits


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # called from async code (evaluate_async loads its taskset synchronously): another thread
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def env_tasks(url: str, *, limit: int = MAX_TASKS) -> tuple[str, dict[str, list[Task]]]:
    """``env_tasks_async`` for synchronous callers (``load_taskset``, the CLI).

    Raises:
        TasksetError: The env does not serve its tasks (the reason named).
    """

    async def fetch() -> tuple[str, dict[str, list[Task]]]:
        async with httpx.AsyncClient(
            timeout=DEFAULT_TASK_API_TIMEOUT_S, verify=default_ssl_context()
        ) as http:
            return await env_tasks_async(url, http=http, limit=limit)

    try:
        return _run(fetch())
    except TaskApiUnsupported as exc:
        raise TasksetError(
            f"{url} does not serve its tasks over OpenEnv's Task API: {exc}"
        ) from None
    except (EnvProtocolError, EnvConnectError, EnvTimeout) as exc:
        raise TasksetError(f"cannot read the tasks of {url}: {exc}") from None
