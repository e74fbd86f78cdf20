"""Adapters for user code: ``python:MODULE:FN``, ``trl:MODULE:FN``, ``openenv:MODULE:RUBRIC``.

MODULE is imported from the Python path, so a reward the training code already has is used as it
is. The current directory is not on that path (a taskset folder may ship a module of the same
name): put your own folder there with ``PYTHONPATH``. A spec from a taskset's rows or card is
refused unless the user trusts its code (``--trust-remote-code``, see ``taskhub._trust``):

- ``python:pkg.mod:fn``, per episode; each parameter is filled by name (``PYTHON_ARGUMENTS``):
  ``def score(completion, answer): return float(completion.strip() == answer)``.
- ``trl:pkg.mod:fn``, TRL's reward-function convention: called per batch with keyword
  arguments ``prompts`` and ``completions`` (conversational: lists of ``{"role", "content"}``
  messages) and the dataset columns (``task_id``, ``answer``, ``solution`` (the answer again,
  as TRL's ``accuracy_reward`` reads it) and every ``metadata`` key), returning one
  ``float | None`` per completion, None meaning "does not apply". Episodes scored together
  (re-scoring, concurrent episodes) are batched.
- ``openenv:pkg.mod:Rubric``, an OpenEnv rubric class (built with no arguments, once per
  episode) replayed over the stored steps: ``rubric(action, observation)`` per step, the values
  summed like the env's own rewards. Actions and observations are dicts that also allow
  attribute access (``observation.done``, ``observation.metadata``).

A sync function runs in a thread (one call at a time per adapter), an async one in the loop.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.metadata
import inspect
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taskhub import ConfigError, EpisodeRecord, RewardError, RewardFn, Score, reward

from ._answer import final_answer, final_reply, task_prompt
from ._batch import MicroBatcher


def load_target(target: str, kind: str) -> Any:
    """Import ``MODULE:ATTR`` (ATTR may be dotted) for the ``kind:`` adapter.

    Raises:
        ConfigError: The target is malformed, its module cannot be imported, or it lacks ATTR.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"{kind}:{target}: expected {kind}:MODULE:NAME, e.g. {kind}:my_rewards:score"
        )
    try:
        module = _import(module_name)
    except Exception as exc:
        raise ConfigError(
            f"{kind}:{target}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{kind}:{target}: module {module_name!r} has no {attr!r}") from None
    return obj


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name.split(".")[0]:
            raise
        raise ModuleNotFoundError(
            f"{exc}; the current directory is not on the Python path: add the module's folder "
            "to PYTHONPATH",
            name=exc.name,
        ) from None


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())  # scans every installed package


def distribution_version(target: str) -> str | None:
    """Return ``"<distribution> <version>"`` of the installed package a target was imported from.

    None when its module is not a file an installed distribution lists (a source checkout, an
    editable install), whatever distribution claims the same top-level name.
    """
    module = sys.modules.get(target.partition(":")[0])
    path = getattr(module, "__file__", None)
    if module is None or not path:
        return None
    here = Path(path).resolve()
    top = module.__name__.split(".")[0]
    for name in _packages_distributions().get(top) or []:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in dist.files or []:
            if file.suffix == ".py" and Path(str(dist.locate_file(file))).resolve() == here:
                return f"{name} {dist.version}"
    return None


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004  (an object with an async __call__)
    )


def _signature(fn: Any, label: str) -> inspect.Signature:
    if isinstance(fn, type) or not callable(fn):
        raise ConfigError(f"{label}: {fn!r} is not a function")
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{label}: cannot read the signature of {fn!r}: {exc}") from None


class _Caller:
    """Calls user code: async functions in the loop, sync ones in a thread, one at a time."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.is_async = _is_async(fn)
        self._lock = threading.Lock()

    def _call_locked(self, kwargs: dict[str, Any]) -> Any:
        with self._lock:
            return self.fn(**kwargs)

    async def __call__(self, kwargs: dict[str, Any]) -> Any:
        if self.is_async:
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(self._call_locked, kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


# --- python: ------------------------------------------------------------------------------------


def _messages(episode: EpisodeRecord) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in episode.messages]


#: The arguments a ``python:`` reward may take, by name.
PYTHON_ARGUMENTS: dict[str, Callable[[EpisodeRecord], Any]] = {
    "episode": lambda e: e,
    "task": lambda e: e.task,
    "task_id": lambda e: e.task_id,
    "prompt": task_prompt,
    "answer": lambda e: e.task.answer,
    "reference": lambda e: e.task.answer,
    "metadata": lambda e: e.task.metadata,
    "reset": lambda e: e.task.reset,
    "completion": final_answer,
    "reply": final_reply,
    "messages": _messages,
    "steps": lambda e: e.steps,
    "actions": lambda e: [s.action for s in e.steps],
    "observations": lambda e: [s.observation for s in e.steps],
    "initial_observation": lambda e: e.initial_observation,
    "final_observation": lambda e: e.steps[-1].observation if e.steps else e.initial_observation,
    "step_rewards": lambda e: [s.reward for s in e.steps],
    "env_reward": lambda e: e.env_reward,
    "num_steps": lambda e: e.num_steps,
    "terminated": lambda e: e.terminated,
    "truncated": lambda e: e.truncated,
    "outcome": lambda e: e.outcome,
}


@reward("python", spec_arg="target", imports_code=True)
def python_reward(*, target: str) -> RewardFn:
    """Your function per episode: python:MODULE:FN, its arguments filled by name (completion...)."""
    label = f"python:{target}"
    fn = load_target(target, "python")
    names: list[str] = []
    for param in _signature(fn, label).parameters.values():
        if param.kind is param.VAR_KEYWORD:
            names = list(PYTHON_ARGUMENTS)
            break
        if param.kind is param.VAR_POSITIONAL:
            continue
        if param.name in PYTHON_ARGUMENTS and param.kind is not param.POSITIONAL_ONLY:
            names.append(param.name)
        elif param.default is param.empty:
            raise ConfigError(
                f"{label}: taskhub cannot fill parameter {param.name!r} (arguments are passed by "
                f"name, from: {', '.join(PYTHON_ARGUMENTS)})"
            )
    return PythonReward(_Caller(fn), names, distribution_version(target))


class PythonReward:
    """The ``python:`` reward: calls the function with the arguments it names."""

    def __init__(self, caller: _Caller, names: list[str], plugin_version: str | None) -> None:
        """Wrap ``caller``, which receives ``names`` (keys of ``PYTHON_ARGUMENTS``)."""
        self.caller = caller
        self.names = names
        self.plugin_version = plugin_version

    async def __call__(self, episode: EpisodeRecord) -> Any:
        """Score one episode."""
        return await self.caller({name: PYTHON_ARGUMENTS[name](episode) for name in self.names})


# --- trl: ---------------------------------------------------------------------------------------

_TRL_RESERVED = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra")


def trl_sample(episode: EpisodeRecord) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Split an episode's chat into TRL's conversational prompt and completion.

    The prompt is every message before the first assistant reply; the completion is the rest
    (one assistant message for a single-step episode).
    """
    messages = _messages(episode)
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None:
        answer = final_answer(episode) or ""
        return messages, [{"role": "assistant", "content": answer}]
    return messages[:first], messages[first:]


def trl_columns(episodes: list[EpisodeRecord]) -> dict[str, list[Any]]:
    """The dataset columns of a batch: ``task_id``, ``answer``, ``solution``, metadata keys."""
    columns: dict[str, list[Any]] = {
        "task_id": [e.task_id for e in episodes],
        "answer": [e.task.answer for e in episodes],
        "solution": [e.task.answer for e in episodes],
    }
    keys = sorted({k for e in episodes for k in e.task.metadata})
    for key in keys:
        if key not in columns and key not in _TRL_RESERVED:
            columns[key] = [e.task.metadata.get(key) for e in episodes]
    return columns


class TrlBatch:
    """Collects the episodes scored in the same event-loop turn into one TRL-convention call."""

    def __init__(
        self,
        fn: Callable[..., Any],
        label: str,
        *,
        max_batch: int = 256,
        plugin_version: str | None = None,
    ) -> None:
        """Wrap ``fn`` (checked: it must take ``completions``, by name or ``**kwargs``)."""
        self.plugin_version = plugin_version
        params = _signature(fn, label).parameters.values()
        self.takes_all = any(p.kind is p.VAR_KEYWORD for p in params)
        self.names = {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        required_positional = [
            p.name for p in params if p.kind is p.POSITIONAL_ONLY and p.default is p.empty
        ]
        if required_positional:
            raise ConfigError(
                f"{label}: TRL passes everything by keyword, but {required_positional[0]!r} "
                "is positional-only"
            )
        if "completions" not in self.names and not self.takes_all:
            raise ConfigError(
                f"{label}: a TRL reward function takes completions=... (and **kwargs); "
                f"this one takes ({', '.join(sorted(self.names))})"
            )
        self.required = {
            p.name
            for p in params
            if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        }
        self.label = label
        self.caller = _Caller(fn)
        self._batcher: MicroBatcher[EpisodeRecord, Any] = MicroBatcher(self._call, max_batch)

    async def __call__(self, episode: EpisodeRecord) -> Any:
        """Score one episode as part of the current batch."""
        return await self._batcher(episode)

    async def _call(self, episodes: list[EpisodeRecord]) -> list[Any]:
        samples = [trl_sample(e) for e in episodes]
        kwargs: dict[str, Any] = {
            "prompts": [p for p, _ in samples],
            "completions": [c for _, c in samples],
            **trl_columns(episodes),
        }
        missing = sorted(self.required - set(kwargs))
        if missing:
            raise RewardError(
                f"{self.label} needs the column {missing[0]!r}, which the task rows do not have "
                f"(columns: {', '.join(k for k in kwargs if k not in ('prompts', 'completions'))})"
            )
        if not self.takes_all:
            kwargs = {k: v for k, v in kwargs.items() if k in self.names}
        values = await self.caller(kwargs)
        if not isinstance(values, list | tuple):
            raise RewardError(
                f"{self.label} returned {type(values).__name__}, expected a list of float | None "
                "(one per completion)"
            )
        if len(values) != len(episodes):
            raise RewardError(
                f"{self.label} returned {len(values)} values for {len(episodes)} completions"
            )
        return list(values)


@reward("trl", spec_arg="target", imports_code=True)
def trl_reward(*, target: str) -> RewardFn:
    """A TRL reward function: trl:MODULE:FN, per batch (prompts=, completions=, dataset columns)."""
    return TrlBatch(
        load_target(target, "trl"), f"trl:{target}", plugin_version=distribution_version(target)
    )


# --- openenv: ----------------------------------------------------------------------------------


class AttrDict(dict[str, Any]):
    """A dict whose keys also read as attributes, nested dicts included (``obs.metadata.get``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        if isinstance(value, dict) and not isinstance(value, AttrDict):
            return AttrDict(value)
        return value


def _rubric_factory(obj: Any, label: str) -> Callable[[], Any]:
    try:
        from openenv.core.rubrics import Rubric
    except ImportError:  # the rubric's own module imported; duck-type it
        Rubric = None
    if isinstance(obj, type):
        if Rubric is not None and not issubclass(obj, Rubric):
            raise ConfigError(f"{label}: {obj.__qualname__} is not an OpenEnv Rubric subclass")
        if not callable(getattr(obj, "forward", None)):
            raise ConfigError(f"{label}: {obj.__qualname__} has no forward(action, observation)")
    elif not callable(obj):
        raise ConfigError(f"{label}: expected a Rubric class (or a function returning a rubric)")
    factory: Callable[[], Any] = obj
    try:
        factory()
    except Exception as exc:
        raise ConfigError(
            f"{label}: cannot build the rubric with no arguments: {type(exc).__name__}: {exc}"
        ) from None
    return factory


@reward("openenv", spec_arg="target", imports_code=True)
def openenv_rubric(*, target: str) -> RewardFn:
    """An OpenEnv rubric replayed over the stored steps: openenv:MODULE:RUBRIC, values summed."""
    label = f"openenv:{target}"
    factory = _rubric_factory(load_target(target, "openenv"), label)
    return RubricReplay(factory, label, distribution_version(target))


class RubricReplay:
    """The ``openenv:`` reward: a fresh rubric per episode, called on every stored step."""

    def __init__(self, factory: Callable[[], Any], label: str, plugin_version: str | None) -> None:
        """Replay rubrics made by ``factory``."""
        self.factory = factory
        self.label = label
        self.plugin_version = plugin_version

    async def __call__(self, episode: EpisodeRecord) -> Score:
        """Sum the rubric's values over the episode's steps."""
        rubric = self.factory()  # rubrics keep per-episode state (TrajectoryRubric)
        if callable(getattr(rubric, "reset", None)):
            rubric.reset()
        values: list[float] = []
        for step in episode.steps:
            observation = AttrDict(step.observation)
            observation.setdefault("metadata", step.metadata or {})
            observation["done"] = step.done
            observation["reward"] = step.reward
            value = rubric(AttrDict(step.action), observation)
            if inspect.isawaitable(value):
                value = await value
            if isinstance(value, bool):
                value = float(value)
            if not isinstance(value, int | float):
                raise RewardError(
                    f"{self.label} returned {value!r} at step {step.index}, expected a number"
                )
            values.append(float(value))
        details: dict[str, Any] = {"step_rewards": values}
        return Score(float(sum(values)), details)
