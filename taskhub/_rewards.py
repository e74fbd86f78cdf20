r"""The reward hook: reward specs, the ``RewardFn`` contract, and scoring an episode.

A reward spec is ``NAME[:ARG][=WEIGHT]`` or ``NAME[:ARG]=gate``: ``env``, ``env:final``,
``exact=0.5``, ``regex:^\d+$``, ``judge:openai/gpt-4o-mini=2``, ``answer_present=gate``.
The total is the weighted sum of the non-gate components, or 0 when a gate fails (its value is
not above 0). A component that raises makes the episode a ``reward_error``: never a silent 0.

Rewards are plugins (``@reward``); the core ships only ``env``, the env's own reward. The
sibling package ``taskhub.rewards`` adds the external libraries through the registry.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from taskhub._errors import ConfigError, RewardError, TaskhubError
from taskhub._registry import PluginEntry, registry, reward
from taskhub._schema import EpisodeRecord, JsonObject, PluginSpec, RewardComponent

logger = logging.getLogger(__name__)

_WEIGHT = re.compile(r"^(?P<body>.+?)=(?P<weight>gate|[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)$")
_NAME = re.compile(r"^[A-Za-z_][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class Score:
    """A reward value with evidence (what was compared, the judge's reply...)."""

    value: float | None
    details: JsonObject | None = None


class RewardFn(Protocol):
    """Scores one finished episode.

    Returns a number (bools count as 0/1), a ``Score`` with details, or None when the reward
    does not apply to this episode (it then does not count in the total). Raise to report a
    failure; the episode becomes a ``reward_error``. A minimal reward::

        from taskhub import EpisodeRecord, reward

        @reward("short_answer")
        def short_answer(*, max_chars: int = 20):
            async def score(episode: EpisodeRecord) -> float:
                answer = str(episode.steps[-1].action.get("answer", "")) if episode.steps else ""
                return float(0 < len(answer) <= max_chars)
            return score
    """

    async def __call__(self, episode: EpisodeRecord) -> float | bool | Score | None:
        """Return the episode's value for this reward."""
        ...


@dataclass(frozen=True)
class RewardSpec:
    """A parsed reward spec."""

    text: str
    name: str
    arg: str | None = None
    weight: float = 1.0
    gate: bool = False

    @classmethod
    def parse(cls, text: str) -> RewardSpec:
        """Parse ``NAME[:ARG][=WEIGHT|=gate]``.

        Raises:
            ConfigError: The spec is empty or its name is not a valid plugin name.
        """
        spec = text.strip()
        weight, gate = 1.0, False
        match = _WEIGHT.match(spec)
        if match and ":" not in match.group("weight"):
            spec = match.group("body")
            if match.group("weight") == "gate":
                gate = True
            else:
                weight = float(match.group("weight"))
        name, sep, arg = spec.partition(":")
        # third-party rewards are "package/name": keep a slash-qualified name whole
        if not _NAME.match(name):
            raise ConfigError(
                f"reward spec {text!r} does not parse: expected NAME[:ARG][=WEIGHT] or "
                "NAME[:ARG]=gate, e.g. 'exact', 'regex:^42$', 'fuzzy=0.5', 'answer_present=gate'"
            )
        if not math.isfinite(weight):
            raise ConfigError(f"reward spec {text!r}: the weight must be a finite number")
        return cls(text=text.strip(), name=name, arg=arg if sep else None, weight=weight, gate=gate)


@dataclass(frozen=True)
class BoundReward:
    """A reward spec with its plugin built."""

    spec: RewardSpec
    fn: RewardFn
    plugin: PluginSpec
    entry: PluginEntry

    @property
    def stateful(self) -> bool:
        """Whether the reward needs the live env (it cannot re-score stored runs)."""
        return bool(self.entry.attrs.get("stateful", False))

    @property
    def range(self) -> tuple[float, float] | None:
        """The values the reward declares it returns (``@reward(..., range=(0, 1))``), if any."""
        declared = self.entry.attrs.get("range")
        return None if declared is None else (float(declared[0]), float(declared[1]))


def build_reward(spec: RewardSpec | str) -> BoundReward:
    """Create the reward plugin a spec names.

    Raises:
        UnknownPluginError: No reward has that name (with a "did you mean").
        ConfigError: The plugin rejects the argument.
    """
    if isinstance(spec, str):
        spec = RewardSpec.parse(spec)
    entry = registry.lookup("reward", spec.name)
    args: dict[str, Any] = {}
    if spec.arg is not None:
        if entry.spec_arg is None:
            raise ConfigError(
                f"reward {spec.name!r} takes no argument, but the spec {spec.text!r} gives "
                f"{spec.arg!r}"
            )
        args[entry.spec_arg] = spec.arg
    try:
        fn, plugin = registry.create("reward", spec.name, **args)
    except TaskhubError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"reward spec {spec.text!r}: {exc}") from None
    return BoundReward(spec, fn, plugin, entry)


class RewardSet:
    """Builds each distinct reward spec once and scores episodes with lists of specs."""

    def __init__(self) -> None:
        """Start with no rewards built."""
        self._built: dict[str, BoundReward] = {}

    def resolve(self, specs: Sequence[str]) -> list[BoundReward]:
        """Return the built rewards for ``specs``, building new ones (errors raised now)."""
        if not specs:
            raise ConfigError("a reward list is empty; use at least 'env'")
        bound = []
        for text in specs:
            key = text.strip()
            if key not in self._built:
                self._built[key] = build_reward(key)
            bound.append(self._built[key])
        return bound

    def plugins(self) -> list[PluginSpec]:
        """Every reward plugin built so far, for the run manifest."""
        seen: dict[str, PluginSpec] = {}
        for bound in self._built.values():
            seen.setdefault(bound.plugin.model_dump_json(), bound.plugin)
        return list(seen.values())


async def score_episode(
    episode: EpisodeRecord, rewards: Sequence[BoundReward], *, timeout_s: float = 300.0
) -> tuple[list[RewardComponent], float | None, str | None]:
    """Compute every reward component of ``episode`` and their total.

    Components run concurrently. A component that raises, times out, or returns something that
    is not a finite number gets its ``error`` set; the total is then None.

    Returns:
        The components, the total (None when a component failed or none applied), and the
        first error message (None when all succeeded).
    """

    async def one(bound: BoundReward) -> RewardComponent:
        spec = bound.spec

        def component(
            value: float | None, *, error: str | None = None, details: JsonObject | None = None
        ) -> RewardComponent:
            return RewardComponent(
                name=spec.text,
                value=value,
                weight=spec.weight,
                gate=spec.gate,
                error=error,
                details=details,
            )

        try:
            async with asyncio.timeout(timeout_s):
                raw = await bound.fn(episode)
        except TimeoutError:
            return component(None, error=f"reward {spec.text!r} timed out after {timeout_s:g}s")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = str(exc) if isinstance(exc, RewardError) else f"{type(exc).__name__}: {exc}"
            return component(
                None,
                error=f"reward {spec.text!r} failed on task {episode.task_id!r}: {message}",
            )
        details = raw.details if isinstance(raw, Score) else None
        value = raw.value if isinstance(raw, Score) else raw
        if value is None:
            return component(None, details=details)
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, int | float) or not math.isfinite(value):
            return component(
                None,
                details=details,
                error=f"reward {spec.text!r} returned {value!r} for task {episode.task_id!r}: "
                "not a finite number",
            )
        declared = bound.range
        if declared is not None and not declared[0] <= value <= declared[1]:
            return component(
                None,
                details=details,
                error=f"reward {spec.text!r} returned {value!r} for task {episode.task_id!r}: "
                f"outside its declared range [{declared[0]:g}, {declared[1]:g}]",
            )
        return component(float(value), details=details)

    if len(rewards) == 1:  # the common case: no task to schedule
        components = [await one(rewards[0])]
    else:
        components = list(await asyncio.gather(*(one(b) for b in rewards)))
    errors = [c.error for c in components if c.error]
    if errors:
        return components, None, errors[0]
    return components, total_reward(components), None


def total_reward(components: Sequence[RewardComponent]) -> float | None:
    """Weighted sum of the non-gate components; 0 when a gate fails; None if none applied."""
    for component in components:
        if component.gate and component.value is not None and component.value <= 0:
            return 0.0
    values = [(c.weight, c.value) for c in components if not c.gate and c.value is not None]
    if not values:
        gates = [c for c in components if c.gate and c.value is not None]
        return 1.0 if gates else None
    return float(sum(w * v for w, v in values))


@reward("env", spec_arg="mode", stateful=True)
def env_reward(*, mode: str = "sum") -> RewardFn:
    """The env's own step rewards: ``env`` (sum), ``env:final`` or ``env:discounted:GAMMA``.

    A step whose reward is null (tool envs often give none until the answer) counts as 0; the
    step record keeps the null, and the component's ``details`` count such steps
    (``null_rewards``), so that a run whose env never rewards anything says so.
    """
    gamma = 1.0
    if mode.startswith("discounted"):
        _, _, text = mode.partition(":")
        try:
            gamma = float(text or "0.99")
        except ValueError:
            raise ConfigError(f"env:discounted:GAMMA needs a number, got {text!r}") from None
        if not 0 < gamma <= 1:
            raise ConfigError(f"discount {gamma} must be in (0, 1]")
    elif mode not in ("sum", "final"):
        raise ConfigError(f"env reward mode {mode!r}: use sum, final or discounted:GAMMA")

    async def score(episode: EpisodeRecord) -> float | Score:
        rewards = [s.reward or 0.0 for s in episode.steps]
        if mode == "final":
            value = rewards[-1] if rewards else 0.0
        else:
            value = float(sum(r * gamma**i for i, r in enumerate(rewards)))
        nulls = sum(1 for s in episode.steps if s.reward is None)
        if nulls:
            return Score(value, {"null_rewards": nulls, "steps": len(episode.steps)})
        return value

    return score
