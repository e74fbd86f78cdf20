"""Taskset checks: the env honours the taskset's reset parameters and refuses unknown values.

The same row gives the same start; other rows and other parameter values, other starts; a
value no row uses (a misspelt task id) is refused rather than served as a default task.
"""

from __future__ import annotations

from typing import Any

from taskhub import EnvExecutionError, canonical_json

from ._check import Finding, check, failed, passed, skipped
from ._driver import masked, observation_key, stable_state
from ._json import JsonObject
from ._static import reset_parameters
from ._subject import Subject, noop_policy

#: Reset keys every env gets from the validator itself.
PROTOCOL_KEYS = frozenset({"seed", "episode_id"})


# --- taskset.reset_params ----------------------------------------------------------------------


async def _initial(subject: Subject, kwargs: JsonObject) -> tuple[str, str] | str:
    """``(observation key, state key)`` right after reset, or the error text."""
    trajectory = await subject.driver.play(kwargs, lambda i, r: None, max_steps=0, snapshots=True)
    if trajectory.error is not None or trajectory.first is None:
        return f"{type(trajectory.error).__name__}: {trajectory.error}"
    state = stable_state(trajectory.states[0]) if trajectory.states else ""
    return observation_key(trajectory.first.observation), state


@check(
    "taskset.reset_params",
    level="taskset",
    needs=("episode", "taskset"),
    after=("runtime.seed_control",),
)
async def check_reset_params(subject: Subject) -> Finding:
    """The env honours the taskset's reset parameters; no row key is silently dropped.

    The same row gives the same start; other rows and other parameter values, other starts.
    """
    tasks = subject.tasks
    problems: list[str] = []
    evidence: list[Any] = []
    first_kwargs = subject.reset_kwargs(tasks[0])
    once, twice = await _initial(subject, first_kwargs), await _initial(subject, first_kwargs)
    if isinstance(once, str) or isinstance(twice, str):
        return failed(
            f"reset with the row's kwargs failed: {once if isinstance(once, str) else twice}",
            "reset() must accept every key of the taskset's rows.",
            evidence=[{"reset": first_kwargs}],
        )
    if once != twice:
        problems.append(f"the same row ({tasks[0].task_id}) gave two different starts")
        evidence.append({"row": tasks[0].task_id, "first": once[0][:500], "second": twice[0][:500]})
    starts: dict[str, tuple[str, str] | str] = {tasks[0].task_id: once}
    payloads = {tasks[0].task_id: canonical_json(tasks[0].reset)}
    for task in tasks[1:]:
        if canonical_json(task.reset) in payloads.values():
            continue
        payloads[task.task_id] = canonical_json(task.reset)
        starts[task.task_id] = await _initial(subject, subject.reset_kwargs(task))
    distinct = {s for s in starts.values() if not isinstance(s, str)}
    if len(starts) >= 3 and len(distinct) == 1:
        problems.append(f"{len(starts)} different rows all gave the same start")
        evidence.append({"rows": list(starts), "start": once[0][:500]})
    keys = sorted({k for t in tasks for k in t.reset} - PROTOCOL_KEYS)
    effects: dict[str, str] = {}
    for key in keys:
        effects[key] = await _key_effect(subject, key)
    folder = subject.env.folder
    accepted = reset_parameters(folder) if folder is not None else None
    for key, effect in list(effects.items()):
        if effect == "none" and accepted is not None and key in accepted:
            # reset() takes it: confirm over a few steps before calling it dropped
            effects[key] = await _key_effect(subject, key, steps=2)
    dropped = [k for k, effect in effects.items() if effect == "none"]
    if accepted is not None:
        unknown = [k for k in keys if k not in accepted]
        for key in unknown:
            if effects.get(key) == "untested" and key not in dropped:
                dropped.append(key)  # outside the signature, and no row tells otherwise
        evidence.append({"reset_signature": accepted, "keys_outside_it": unknown})
    if dropped:
        problems.append(
            f"reset ignores the row key(s) {', '.join(sorted(dropped))}: changing "
            "them changes neither the observation nor the state"
        )
    measured: JsonObject = {
        "rows": len(starts),
        "distinct_starts": len(distinct),
        "key_effects": dict(effects),
        "dropped_keys": sorted(dropped),
        "reset_signature": accepted,
    }
    if problems:
        return failed(
            "; ".join(problems),
            "Accept every key the taskset sends in reset() (or take **kwargs / task_spec) "
            "and build the episode from it: OpenEnv silently drops keys reset() does not "
            "declare.",
            measured=measured,
            evidence=evidence[:5],
        )
    return passed(
        f"{len(starts)} rows gave {len(distinct)} distinct starts; every key "
        f"({', '.join(keys) or 'none'}) changes the start",
        measured=measured,
    )


async def _key_effect(subject: Subject, key: str, *, steps: int = 0) -> str:
    """Whether substituting another row's value for ``key`` changes the start.

    ``changes``, ``none`` when it never does, ``untested`` when no two rows differ in it.
    With ``steps``, the do-nothing episodes of that many steps are compared as well (a key
    may shape the episode without showing in its first observation).
    """
    tried = 0
    for task_a in subject.tasks:
        for task_b in subject.tasks:
            if tried >= 2:
                return "none"
            if task_a.reset.get(key) == task_b.reset.get(key) or key not in task_b.reset:
                continue
            tried += 1
            base = subject.reset_kwargs(task_a, tag="param")
            variant = dict(base)
            variant[key] = task_b.reset[key]
            variant["episode_id"] = base["episode_id"]
            if steps:
                policy = noop_policy(subject)
                played = [
                    await subject.driver.play(kwargs, policy, max_steps=steps, snapshots=True)
                    for kwargs in (base, variant)
                ]
                if played[0].signature() != played[1].signature():
                    return "changes"
                continue
            start_a, start_variant = await _initial(subject, base), await _initial(subject, variant)
            if isinstance(start_variant, str) or start_a != start_variant:
                return "changes"
    return "none" if tried else "untested"


# --- taskset.unknown_values_refused ------------------------------------------------------------

#: A string reset key is categorical (a task id, family, level...) when the taskset uses at most
#: this many of its values, each on average in two rows or more.
CATEGORICAL_MAX_VALUES = 20
#: Categorical keys probed with a value no row uses.
UNKNOWN_PROBES = 3


def categorical_keys(subject: Subject) -> dict[str, list[str]]:
    """Reset keys whose values are a small set of strings in the taskset, with those values."""
    taskset = subject.env.taskset
    if taskset is None:
        return {}
    rows = taskset.tasks(subject.config.split or taskset.default_split())
    values: dict[str, set[str]] = {}
    mixed: set[str] = set()
    for task in rows:
        for key, value in task.reset.items():
            if key in PROTOCOL_KEYS:
                continue
            if isinstance(value, str):
                values.setdefault(key, set()).add(value)
            else:
                mixed.add(key)
    return {
        key: sorted(found)
        for key, found in sorted(values.items())
        if key not in mixed and len(found) <= CATEGORICAL_MAX_VALUES and len(rows) >= 2 * len(found)
    }


@check(
    "taskset.unknown_values_refused",
    level="taskset",
    needs=("episode", "taskset"),
    after=("taskset.reset_params",),
)
async def check_unknown_values_refused(subject: Subject) -> Finding:
    """A reset with a task value no row uses (a misspelt task id) is refused, not served.

    An env that falls back to a default task on an unknown id runs the wrong task without a
    word: a typo in a taskset then evaluates something else. The probe replaces one
    categorical string key of a row (a small set of values across the taskset) at a time.
    """
    keys = categorical_keys(subject)
    if not keys:
        return skipped("the taskset has no categorical string reset key (task id, family...)")
    served: list[Any] = []
    broke: list[Any] = []
    probes: dict[str, str] = {}
    for key in list(keys)[:UNKNOWN_PROBES]:
        task = next((t for t in subject.tasks if key in t.reset), None)
        if task is None:
            continue
        kwargs = subject.reset_kwargs(task, tag="unknown")
        kwargs[key] = f"taskhub-no-such-{key}"
        trajectory = await subject.driver.play(kwargs, lambda i, r: None, max_steps=0)
        error = trajectory.error
        if error is None:
            probes[key] = "served"
            first = trajectory.first.observation if trajectory.first else None
            served.append({"reset": kwargs, "known_values": keys[key][:10], "observation": first})
        elif isinstance(error, EnvExecutionError) or error.code is not None:
            probes[key] = "refused"
        else:
            probes[key] = "broke"
            broke.append({"reset": kwargs, "error": f"{type(error).__name__}: {error}"[:400]})
    measured: JsonObject = {
        "probes": probes,
        "categorical_keys": {k: len(v) for k, v in keys.items()},
    }
    if served:
        key = next(k for k, outcome in probes.items() if outcome == "served")
        return failed(
            f"reset accepted {key}={served[0]['reset'][key]!r}, a value no row uses, and "
            "started an episode",
            "Refuse unknown task values in reset() (raise ValueError naming the known ones): "
            "a silent fallback runs the wrong task.",
            measured=measured,
            evidence=served[:3],
        )
    if broke:
        return failed(
            f"reset with an unknown value broke the session: {broke[0]['error']}",
            "Refuse unknown task values with an error frame (raise in reset()), keeping the "
            "session and the server alive.",
            measured=measured,
            evidence=broke[:3],
        )
    return passed(
        f"unknown values of {', '.join(probes)} were refused with an error", measured=measured
    )


# --- taskset.manifest_tasks --------------------------------------------------------------------

#: Reset keys that select a task, in the order they are tried when the server does not say.
TASK_KEYS = ("task_id", "task", "task_name", "task_type")
#: Declared tasks reset by the manifest task check.
MANIFEST_TASK_PROBES = 4


def task_key(subject: Subject) -> str:
    """The reset key that selects a task: one the reset route declares, else ``task_id``."""
    keys = subject.driver.dialect.reset_keys if subject.driver.transport == "http" else None
    for key in TASK_KEYS:
        if keys is not None and key in keys:
            return key
    return "task_id"


@check("taskset.manifest_tasks", level="taskset", needs=("episode",))
async def check_manifest_tasks(subject: Subject) -> Finding:
    """An unknown task id is refused, not served as the default task the manifest's ids avoid.

    Without a taskset, the manifest's ``tasks:`` are the tasks. Where resetting with the
    declared ids starts different episodes (the key selects tasks), an id no task has must be
    refused rather than start the same episode as a reset without one.
    """
    manifest = subject.env.manifest
    declared = manifest.tasks if manifest is not None else []
    if not declared:
        return skipped("the manifest lists no tasks")
    key = task_key(subject)
    seed = 4242
    starts: dict[str, str] = {}
    errors: dict[str, str] = {}
    for task_id in declared[:MANIFEST_TASK_PROBES]:
        kwargs = {"seed": seed, key: task_id, "episode_id": subject.driver.episode_id("task")}
        trajectory = await subject.driver.play(kwargs, lambda i, r: None, max_steps=0)
        if trajectory.first is None:
            errors[task_id] = f"{type(trajectory.error).__name__}: {trajectory.error}"[:300]
            continue
        starts[task_id] = observation_key(
            masked(trajectory.first.observation, {str(kwargs["episode_id"])})
        )
    unknown_kwargs = {"seed": seed, key: "taskhub-no-such-task", "episode_id": "taskhub-task-x"}
    unknown = await subject.driver.play(unknown_kwargs, lambda i, r: None, max_steps=0)
    default_kwargs = {"seed": seed, "episode_id": "taskhub-task-x"}
    default = await subject.driver.play(default_kwargs, lambda i, r: None, max_steps=0)
    ids = {"taskhub-task-x"}
    served_default = (
        unknown.first is not None
        and default.first is not None
        and observation_key(masked(unknown.first.observation, ids))
        == observation_key(masked(default.first.observation, ids))
    )
    selects = len(set(starts.values())) >= 2
    measured: JsonObject = {
        "declared": declared[:20],
        "key": key,
        "probed": list(starts),
        "distinct_starts": len(set(starts.values())),
        "refused": sorted(errors),
        "unknown_served_as_default": served_default,
    }
    problems = []
    # only where the key demonstrably selects tasks: then a bad id silently runs the default
    if selects and served_default:
        problems.append(
            f"reset({key}='taskhub-no-such-task') started the same episode as a reset without "
            f"{key}, while the declared ids start different ones: an unknown task is served "
            "as the default task"
        )
    if problems:
        return failed(
            "; ".join(problems),
            f"Make reset({key}=...) select the task of that id (raise ValueError naming the "
            "known ids for any other), so that every task the manifest lists can be run.",
            measured=measured,
            evidence=[{"unknown_reset": unknown_kwargs, **unknown.describe(1)}, errors],
        )
    if not selects:
        return skipped(
            f"reset({key}=...) does not tell the declared tasks apart: whether an unknown id "
            "is served instead cannot be seen",
            measured=measured,
        )
    return passed(
        f"{len(starts)} declared tasks start differently and an unknown id is not served as "
        "the default task",
        measured=measured,
    )
