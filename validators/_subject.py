"""What a check receives: the env's description, the driver that plays it, the run's products.

``EnvDescription`` is what is known about the target without talking to it (folder, manifest,
taskset, the sampled tasks). ``EnvDriver`` (``_driver.py``) talks to the running server and
records every exchange. ``Subject`` joins them with the configuration, the policy, the results
so far, and the ``Product``s several checks share (computed once, on first use).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, cast

from taskhub import CheckResult, Task, Taskset
from taskhub.env import ServedApp, StepResult
from taskhub.models import action_properties, text_field

from ._config import ValidationConfig
from ._driver import ActionPolicy, EnvDriver
from ._json import JsonObject
from ._manifest import Manifest
from ._policy import Policy

TargetKind = Literal["folder", "url", "git", "builtin"]
T = TypeVar("T")


@dataclass
class EnvDescription:
    """What is known about the env without running it: where it is and what it declares."""

    target: str
    """The target as shown in the report (a git source with its resolved commit)."""
    kind: TargetKind
    """How the target was given."""
    folder: Path | None = None
    """The env folder (None for a URL)."""
    manifest: Manifest | None = None
    """The folder's ``openenv.yaml``."""
    taskset: Taskset | None = None
    """The taskset driving the taskset and semantic checks."""
    taskset_source: str | None = None
    """Where the taskset came from."""
    tasks: list[Task] = field(default_factory=list)
    """The sampled rows (seed-only resets when there is no taskset)."""
    served_app: ServedApp | None = None
    """For a folder without openenv.yaml: the app it is served with (``module:attr``), the
    folder it starts in, and where that was found (its Dockerfile's command, a script, a scan
    of its sources)."""

    @property
    def declared_range(self) -> tuple[float, float] | None:
        """The reward range the manifest declares, if it declares one.

        ``validation.reward.range``; in a manifest without that block, the keys used in the
        wild (``reward_range``, ``evaluation.reward_range``).
        """
        if self.manifest is None:
            return None
        if self.manifest.validation is None:
            return self.manifest.wild_reward_range
        return self.manifest.reward_range

    @property
    def declared_sessions(self) -> int | None:
        """Sessions the manifest declares (``variables.MAX_CONCURRENT_ENVS``)."""
        return self.manifest.declared_sessions if self.manifest else None


@dataclass(frozen=True)
class Product(Generic[T]):
    """Something several checks read, computed once per validation on first use.

    Declared at module level next to the code that computes it::

        FLOOR = Product("floor", measure_floor)
        floor = await subject.get(FLOOR)
    """

    name: str
    compute: Callable[[Subject], Awaitable[T]]


@dataclass
class Subject:
    """An env being validated: its description, its driver, and the run's shared results."""

    env: EnvDescription
    driver: EnvDriver
    config: ValidationConfig
    policy: Policy
    results: dict[str, CheckResult] = field(default_factory=dict)
    products: dict[str, Any] = field(default_factory=dict)

    async def get(self, product: Product[T]) -> T:
        """The value of ``product``, computed on the first call."""
        if product.name not in self.products:
            self.products[product.name] = await product.compute(self)
        return cast(T, self.products[product.name])

    def peek(self, product: Product[T]) -> T | None:
        """The value of ``product`` if some check computed it, else None."""
        return cast(T | None, self.products.get(product.name))

    def forget(self, product: Product[Any]) -> None:
        """Drop a product (its inputs changed: it is computed again on the next ``get``)."""
        self.products.pop(product.name, None)

    # --- what the env declares, under the policy -------------------------------------------

    @property
    def root(self) -> Path:
        """The env folder (for checks that declare ``needs=("folder",)``)."""
        if self.env.folder is None:
            raise RuntimeError("this check needs an env folder")
        return self.env.folder

    @property
    def tasks(self) -> list[Task]:
        """The sampled tasks."""
        return self.env.tasks

    @property
    def reward_range(self) -> tuple[float, float]:
        """The declared reward range, else the policy's default ``[0, 1]``."""
        return self.env.declared_range or self.policy.bounds.default_reward_range

    @property
    def oracle_tolerance(self) -> float:
        """Declared oracle tolerance, capped by the policy."""
        declared = self.env.manifest.oracle_tolerance if self.env.manifest else None
        return min(declared or 0.0, self.policy.bounds.max_oracle_tolerance)

    @property
    def floor_margin(self) -> float:
        """Declared floor margin, raised to the policy's minimum."""
        declared = self.env.manifest.floor_margin if self.env.manifest else None
        return max(declared or 0.0, self.policy.bounds.min_floor_margin)

    @property
    def variance_tolerance(self) -> float:
        """Declared variance tolerance, capped by the policy (the policy's bound when none)."""
        bound = self.policy.bounds.max_variance_tolerance
        declared = self.env.manifest.variance_tolerance if self.env.manifest else None
        return bound if declared is None else min(declared, bound)

    def max_steps_for(self, task: Task | None) -> int:
        """Steps allowed in a validation episode (the row's, the card's, else 50)."""
        cap = self.policy.bounds.max_episode_steps
        if task is not None and task.max_steps:
            return min(task.max_steps, cap)
        taskset = self.env.taskset
        if taskset is not None and taskset.card.max_steps:
            return min(taskset.card.max_steps, cap)
        return min(50, cap)

    def passed(self, check_id: str) -> bool:
        """Whether ``check_id`` ran and passed."""
        result = self.results.get(check_id)
        return result is not None and result.status == "pass"

    # --- episodes ------------------------------------------------------------------------

    def reset_kwargs(self, task: Task, *, seed: int | None = None, tag: str = "") -> JsonObject:
        """The reset kwargs of ``task``: its row, a seed and a fresh episode id."""
        kwargs: JsonObject = dict(task.reset)
        if seed is not None:
            kwargs["seed"] = seed
        elif not isinstance(kwargs.get("seed"), int):
            kwargs["seed"] = 1000 + self.tasks.index(task) if task in self.tasks else 1000
        kwargs["episode_id"] = self.driver.episode_id(tag)
        return kwargs

    # --- actions -------------------------------------------------------------------------

    def noop_action(self) -> JsonObject:
        """The emptiest valid action: empty strings, zeros, first enum options.

        When the env refused that one, the first action it accepted (``protocol.WIRE``).
        """
        if self.driver.first_action is not None:
            return dict(self.driver.first_action)
        schema = self.driver.action_schema
        props = action_properties(schema)
        required = set((schema or {}).get("required", []))
        return {name: empty_value(spec) for name, spec in props.items() if name in required}

    def text_field(self) -> str | None:
        """The single free-text field of the action (``answer``...), if there is one."""
        return text_field(self.driver.action_schema)

    def oracle_actions(self, task: Task) -> list[JsonObject] | None:
        """The task's reference solution as actions: its oracle_actions, or its answer."""
        if task.oracle_actions:
            return [dict(a) for a in task.oracle_actions]
        if task.answer is None:
            return None
        if isinstance(task.answer, dict):
            return [dict(task.answer)]
        text = task.answer if isinstance(task.answer, str) else json.dumps(task.answer)
        return [{self.text_field() or "answer": text}]

    def oracle_policy(self, task: Task) -> ActionPolicy | None:
        """A policy that plays the task's reference solution, if the task carries one."""
        actions = self.oracle_actions(task)
        if actions is None:
            return None
        return lambda i, _r: actions[i] if i < len(actions) else None


def empty_value(spec: dict[str, Any]) -> Any:
    """The emptiest value of a JSON schema property."""
    if "enum" in spec and spec["enum"]:
        return spec["enum"][0]
    if "const" in spec:
        return spec["const"]
    kind = spec.get("type")
    empties: dict[str, Any] = {
        "string": "",
        "integer": 0,
        "number": 0.0,
        "boolean": False,
        "array": [],
        "object": {},
    }
    if isinstance(kind, str):
        return empties.get(kind, "")
    return ""


def noop_policy(subject: Subject) -> Callable[[int, StepResult], JsonObject]:
    """Play the emptiest valid action at every step.

    When the env takes one of the choices its observation lists (``legal_moves``), each step
    plays the choice listed in the latest observation.
    """
    action = subject.noop_action()
    hint = subject.driver.choice_hint
    if hint is None:
        return lambda _i, _r: action

    def follow(_index: int, last: StepResult) -> JsonObject:
        choice = hint.pick(last.observation)
        return {**action, hint.field: choice} if choice is not None else action

    return follow
