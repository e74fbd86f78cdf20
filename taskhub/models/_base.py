"""The model backend contract, and turning a MODEL string into a backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from taskhub._errors import ConfigError
from taskhub._registry import registry
from taskhub._schema import (
    ChatMessage,
    JsonObject,
    SamplingParams,
    Task,
    ToolCall,
    ToolCalling,
    ToolSpec,
    Usage,
)


@dataclass(frozen=True)
class TurnContext:
    """What the agent loop knows at a turn, for backends that act without a language model.

    Attributes:
        task: The task being run (its answer included: LLM backends must ignore it).
        observation: The latest observation.
        action_schema: The env's action JSON schema, when the server publishes one.
        step: 0-based step index.
        episode_seed: Seed of this episode, for policies that draw random actions.
        tools: The tools a tool env (MCP) listed; empty for other envs.
    """

    task: Task
    observation: dict[str, Any]
    action_schema: dict[str, Any] | None
    step: int
    episode_seed: int
    tools: tuple[ToolSpec, ...] = ()


@dataclass(frozen=True)
class GenerateRequest:
    """One model call: the conversation so far, how to sample, and the functions offered.

    Attributes:
        messages: The conversation.
        params: Sampling parameters.
        context: What the agent loop knows at this turn.
        tools: Functions offered for native tool calling (OpenAI ``tools``), or None. A
            backend that cannot call them answers in text (the agent parses it).
    """

    messages: list[ChatMessage]
    params: SamplingParams
    context: TurnContext
    tools: tuple[ToolSpec, ...] | None = None


@dataclass
class Generation:
    """A model's reply: text, and the calls it made (native tool calling), in order.

    Attributes:
        text: The reply.
        usage: Tokens and calls it cost.
        finish_reason: Why generation stopped (``stop``, ``length``...), when known; ``cut``
            when taskhub cut an oversize reply (see ``cut_reply``).
        tool_calls: The calls the model made (native tool calling), in order.
        queue_s: Seconds the call waited before the model worked on it (a local model serves
            one call at a time): recorded as queue wait, apart from the model's time.
    """

    text: str
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    queue_s: float = 0.0


def cut_reply(text: str, limit: int) -> str:
    """Cut ``text`` at ``limit`` characters and mark where (a reply must not flood the run)."""
    return text[:limit] + f"\n[reply cut by taskhub at {limit} of {len(text)} characters]"


@dataclass(frozen=True)
class ModelOptions:
    """Options every backend factory receives (each uses those that apply to it).

    Attributes:
        base_url: Endpoint of remote backends.
        api_key: Credential of remote backends (never recorded).
        timeout_s: Hard deadline of one ``generate`` call, retries included.
        max_retries: Retries of transient failures (429, 5xx, timeouts).
        max_reply_chars: Longest reply text kept: a longer one is cut (and marked) there.
        max_response_bytes: Largest HTTP body read from a remote endpoint.
        tool_calling: ``native`` (pass ``GenerateRequest.tools`` to the model), ``text``
            (never), or ``auto`` (native where supported, text where the server refuses tools).
    """

    base_url: str | None = None
    api_key: str | None = None
    timeout_s: float = 120.0
    max_retries: int = 4
    max_reply_chars: int = 1 << 20
    max_response_bytes: int = 32 << 20
    tool_calling: ToolCalling = "auto"


class ModelBackend(Protocol):
    """A model that turns a conversation into a reply.

    A backend that can call functions sets ``tool_calling = "native"`` (an optional attribute;
    ``text`` when absent, and after a fallback): the agent loop then offers the env's actions
    as ``GenerateRequest.tools`` and reads ``Generation.tool_calls``. A backend that acts
    without reading the conversation (a scripted policy) sets ``reads_messages = False`` (also
    optional; True when absent): it is then called with no messages, and the transcript it
    never reads is rendered while the env works.

    A minimal backend, registered for model strings ``echo/NAME``::

        from taskhub import model_backend
        from taskhub.models import Generation, GenerateRequest, ModelOptions

        class Echo:
            details: dict = {}
            async def generate(self, request: GenerateRequest) -> Generation:
                return Generation(text=request.messages[-1].content)
            async def aclose(self) -> None:
                pass

        @model_backend("echo")
        def echo(name: str, options: ModelOptions) -> Echo:
            return Echo()
    """

    #: Provenance recorded in ``run.json`` (weights file and hash, server version...).
    details: JsonObject

    async def generate(self, request: GenerateRequest) -> Generation:
        """Return the model's reply to ``request.messages``.

        Raises:
            ModelError: The model could not answer (after the backend's own retries).
        """
        ...

    async def aclose(self) -> None:
        """Release connections or weights."""
        ...


def known_models() -> list[str]:
    """Model strings the registered backends name (``scripted/oracle``...), for suggestions.

    A backend lists them with ``@model_backend("name", names=(...))``.
    """
    return sorted(
        f"{entry.name}/{name}"
        for entry in registry.entries("model")
        for name in entry.attrs.get("names", ())
    )


def suggest_model(spec: str) -> str:
    """`` Did you mean 'scripted/oracle'?`` for a misspelt model string, else ``""``."""
    import difflib

    known = known_models()
    close = difflib.get_close_matches(spec, known, n=1, cutoff=0.6)
    if not close:  # a bare name: match it against the names without their provider
        by_name = {m.partition("/")[2]: m for m in known}
        names = difflib.get_close_matches(spec.rpartition("/")[2], by_name, n=1, cutoff=0.6)
        close = [by_name[names[0]]] if names else []
    return f" Did you mean {close[0]!r}?" if close else ""


def split_model_spec(spec: str) -> tuple[str, str]:
    """Split ``provider/model`` into its parts.

    Raises:
        ConfigError: ``spec`` has no provider part.
    """
    provider, sep, name = spec.partition("/")
    if not sep or not provider or not name:
        raise ConfigError(
            f"model {spec!r} is not 'provider/model' (e.g. openai/gpt-4o-mini, "
            f"local/smollm2-135m, scripted/oracle).{suggest_model(spec)}"
        )
    return provider, name


def load_model(spec: str, options: ModelOptions | None = None) -> ModelBackend:
    """Create the backend for a MODEL string through the registry.

    Raises:
        UnknownPluginError: No backend is registered for the provider.
        ConfigError: The backend rejects the model name or options.
    """
    provider, name = split_model_spec(spec)
    factory = registry.lookup("model", provider).factory
    backend: ModelBackend = factory(name, options or ModelOptions())
    return backend
