"""The data that crosses a file or process boundary: tasks, cards, episode records, manifests.

These models are the project's formats. Field order is part of the JSON layout of
``episodes.jsonl`` and ``run.json``; add fields at the end of a model and give them defaults, so
that newer readers keep reading older files. Readers are strict (``extra="forbid"``): a file
written by a newer taskhub with fields this one does not know is refused with an error naming
the field, rather than half-read. Bump ``SCHEMA_VERSION`` for any change that alters the meaning
of an existing field.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SecretStr,
    SerializationInfo,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

from taskhub._limits import loads_bounded
from taskhub._urls import redact_urls_in

#: Version of the episode record and run manifest formats written by this taskhub.
SCHEMA_VERSION = 1
#: What a run id may be: it names a folder (``runs/<run_id>/``), locally and on the Hub.
_RUN_ID = re.compile(r"^[\w.-]{1,200}$")
#: Longest error message kept in a record (characters).
MAX_ERROR_MESSAGE = 4000

#: How an episode ended. ``scored``: it ran and has a reward. ``agent_error``: the model never
#: produced a usable action (its fault; the episode still gets the reward it earned).
#: ``infra_error``: the env or the model endpoint failed (nobody's score). ``reward_error``: the
#: episode ran but a reward could not be computed.
Outcome = Literal["scored", "agent_error", "infra_error", "reward_error"]
OUTCOMES: tuple[Outcome, ...] = ("scored", "agent_error", "infra_error", "reward_error")

RunStatus = Literal["running", "completed", "interrupted", "failed"]

#: How a model is offered the env's actions (``EvalConfig.tool_calling``).
ToolCalling = Literal["auto", "native", "text"]
#: The wire dialect of an OpenEnv server: 0.3 sends no ``metadata`` in observations, 0.4+ does.
WireDialect = Literal["openenv-0.3", "openenv-0.4+"]

JsonObject = dict[str, JsonValue]

_MODEL_CONFIG = ConfigDict(extra="forbid", use_attribute_docstrings=True)


def canonical_json(value: Any) -> str:
    """Serialize ``value`` as canonical JSON: sorted keys, no spaces, UTF-8 kept as is.

    Args:
        value: Any JSON-compatible value.

    Returns:
        The canonical text; equal values give equal text.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _decode_json_object(value: Any, field: str) -> Any:
    """Accept a JSON object given as text (how Hub tables keep heterogeneous kwargs)."""
    if isinstance(value, str):
        try:
            decoded = loads_bounded(value)
        except ValueError as exc:
            raise ValueError(f"{field} is a string that is not JSON: {exc}") from None
        if not isinstance(decoded, dict):
            raise ValueError(f"{field} must be a JSON object, got {type(decoded).__name__}")
        return decoded
    return value


def _check_finite(value: Any, path: str) -> None:
    """Reject NaN and infinities, which JSON cannot carry."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path} is {value!r}, which is not valid JSON")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_finite(item, f"{path}[{index}]")


#: Task fields written by ``taskhub taskset profile``: measurements, not part of the task.
MEASURED_FIELDS = frozenset({"pass_rate", "difficulty", "profile"})


class Task(BaseModel):
    """One row of a taskset: everything needed to run one episode.

    Example row (JSON Lines):
    ``{"task_id": "add-3-17", "reset": {"seed": 17, "family": "add", "difficulty": 3},
    "answer": "1042"}``
    """

    model_config = _MODEL_CONFIG

    task_id: Annotated[str, Field(min_length=1, max_length=512)]
    """Unique id of the task within its taskset."""
    reset: JsonObject = Field(default_factory=dict)
    """Keyword arguments sent to the env's ``reset()`` (seed, task_spec, split/index, or the
    env's own parameters). A JSON string holding an object is accepted too."""
    prompt: str | None = None
    """Optional instruction shown to the model before the first observation."""
    answer: JsonValue = None
    """Optional reference answer. Never shown to the model; used by rewards and the oracle."""
    rewards: list[str] | None = None
    """Reward specs for this row, replacing the taskset's default (e.g. ``["exact"]``)."""
    max_steps: Annotated[int, Field(ge=1)] | None = None
    """Step limit for this task, overriding the card's."""
    oracle_actions: list[JsonObject] | None = None
    """A known-correct action sequence, for ``scripted/oracle`` and validation."""
    metadata: JsonObject = Field(default_factory=dict)
    """Free-form information (difficulty, family, source...). Not sent to the env."""
    pass_rate: Annotated[float, Field(ge=0, le=1)] | None = None
    """Measured by ``taskhub taskset profile``: the mean pass rate over the profiled models."""
    difficulty: Annotated[float, Field(ge=0, le=1)] | None = None
    """Measured by ``taskhub taskset profile``: ``1 - pass_rate``, for sampling by difficulty."""
    profile: JsonObject | None = None
    """The statistics behind them, per model: ``pass_rate``, ``mean_reward``, ``episodes``."""

    @field_validator("reset", "metadata", mode="before")
    @classmethod
    def _objects_may_be_json_text(cls, value: Any, info: Any) -> Any:
        return _decode_json_object(value, info.field_name)

    @field_validator("profile", mode="before")
    @classmethod
    def _profile_may_be_json_text(cls, value: Any, info: Any) -> Any:
        return None if value is None else _decode_json_object(value, info.field_name)

    @field_validator("rewards", mode="before")
    @classmethod
    def _single_spec_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("answer", "oracle_actions", mode="before")
    @classmethod
    def _arrays_may_be_json_text(cls, value: Any, info: Any) -> Any:
        # Hub tables store nested values as JSON text; an answer that is a plain string is kept.
        if info.field_name == "oracle_actions" and isinstance(value, str):
            decoded = json.loads(value)
            if not isinstance(decoded, list):
                raise ValueError("oracle_actions must be a list of action objects")
            return decoded
        return value

    @model_validator(mode="after")
    def _json_numbers_are_finite(self) -> Task:
        _check_finite(self.reset, "reset")
        _check_finite(self.answer, "answer")
        _check_finite(self.metadata, "metadata")
        _check_finite(self.profile, "profile")
        return self

    def content_hash(self) -> str:
        """Return the sha256 of the row's canonical JSON (fields left at defaults omitted).

        Omitting defaults keeps hashes stable when later versions add optional fields. The
        measured fields (``pass_rate``, ``difficulty``, ``profile``) are left out: measuring a
        task does not change it, so its results still match it once profiled.
        """
        row = self.model_dump(mode="json", exclude_defaults=True, exclude=set(MEASURED_FIELDS))
        return hashlib.sha256(canonical_json(row).encode()).hexdigest()

    def to_row(self) -> dict[str, Any]:
        """Return the row as it is stored in a taskset file (defaults omitted)."""
        return self.model_dump(mode="json", exclude_defaults=True)


class TasksetCard(BaseModel):
    """The ``taskhub:`` block of a taskset's README.md YAML header.

    It binds the taskset to an environment and sets the defaults every row inherits.
    """

    model_config = _MODEL_CONFIG

    name: str | None = None
    """Short name of the taskset (defaults to the folder or repo name)."""
    description: str | None = None
    """One paragraph saying what the tasks measure."""
    env: str | None = None
    """The environment the tasks run on: a built-in name, a URL, a Space id or a folder."""
    system_prompt: str | None = None
    """System message for LLM agents (jinja2; sees ``action_schema``)."""
    prompt_template: str | None = None
    """Jinja2 template of the first user message (sees ``task``, ``observation``, ``prompt``,
    ``action_schema``). Rendered in a sandbox."""
    step_template: str | None = None
    """Jinja2 template of each later user message (sees ``observation``, ``reward``, ``step``)."""
    rewards: list[str] = Field(default_factory=lambda: ["env"])
    """Default reward specs of every row (``env`` is the env's own reward, summed)."""
    max_steps: Annotated[int, Field(ge=1)] | None = None
    """Default step limit of an episode."""
    success_threshold: float = 1.0
    """An episode succeeds when its total reward reaches this value (used by pass@k)."""
    default_split: str | None = None
    """Split evaluated when none is asked for (defaults to ``test``, else the first split)."""

    @field_validator("rewards", mode="before")
    @classmethod
    def _single_spec_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class TasksetRef(BaseModel):
    """Where a taskset came from, exactly enough to load the same rows again."""

    model_config = _MODEL_CONFIG

    source: str
    """The taskset as the user named it (path, ``org/name@rev``, built-in name)."""
    kind: Literal["builtin", "local", "file", "hub", "env"]
    """Built-in taskset, local folder, single data file, Hub dataset repo, or the tasks an env
    serves over OpenEnv's Task API (``source`` is its URL)."""
    name: str
    """The taskset's name (card ``name``, else folder, file or repo name)."""
    repo_id: str | None = None
    """Hub dataset repo id, for ``kind="hub"``."""
    revision: str | None = None
    """The revision asked for (branch, tag or sha), for ``kind="hub"``."""
    commit_sha: str | None = None
    """The resolved commit sha of a Hub taskset. Every result records it."""
    fingerprint: str
    """sha256 over the task hashes of every split, in order: identifies the rows' content."""
    path: str | None = None
    """Local path the rows were read from (a snapshot folder for Hub tasksets)."""


class PluginSpec(BaseModel):
    """A plugin as it was created: its registered name and the arguments it was given."""

    model_config = _MODEL_CONFIG

    kind: Literal["reward", "validator", "model"]
    """Which registry the plugin came from."""
    name: str
    """Registered name (``package/name`` for third-party plugins)."""
    args: JsonObject = Field(default_factory=dict)
    """Arguments passed to the plugin's factory."""
    version: str | None = None
    """Version of the library doing the work, when the plugin wraps one."""


class ErrorInfo(BaseModel):
    """An error kept in a record instead of being raised."""

    model_config = _MODEL_CONFIG

    type: str
    """Exception class name (``EnvTimeout``, ``AgentFormatError``...)."""
    message: str
    """The exception's message."""
    boundary: str
    """Where it happened: ``env``, ``model``, ``agent``, ``reward``, ``runner``..."""
    code: str | None = None
    """OpenEnv error code from an error frame, or HTTP status, when there was one."""

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """Build the record of ``exc``, reading taskhub's context attributes when present."""
        code = getattr(exc, "code", None)
        message = redact_urls_in(str(exc) or repr(exc))
        if len(message) > MAX_ERROR_MESSAGE:  # an error can quote a huge reply or frame
            message = message[:MAX_ERROR_MESSAGE] + f"... [{len(message)} characters, cut]"
        return cls(
            type=type(exc).__name__,
            message=message,
            boundary=getattr(exc, "boundary", "runner"),
            code=None if code is None else str(code),
        )


def _unset(value: Any) -> bool:
    return value is None


class ToolSpec(BaseModel):
    """A tool an environment serves (MCP ``tools/list``), or a function a model is offered."""

    model_config = _MODEL_CONFIG

    name: str
    """The tool's name, as ``call_tool`` takes it."""
    description: str = ""
    """What the tool does, for the model."""
    input_schema: JsonObject = Field(default_factory=dict)
    """JSON schema of the tool's arguments (an object schema)."""


class ToolCall(BaseModel):
    """A call a model asked for: a function and its arguments (OpenAI ``tool_calls``)."""

    model_config = _MODEL_CONFIG

    name: str
    """The function called."""
    arguments: JsonObject = Field(default_factory=dict)
    """Its arguments."""
    id: str | None = Field(default=None, exclude_if=_unset)
    """The model's id of the call, which the tool's reply names (native tool calling)."""
    arguments_text: str | None = Field(default=None, exclude_if=_unset)
    """The arguments as the model wrote them, when they are not a JSON object."""


class ChatMessage(BaseModel):
    """One chat message, in the OpenAI/Hugging Face chat format."""

    model_config = _MODEL_CONFIG

    role: Literal["system", "user", "assistant", "tool"]
    """Who speaks (``tool``: the result of a tool call, sent back to the model)."""
    content: str
    """What is said."""
    tool_calls: list[ToolCall] | None = Field(default=None, exclude_if=_unset)
    """The tool calls of an assistant message (native tool calling), in order."""
    tool_call_id: str | None = Field(default=None, exclude_if=_unset)
    """The call a ``tool`` message answers."""


_USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "calls", "cache_hits", "cache_misses")


class Usage(BaseModel):
    """Token usage summed over the model calls of an episode."""

    model_config = _MODEL_CONFIG

    prompt_tokens: int = 0
    """Tokens sent to the model."""
    completion_tokens: int = 0
    """Tokens the model generated."""
    calls: int = 0
    """Number of model calls."""
    cache_hits: int = 0
    """Calls answered from the model-call cache (``--cache``), counted in ``calls``."""
    cache_misses: int = 0
    """Calls the cache did not hold: sent to the model and stored, counted in ``calls``."""

    def add(self, other: Usage) -> None:
        """Add ``other``'s counts to this one."""
        # once per model call: the counts are summed in the instance's dict, as pydantic's own
        # assignment (no validation on assignment) would store them, at a fraction of its cost
        mine, theirs = self.__dict__, other.__dict__
        for name in _USAGE_COUNTS:
            mine[name] += theirs[name]

    def counts(self) -> tuple[int, int, int, int, int]:
        """The counts, in field order (what ``restore`` takes back)."""
        d = self.__dict__
        return (
            d["prompt_tokens"],
            d["completion_tokens"],
            d["calls"],
            d["cache_hits"],
            d["cache_misses"],
        )

    def restore(self, counts: tuple[int, int, int, int, int]) -> None:
        """Set the counts ``counts()`` gave."""
        self.__dict__.update(zip(_USAGE_COUNTS, counts, strict=True))

    @classmethod
    def one_call(cls) -> Usage:
        """The usage of one call that counted no tokens (a scripted policy's)."""
        return trusted(
            cls, prompt_tokens=0, completion_tokens=0, calls=1, cache_hits=0, cache_misses=0
        )

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class StepRecord(BaseModel):
    """One ``step()`` of an episode: what the agent did and what the env answered."""

    model_config = _MODEL_CONFIG

    index: int
    """0-based step number."""
    action: JsonObject
    """The action sent (the ``data`` of the step frame)."""
    observation: JsonObject
    """The observation the env returned."""
    reward: float | None
    """The step's reward (booleans and integers are stored as floats)."""
    done: bool
    """Whether the env ended the episode with this step."""
    metadata: JsonObject | None = None
    """``data.metadata`` of the reply (OpenEnv 0.4+ servers only)."""
    reply: str | None = None
    """The model's raw reply that produced the action."""
    latency_s: float = 0.0
    """Seconds between sending the step and receiving its observation."""
    model_latency_s: float = 0.0
    """Seconds the model took to produce the reply (including format retries), not counting
    ``queue_time_s``."""
    format_errors: list[str] = Field(default_factory=list)
    """Messages of replies rejected before this action was accepted."""
    queue_time_s: float = 0.0
    """Seconds the step's model calls waited for the model before it worked on them (a local
    model serves one call at a time): queueing behind other episodes, not the model's time."""
    tool_call: ToolCall | None = Field(default=None, exclude_if=_unset)
    """The tool this step called and its arguments (tool envs, and native tool calling)."""
    tool_result: str | None = Field(default=None, exclude_if=_unset)
    """What the tool returned, as the text the model was shown (tool envs)."""
    tool_error: str | None = Field(default=None, exclude_if=_unset)
    """Why the call failed (``error_type: message``), when the env says it did (tool envs)."""


class RewardComponent(BaseModel):
    """One named part of an episode's reward."""

    model_config = _MODEL_CONFIG

    name: str
    """The reward spec that produced it (``env``, ``exact``, ``judge:openai/gpt-4o-mini``...)."""
    value: float | None
    """Its value, or None when it could not be computed (see ``error``)."""
    weight: float = 1.0
    """Weight in the total."""
    gate: bool = False
    """A gate must pass (value > 0) for the other components to count."""
    error: str | None = None
    """Why the value is missing."""
    details: JsonObject | None = None
    """Reward-specific evidence (judge reply, parsed answer...)."""


class EpisodeRecord(BaseModel):
    """One line of ``episodes.jsonl``: a finished episode, whatever its outcome."""

    model_config = _MODEL_CONFIG

    schema_version: int = SCHEMA_VERSION
    """Format version of this record."""
    run_id: str
    """The run the episode belongs to."""
    episode_id: str
    """Episode id sent to the env's ``reset()``; unique within the run."""
    task_id: str
    """The task's id."""
    task_hash: str
    """sha256 of the task row's canonical JSON."""
    split: str
    """The taskset split the task came from."""
    sample: int
    """Sample index of this task (0..samples-1), for pass@k."""
    seed: int | None
    """The seed sent to ``reset()`` (None when the row pins none and the run sets none)."""
    outcome: Outcome
    """How the episode ended."""
    reward: float | None
    """Total reward (weighted components), None when the episode has no score."""
    success: bool | None
    """Whether ``reward`` reached the taskset's success threshold."""
    reward_components: list[RewardComponent] = Field(default_factory=list)
    """Every reward component, beside the total."""
    env_reward: float | None = None
    """Sum of the env's step rewards."""
    error: ErrorInfo | None = None
    """The error that ended the episode (or the last one retried away), if any."""
    attempts: int = 1
    """How many times the episode was started (infra errors are retried)."""
    terminated: bool = False
    """The env said ``done``."""
    truncated: bool = False
    """The episode hit its step limit before ``done``."""
    num_steps: int = 0
    """Number of steps taken."""
    reset_payload: JsonObject = Field(default_factory=dict)
    """The ``data`` of the reset frame actually sent (task kwargs, seed, episode_id)."""
    initial_observation: JsonObject | None = None
    """Observation returned by ``reset()``."""
    reset_metadata: JsonObject | None = None
    """``data.metadata`` of the reset reply, when the server sent one."""
    steps: list[StepRecord] = Field(default_factory=list)
    """Every step, in order."""
    messages: list[ChatMessage] = Field(default_factory=list)
    """The chat transcript the model saw and wrote."""
    usage: Usage = Field(default_factory=Usage)
    """Token usage over the episode."""
    started_at: datetime
    """When the (last) attempt started (UTC)."""
    duration_s: float
    """Wall-clock seconds of the last attempt."""
    env_time_s: float = 0.0
    """Seconds spent waiting for the env."""
    model_time_s: float = 0.0
    """Seconds the model worked on the episode's calls (``queue_time_s`` not included)."""
    task: Task
    """The task row, so that a run directory can be re-scored and browsed on its own. Its
    measured columns (``pass_rate``, ``difficulty``, ``profile``) are not written: they describe
    earlier runs, not this episode."""
    queue_time_s: float = 0.0
    """Seconds the episode's model calls waited for the model before it worked on them (a local
    model serves one call at a time, so concurrent episodes queue for it)."""

    @field_serializer("task")
    def _task_without_measurements(self, task: Task, info: SerializationInfo) -> dict[str, Any]:
        return task.model_dump(mode=info.mode, exclude=set(MEASURED_FIELDS))

    def key(self) -> tuple[str, int]:
        """Identity of the episode within its run: ``(task_id, sample)``."""
        return (self.task_id, self.sample)


class SamplingParams(BaseModel):
    """Sampling parameters passed through to the model."""

    model_config = _MODEL_CONFIG

    temperature: Annotated[float, Field(ge=0)] = 0.0
    """Sampling temperature; 0 is greedy."""
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    """Nucleus sampling mass."""
    max_tokens: Annotated[int, Field(ge=1)] = 256
    """Most tokens generated per reply."""
    seed: int | None = None
    """Sampling seed (per episode, derived from the run seed when None)."""
    stop: list[str] | None = None
    """Stop sequences."""


class EvalConfig(BaseModel):
    """Everything that defines an evaluation run. Stored in ``run.json``."""

    model_config = _MODEL_CONFIG

    model: str
    """Model string ``provider/model``: ``openai/NAME``, ``local/NAME``, ``scripted/oracle``..."""
    taskset: str
    """Taskset: built-in name, folder, ``.jsonl``/``.parquet`` file, or ``org/name[@rev]``."""
    env: str | None = None
    """Environment: URL, Space id, folder or built-in name; None uses the taskset card's."""
    base_url: str | None = None
    """Base URL of an OpenAI-compatible endpoint (``.../v1``)."""
    api_key: SecretStr | None = Field(default=None, exclude=True)
    """API key of the model endpoint. Never written anywhere."""
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    """Sampling parameters."""
    split: str | None = None
    """Split to evaluate (default: the card's ``default_split``, else ``test``)."""
    limit: Annotated[int, Field(ge=1)] | None = None
    """Evaluate only the first N tasks of the split (before sharding: the shards of a limited
    run split those N tasks between them)."""
    shard: tuple[int, int] | None = None
    """``(i, n)``: evaluate every n-th task starting at i (0-based), of the tasks the limit
    kept."""
    samples: Annotated[int, Field(ge=1)] = 1
    """Episodes per task (for pass@k)."""
    seed: int = 0
    """Run seed: derives each episode's env seed (when the row sets none) and model seed."""
    concurrency: Annotated[int, Field(ge=1)] = 4
    """Episodes in flight at once."""
    replicas: Annotated[int, Field(ge=1)] = 1
    """Processes to launch for a local env (folder or built-in)."""
    max_sessions_per_env: Annotated[int, Field(ge=1)] | None = None
    """Sessions per env server; None: as many as the server accepts (learnt from
    ``CAPACITY_REACHED``)."""
    max_steps: Annotated[int, Field(ge=1)] | None = None
    """Step limit, overriding the card's and the rows'."""
    rewards: list[str] | None = None
    """Reward specs, overriding the card's and the rows'."""
    success_threshold: float | None = None
    """Success threshold, overriding the card's."""
    step_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    """Deadline of one env request."""
    episode_timeout_s: Annotated[float, Field(gt=0)] = 900.0
    """Deadline of a whole episode attempt."""
    model_timeout_s: Annotated[float, Field(gt=0)] = 120.0
    """Hard deadline of one model call, retries included."""
    max_retries: Annotated[int, Field(ge=0)] = 2
    """Extra attempts of an episode after an infra error."""
    format_retries: Annotated[int, Field(ge=0)] = 1
    """Times an unparseable reply is shown back to the model before it is an agent error."""
    fail_fast: bool = False
    """Stop the run at the first episode that is not scored."""
    max_frame_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    """Largest frame accepted from an env."""
    env_provider: str | None = None
    """OpenEnv provider that starts the env (``uv``, ``docker``, ``hf-sandbox``, ``modal``,
    ``daytona``, ``novita``, ``aca``) instead of taskhub's own launcher; None: launch local envs
    with uvicorn in this Python, reach URLs and Spaces as they are."""
    env_provider_options: JsonObject = Field(default_factory=dict)
    """Keyword arguments of the provider's constructor (never credentials: they are written to
    ``run.json``; each provider's SDK reads its own from the environment)."""
    revision: str | None = None
    """Branch, tag or commit of a Hub taskset (the pin to read; overrides an ``@rev`` of
    ``taskset``)."""
    cache: str | None = None
    """Folder of the model-call cache (``taskhub.models.CachedModel``); None: no cache."""
    fresh_session: bool = False
    """Open a new env session for every episode, instead of resetting an idle open session of
    the server again (WebSocket servers serve many episodes per session)."""
    trust_remote_code: bool = False
    """Let the taskset's rows and card run code (``python:`` rewards, an env folder); refused
    otherwise. Specs given here (``rewards``, ``env``) are the user's own either way."""
    tool_calling: ToolCalling = "auto"
    """How the model is offered the env's actions: ``native`` passes them as function tools
    (OpenAI ``tools``) and reads ``tool_calls``; ``text`` asks for JSON in the reply; ``auto``
    is native where the backend supports it, falling back to text where the server refuses
    tools."""

    @field_validator("shard")
    @classmethod
    def _shard_in_range(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None:
            index, count = value
            if count < 1 or not 0 <= index < count:
                raise ValueError(f"shard {index}/{count} is not i/n with 0 <= i < n")
        return value


class HttpDialect(BaseModel):
    """How an HTTP-only server wants its requests, and how it shapes its replies.

    OpenEnv's own HTTP routes are the defaults; hand-rolled servers differ in the paths, in
    whether the action is wrapped in ``{"action": ...}``, and in whether the observation is
    nested under ``observation`` or is the reply itself (replies are read either way).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    reset_path: str = "/reset"
    """Path of the reset route (``POST``)."""
    step_path: str = "/step"
    """Path of the step route (``POST``)."""
    state_path: str | None = "/state"
    """Path of the state route (``GET``), or None when the server has none."""
    health_path: str | None = "/health"
    """Path that answers 200 while the server is up, or None when none does."""
    wrap_action: bool = True
    """Send ``{"action": action}`` (OpenEnv's body) rather than the bare action."""
    observation_key: str | None = "observation"
    """Key of the observation in replies; None when the observation is the reply itself."""
    reset_keys: tuple[str, ...] | None = None
    """The reset kwargs the route accepts (others are dropped, as OpenEnv's server drops
    what ``reset()`` does not take); None when it accepts any."""
    session_keys: tuple[str, ...] = ()
    """Fields the step body requires that the reset reply hands out (a ``game_id``, a
    ``session_id``): each step sends back the value its episode's reset returned."""


class EnvInfo(BaseModel):
    """The environment a run talked to."""

    model_config = _MODEL_CONFIG

    spec: str
    """The env as the user named it."""
    kind: Literal["url", "space", "folder", "builtin", "image", "git"]
    """How the spec was resolved (``image`` and ``git``: sources an env provider starts)."""
    urls: list[str]
    """Base URLs of the servers used (one per replica)."""
    transport: Literal["ws", "http"] = "ws"
    """WebSocket sessions, or the HTTP fallback for servers without ``/ws``."""
    http_dialect: HttpDialect | None = None
    """Routes and body shapes of the HTTP fallback (transport ``http``); OpenEnv's when None."""
    metadata: JsonObject | None = None
    """What ``GET /metadata`` returned."""
    action_schema: JsonObject | None = None
    """The action JSON schema from ``GET /schema``."""
    path: str | None = None
    """Folder launched, for local envs."""
    tools: list[ToolSpec] | None = Field(default=None, exclude_if=_unset)
    """The tools a tool env (MCP) listed; None for other envs."""
    tool_discovery: Literal["list_tools", "mcp"] | None = Field(default=None, exclude_if=_unset)
    """How the tools were listed: a ``list_tools`` step on a session, or ``POST /mcp``."""
    dialect: WireDialect | None = Field(default=None, exclude_if=_unset)
    """The wire dialect the server spoke: ``openenv-0.3`` (no ``metadata`` in observations)
    or ``openenv-0.4+``."""
    server_openenv: str | None = Field(default=None, exclude_if=_unset)
    """The server's OpenEnv version, when ``/metadata`` gives it."""
    provider: str | None = None
    """The OpenEnv provider that started the servers (``uv``, ``docker``, ``modal``...); None
    when taskhub launched them itself or reached them at their URL."""


class ModelInfo(BaseModel):
    """The model a run used."""

    model_config = _MODEL_CONFIG

    spec: str
    """The model string as given."""
    provider: str
    """The backend (``openai``, ``local``, ``scripted``...)."""
    name: str
    """The model name within the provider."""
    base_url: str | None = None
    """Endpoint, for remote backends."""
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    """Sampling parameters."""
    details: JsonObject = Field(default_factory=dict)
    """Backend-specific provenance (weights file and its sha256, library versions...)."""
    tool_calling: Literal["native", "text"] | None = Field(default=None, exclude_if=_unset)
    """How the model acted: function tools (``native``) or JSON in its replies (``text``);
    ``text`` after a fallback from native (``details.tool_calling_fallback`` says why)."""


class ExecutorInfo(BaseModel):
    """Where a run's episodes were played (it changes no record)."""

    model_config = _MODEL_CONFIG

    kind: Literal["local", "ray"] = "local"
    """``local``: in the process that wrote the run; ``ray``: on a Ray cluster's nodes."""
    address: str | None = None
    """The Ray cluster's address, None when a local Ray instance was started for the run."""
    nodes: int = 1
    """Workers that played episodes (one per node)."""
    version: str | None = None
    """Version of Ray."""


#: Sampling parameters that shape the scores (the per-episode seed is derived, not chosen).
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "stop")


class RewardInfo(BaseModel):
    """One reward spec of a run: how it weighs in the total and what produced it."""

    model_config = _MODEL_CONFIG

    spec: str
    """The spec as written (``fuzzy=0.5``, ``answer_present=gate``)."""
    name: str
    """The registered reward it names."""
    args: JsonObject = Field(default_factory=dict)
    """Arguments of the reward's factory."""
    version: str | None = None
    """Version of the library behind it."""
    weight: float = 1.0
    """Weight in the total."""
    gate: bool = False
    """Whether it gates the total instead of adding to it."""
    range: tuple[float, float] | None = None
    """The values the reward declares it returns (plugin metadata), if it declares any."""


class Comparability(BaseModel):
    """The configuration that two runs must share for their scores to be pooled or compared."""

    model_config = _MODEL_CONFIG

    taskset: str
    """``commit:<sha>`` of a Hub taskset, else ``content:<fingerprint>`` of its rows."""
    split: str
    """The split evaluated."""
    rewards: list[RewardInfo] = Field(default_factory=list)
    """Every reward spec the run applied (sorted by spec)."""
    success_threshold: float | None = None
    """Reward at which an episode counted as a success."""
    env: str | None = None
    """The env's name (``/metadata`` name, else as given); None for a run without an env."""
    env_version: str | None = None
    """The version the env's ``/metadata`` reported."""
    max_steps: int | None = None
    """The run's step limit override (the rows' and card's limits belong to the taskset)."""
    format_retries: int = 1
    """Times an unparseable reply was shown back to the model."""
    sampling: JsonObject = Field(default_factory=dict)
    """Temperature, top_p, max_tokens and stop of the model."""
    reward_range: tuple[float, float] | None = None
    """The range of the total reward, from the components' declared ranges and weights."""

    def _identity(self, *, sampling: bool) -> str:
        data = self.model_dump(mode="json", exclude={"reward_range"})
        for reward in data["rewards"]:
            reward.pop("range")  # plugin metadata, not configuration
        if not sampling:
            data.pop("sampling")
            data.pop("format_retries")
        return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:16]

    @property
    def fingerprint(self) -> str:
        """16 hex digits identifying the whole configuration (sampling included)."""
        return self._identity(sampling=True)

    @property
    def scoring_fingerprint(self) -> str:
        """16 hex digits identifying what was measured and how it was scored (not sampling)."""
        return self._identity(sampling=False)

    @property
    def reward_label(self) -> str:
        """The reward specs, comma-separated (``exact, fuzzy=0.5``)."""
        return ", ".join(r.spec for r in self.rewards) or "-"

    @property
    def range_label(self) -> str:
        """``[low, high]`` of the total, or ``unbounded``."""
        if self.reward_range is None:
            return "unbounded"
        return f"[{self.reward_range[0]:g}, {self.reward_range[1]:g}]"


class RunManifest(BaseModel):
    """``run.json``: the configuration and provenance of a run."""

    model_config = _MODEL_CONFIG

    schema_version: int = SCHEMA_VERSION
    """Format version."""
    run_id: str
    """Unique id of the run."""
    taskhub_version: str
    """Version of taskhub that made the run."""
    status: RunStatus
    """``running`` while episodes are being written; ``completed`` when all are done."""
    created_at: datetime
    """When the run started (UTC)."""
    updated_at: datetime
    """When the manifest was last written (UTC)."""
    finished_at: datetime | None = None
    """When the run completed."""
    config: EvalConfig
    """The full configuration."""
    taskset: TasksetRef
    """The taskset, pinned."""
    split: str
    """The split evaluated."""
    env: EnvInfo | None = None
    """The environment (a re-scored run keeps its source run's)."""
    model: ModelInfo
    """The model."""
    rewards: list[PluginSpec] = Field(default_factory=list)
    """Reward plugins used, with their arguments and library versions."""
    n_planned: int = 0
    """Episodes the run will write when complete."""
    libraries: dict[str, str] = Field(default_factory=dict)
    """Versions of the libraries involved."""
    host: dict[str, str] = Field(default_factory=dict)
    """Python version and platform."""
    argv: list[str] | None = None
    """The command line, when started from the CLI."""
    sessions: list[datetime] = Field(default_factory=list)
    """Start time of each session that wrote episodes (more than one after ``--resume``)."""
    parent_run: str | None = None
    """Run this one was derived from (``taskhub rescore``)."""
    success_threshold: float | None = None
    """The success threshold the run applied (the flag's, else the taskset card's)."""
    merged_from: list[str] = Field(default_factory=list)
    """Run ids of the shard runs this run was merged from (``taskhub results merge``)."""
    executor: ExecutorInfo | None = None
    """Where the episodes of the latest session were played (None in files of older taskhub)."""
    comparability: Comparability | None = None
    """What the run's scores can be pooled and compared with (``taskhub.comparability``); runs
    written before this field have it recomputed from the fields above."""

    @field_validator("run_id")
    @classmethod
    def _usable_run_id(cls, value: str) -> str:
        if not _RUN_ID.match(value) or value in (".", ".."):
            raise ValueError(
                f"run id {value!r} cannot name a folder: use letters, digits, '.', '_' or '-', "
                "and not '.' or '..'"
            )
        return value


#: Result of one validation check (RFC 008 vocabulary).
CheckStatus = Literal["pass", "fail", "skip", "error"]
#: What a failed check means for the verdict, per the severity policy.
Severity = Literal["fail", "warn", "advisory"]
#: The verdict of a validation: exit code 0 for pass and warn, 1 fail, 2 unsupported, 3 error.
Verdict = Literal["pass", "warn", "fail", "unsupported", "error"]
CheckLevel = Literal["static", "protocol", "runtime", "taskset", "semantic", "statistical"]
#: Who runs a check (RFC 008): ``local`` checks an author can run and fix, ``hub`` checks only
#: an operator runs (the statistical level, cross-host and publishing checks).
Lane = Literal["local", "hub"]
#: Version of RFC 008's report layout whose fields a ValidationReport carries.
RFC008_REPORT_VERSION = "2"


class CheckResult(BaseModel):
    """The outcome of one environment check."""

    model_config = _MODEL_CONFIG

    id: str
    """Stable check id, RFC 008's where one exists (``runtime.seed_control``)."""
    level: CheckLevel
    """Which level of validation the check belongs to."""
    status: CheckStatus
    """``pass``, ``fail``, ``skip`` (not applicable or not asked for) or ``error`` (the check
    itself could not run)."""
    severity: Severity
    """What a failure of this check weighs, from the severity policy."""
    summary: str
    """One sentence saying what was found."""
    measured: JsonObject = Field(default_factory=dict)
    """Measured values (latencies, counts, rates...)."""
    evidence: list[JsonValue] = Field(default_factory=list)
    """Raw frames, file excerpts or observations that prove the finding."""
    remediation: str | None = None
    """What the env author should do, when the check did not pass."""
    duration_s: float = 0.0
    """Seconds the check took."""

    @model_validator(mode="before")
    @classmethod
    def _read_check_id(cls, data: Any) -> Any:
        """Accept RFC 008's ``check_id`` (written beside ``id`` by newer reports)."""
        if isinstance(data, dict) and "check_id" in data:
            data = dict(data)
            check_id = data.pop("check_id")
            if data.setdefault("id", check_id) != check_id:
                raise ValueError(f"check_id {check_id!r} differs from id {data['id']!r}")
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def check_id(self) -> str:
        """RFC 008's name of ``id``, written for OpenEnv's tooling."""
        return self.id


class ValidationReport(BaseModel):
    """The report card of one environment: every check, and the verdict the policy gives."""

    model_config = _MODEL_CONFIG

    schema_version: int = SCHEMA_VERSION
    """Format version."""
    target: str
    """The env as given: a folder, a URL, or a git URL at a commit."""
    target_kind: Literal["folder", "url", "git", "builtin"]
    """What the target is."""
    name: str
    """Name of the submission (the env's name when no batch name was given)."""
    env_metadata: JsonObject | None = None
    """What ``GET /metadata`` returned."""
    taskset: TasksetRef | None = None
    """The taskset the taskset, semantic and statistical checks used."""
    model: str | None = None
    """The model of the statistical checks."""
    policy: dict[str, str] = Field(default_factory=dict)
    """Name and version of the severity policy that gave the verdict."""
    verdict: Verdict
    """The outcome."""
    exit_code: int
    """0 pass or warn, 1 fail, 2 unsupported target, 3 internal error."""
    checks: list[CheckResult] = Field(default_factory=list)
    """Every check, in the order it ran."""
    started_at: datetime
    """When validation started (UTC)."""
    duration_s: float
    """Wall-clock seconds."""
    taskhub_version: str
    """Version of taskhub that validated."""
    error: ErrorInfo | None = None
    """The internal error, for verdict ``error``."""
    source_digest: str | None = None
    """sha256 over the env folder's files (paths and contents), when there is a folder."""
    report_schema_version: str = RFC008_REPORT_VERSION
    """Version of RFC 008's report layout whose fields this report carries (``policy_version``,
    ``lane``, ``verdict`` and each check's ``check_id``, ``status``, ``measured``, ``evidence``,
    ``remediation``)."""
    policy_version: str = ""
    """RFC 008's name for the policy that gave the verdict: ``name-version`` (``taskhub-v2``).
    Reports written before the field existed get it from ``policy``."""
    lane: Lane = "local"
    """RFC 008's lane: ``hub`` when the statistical level ran (a model was given), which only
    an operator runs; else ``local``."""

    @model_validator(mode="before")
    @classmethod
    def _fill_rfc008_fields(cls, data: Any) -> Any:
        """Derive the RFC 008 fields a report written before they existed lacks."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        policy = data.get("policy")
        if not data.get("policy_version") and isinstance(policy, dict) and policy.get("name"):
            data["policy_version"] = f"{policy['name']}-{policy.get('version', '')}".rstrip("-")
        if "lane" not in data:
            data["lane"] = "hub" if data.get("model") else "local"
        return data


_M = TypeVar("_M", bound=BaseModel)
_FIELD_NAMES: dict[type[BaseModel], tuple[str, ...]] = {}


def trusted(model: type[_M], **values: Any) -> _M:
    """Build ``model`` from values already of its field types, without validating them.

    For the records of the hot path, whose values come typed out of ``json.loads`` and the
    loop's own code: validating them again, or pydantic's ``model_construct`` (which looks up
    aliases and default factories field by field), costs more than the episode's own work.
    Every field must be given (in any order: the record keeps the model's field order, which
    is the order of its JSON).

    Raises:
        TypeError: A field is missing, or a value names no field.
    """
    names = _FIELD_NAMES.get(model)
    if names is None:
        names = _FIELD_NAMES[model] = tuple(model.model_fields)
    try:
        ordered = {name: values[name] for name in names}
    except KeyError as exc:
        raise TypeError(f"{model.__name__}: no value for field {exc}") from None
    if len(ordered) != len(values):
        raise TypeError(f"{model.__name__}: no such fields {sorted(set(values) - set(ordered))}")
    instance = model.__new__(model)
    object.__setattr__(instance, "__dict__", ordered)
    object.__setattr__(instance, "__pydantic_fields_set__", set(ordered))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance
