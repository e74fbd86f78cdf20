"""A model-call cache on disk: identical requests are answered from a folder, not the model.

``CachedModel`` wraps any backend. A request's key is the sha256 of everything that could
change the reply: the model string, the endpoint, and every field of the request (the
messages, the sampling parameters with their seed, the tools when the request has them, and
the turn's context), as canonical JSON. A sampled request (temperature above 0) without a seed
is never cached: its reply is meant to differ every time. Entries are JSON files written
atomically, ``DIR/<2 hex>/<key>.json``, so several runs (and processes) can share a folder.

A resumed run with the cache repeats no call: the episode that was cut short asks again, and
is answered from the folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from taskhub._schema import JsonObject, Usage, canonical_json
from taskhub.models._base import GenerateRequest, Generation, ModelBackend

logger = logging.getLogger(__name__)

#: Format of the key and of an entry; bumped when either changes meaning.
CACHE_VERSION = 1


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def request_key(request: GenerateRequest, *, model: str, endpoint: str | None) -> str:
    """The cache key of a request: sha256 over the model, endpoint and every request field.

    Every field of ``GenerateRequest`` is part of it, whatever fields it has (``tools``
    included when present), so a new field can never be silently left out of the key.
    """
    payload = {
        "version": CACHE_VERSION,
        "model": model,
        "endpoint": endpoint,
        "request": _jsonable(request),
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def cacheable(request: GenerateRequest) -> bool:
    """Whether a request may be answered from the cache: greedy, or sampled with a seed."""
    params = request.params
    return params.temperature == 0 or params.seed is not None


@dataclass
class CacheStats:
    """What a ``CachedModel`` did."""

    hits: int = 0
    """Requests answered from the cache."""
    misses: int = 0
    """Requests sent to the model and stored."""
    skipped: int = 0
    """Sampled requests without a seed, sent to the model and not stored."""


class CachedModel:
    """A backend whose replies to identical requests come from a folder.

    Example::

        backend = CachedModel(load_model("openai/m", options), Path(".cache"), model="openai/m")
    """

    def __init__(
        self,
        backend: ModelBackend,
        directory: Path,
        *,
        model: str,
        endpoint: str | None = None,
    ) -> None:
        """Wrap ``backend``, keeping replies under ``directory`` (created when missing).

        Args:
            backend: The model to call on a miss.
            directory: The cache folder.
            model: The model string (part of every key).
            endpoint: The endpoint the model is served at (part of every key).
        """
        self.backend = backend
        self.directory = Path(directory)
        self.model = model
        self.endpoint = endpoint
        self.stats = CacheStats()
        self.details: JsonObject = {**backend.details, "cache": str(self.directory)}

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def _read(self, key: str) -> Generation | None:
        path = self._path(key)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            if entry.get("version") != CACHE_VERSION:
                return None
            reply = dict(entry["generation"])
            usage = Usage.model_validate(reply.pop("usage", {}))
            return Generation(usage=usage, **reply)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("model cache entry %s is unreadable (%s): calling the model", path, exc)
            return None

    def _write(self, key: str, generation: Generation) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"version": CACHE_VERSION, "model": self.model, "generation": _jsonable(generation)}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)

    async def generate(self, request: GenerateRequest) -> Generation:
        """Answer from the cache, else from the model (and store the reply)."""
        if not cacheable(request):
            self.stats.skipped += 1
            return await self.backend.generate(request)
        key = request_key(request, model=self.model, endpoint=self.endpoint)
        cached = self._read(key)
        if cached is not None:
            self.stats.hits += 1
            usage = cached.usage.model_copy(update={"cache_hits": 1, "cache_misses": 0})
            return dataclasses.replace(cached, usage=usage)
        generation = await self.backend.generate(request)
        self._write(key, generation)
        self.stats.misses += 1
        usage = generation.usage.model_copy(update={"cache_misses": 1})
        return dataclasses.replace(generation, usage=usage)

    async def aclose(self) -> None:
        """Close the wrapped backend."""
        await self.backend.aclose()
