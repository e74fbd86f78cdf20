"""Taskset checks: the env honours the taskset's reset parameters and refuses unknown values.

The same row gives the same start; other rows and other parameter values, other starts; a
value no row uses (a misspelt task id) is refused rather than served as a default task.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from taskhub import EnvExecutionError, canonical_json

from ._check import Finding, check, failed, passed, skipped
from ._driver import Trajectory, http_call, observation_key, stable_state
from ._json import JsonObject
from ._manifest import declared_tasks
from ._protocol import WIRE, reset_takes_body
from ._static import reset_parameters
from ._subject import Subject, noop_policy

#: Reset keys every env gets from the validator itself.
PROTOCOL_KEYS = frozenset({"seed", "episode_id"})


# --- taskset.reset_params ----------------------------------------------------------------------


async def _initial(subject: Subject, kwargs: JsonObject) -> tuple[str, str] | str:
    """``(observation key, state key)`` right after reset, or the error text."""
    driver = subject.driver
    trajectory = await driver.play(
        kwargs, lambda i, r: None, max_steps=0, snapshots=driver.serves_state
    )
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
                    await subject.driver.play(
                        kwargs, policy, max_steps=steps, snapshots=subject.driver.serves_state
                    )
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
            subject.driver.in_transport(
                "Refuse unknown task values with an error frame (raise in reset()), keeping "
                "the session and the server alive.",
                "Refuse unknown task values with HTTP 4xx (400 or 422), keeping the server alive.",
            ),
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


def without_echo(value: Any, echoed: set[str]) -> Any:
    """``value`` without the fields that only repeat what the reset asked for (ids, a task)."""
    if isinstance(value, dict):
        return {
            k: without_echo(v, echoed)
            for k, v in value.items()
            if not (isinstance(v, str) and v in echoed)
        }
    if isinstance(value, list):
        return [without_echo(v, echoed) for v in value]
    return value


def _task_ids(body: Any) -> list[str]:
    """Task ids of a ``GET /tasks`` reply: a list (or ``{"tasks": [...]}``) of ids or objects."""
    if isinstance(body, dict):
        body = body.get("tasks", body.get("task_ids"))
    if isinstance(body, dict):
        body = list(body)
    if not isinstance(body, list):
        return []
    return declared_tasks({"tasks": body})


async def declared_task_ids(subject: Subject) -> tuple[list[str], str]:
    """The tasks the env declares: its manifest's ``tasks:``, else its ``GET /tasks`` route."""
    manifest = subject.env.manifest
    if manifest is not None and manifest.tasks:
        return manifest.tasks, "openenv.yaml"
    reply = await http_call(subject.driver, "/tasks")
    ids = _task_ids(reply.json) if reply.status == 200 else []
    return ids, "GET /tasks"


#: Reset keys that only seed or name an episode: a route taking only these selects no task.
EPISODE_KEYS = frozenset({"seed", "episode_id"})
#: Resets with no task key compared to see whether the served task changes on its own.
CYCLE_RESETS = 3


def _leaves(value: Any, prefix: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and depth < 8:
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}{key}.", depth + 1)
    elif isinstance(value, list) and value and depth < 8:
        for index, item in enumerate(value[:64]):
            yield from _leaves(item, f"{prefix}{index}.", depth + 1)
    else:
        yield prefix.rstrip("."), value


def named_task(observation: Any) -> tuple[str, str] | None:
    """The field of an observation that names its task (``state.task_id: "easy"``), if any."""
    best: tuple[tuple[int, int], str, str] | None = None
    for path, value in _leaves(observation):
        name = path.rpartition(".")[2]
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # a numbered task
        if name in TASK_KEYS and isinstance(value, str) and 0 < len(value) <= 200:
            rank = (TASK_KEYS.index(name), path.count("."))  # task_id before a display name
            if best is None or rank < best[0]:
                best = (rank, path, value)
    return (best[1], best[2]) if best is not None else None


class _Starts:
    """Start observations compared field by field, leaving out what changes on its own.

    Two resets without a task, with the same seed, tell which fields differ anyway (a clock, a
    random draw the seed does not cover): those and the fields that echo the request are left
    out of every comparison.
    """

    def __init__(self, first: dict[str, Any], second: dict[str, Any], echoed: set[str]) -> None:
        a, b = dict(_leaves(first)), dict(_leaves(second))
        self.noise = {p for p in a.keys() | b.keys() if a.get(p) != b.get(p)}
        self.fields = len(a.keys() | b.keys())
        self.echoed = echoed

    def key(self, observation: dict[str, Any], echoed: set[str]) -> str:
        kept = {
            path: value
            for path, value in _leaves({k: v for k, v in observation.items() if k != "metadata"})
            if path not in self.noise
            and path.partition(".")[0] != "metadata"
            and not (isinstance(value, str) and value in echoed | self.echoed)
        }
        return canonical_json(kept)


@check("taskset.manifest_tasks", level="taskset", needs=("episode",))
async def check_manifest_tasks(subject: Subject) -> Finding:
    """Every declared task can be selected, and an unknown task id is not served as a default.

    Without a taskset, the tasks the env declares (its manifest's ``tasks:``, else ``GET
    /tasks``, else the task its reset observation names) are the tasks. Where resetting with
    the declared ids starts different episodes (the key selects tasks), an id no task has must
    be refused rather than start the same episode as a reset without one; an unknown id whose
    episode names another task (``task_id: "easy"``) is served as that task. Where every
    declared id and an unknown one start the same episode, the key is swallowed: only one of
    the declared tasks can ever run; so it is when the reset route takes nothing that could
    select a task and resets keep serving one. Fields that repeat the request, or that differ
    between two identical resets, are left out of the comparisons.
    """
    seed = 4242
    episode_id = "taskhub-task-x"
    driver = subject.driver

    async def play(value: str | None, key: str, *, seed: int = seed) -> Trajectory:
        kwargs: JsonObject = {"seed": seed, "episode_id": episode_id}
        if value is not None:
            kwargs[key] = value
        return await driver.play(kwargs, lambda i, r: None, max_steps=0)

    declared, source = await declared_task_ids(subject)
    key = task_key(subject)
    default = await play(None, key)
    again = await play(None, key)
    if default.first is None or again.first is None:
        return skipped(f"a reset without a task failed: {default.error or again.error}"[:400])
    named = named_task(default.first.observation)
    keys = driver.dialect.reset_keys if driver.transport == "http" else None
    if named is not None and keys is None:
        key = named[0].rpartition(".")[2]  # the field the env names its task by
    if not declared and named is not None:
        declared, source = [named[1]], f"the reset observation ({named[0]})"
    if not declared:
        return skipped(
            "the env declares no tasks (no tasks: in openenv.yaml, no GET /tasks, no task "
            "named in the reset observation)"
        )
    if driver.transport == "http" and not reset_takes_body(await subject.get(WIRE), driver.dialect):
        keys = ()  # /openapi.json shows a reset route without a body
    if keys is not None and key not in keys:
        return await _no_task_key(
            subject, declared, source, keys, play, key, default.first.observation
        )
    starts_of = _Starts(default.first.observation, again.first.observation, {episode_id})
    if starts_of.fields and len(starts_of.noise) >= starts_of.fields:
        return skipped(
            "every field of the reset observation changes between two identical resets: "
            "which task an episode runs cannot be told from its start"
        )
    starts: dict[str, str] = {}
    errors: dict[str, str] = {}
    for task_id in declared[:MANIFEST_TASK_PROBES]:
        trajectory = await play(task_id, key)
        if trajectory.first is None:
            errors[task_id] = f"{type(trajectory.error).__name__}: {trajectory.error}"[:300]
            continue
        starts[task_id] = starts_of.key(trajectory.first.observation, {task_id})
    unknown_id = "taskhub-no-such-task"
    unknown = await play(unknown_id, key)
    unknown_start = (
        starts_of.key(unknown.first.observation, {unknown_id}) if unknown.first else None
    )
    default_start = starts_of.key(default.first.observation, set())
    served_default = unknown_start is not None and unknown_start == default_start
    unknown_named = named_task(unknown.first.observation) if unknown.first else None
    served_as = (
        unknown_named[1]
        if unknown_named is not None
        and unknown_named[0].rpartition(".")[2] == key  # the field the id was sent as
        and unknown_named[1] != unknown_id
        and (unknown_named[1] in declared or (named is not None and unknown_named[1] == named[1]))
        else None
    )
    selects = len(set(starts.values())) >= 2
    swallowed = (
        not selects
        and len(starts) >= 2
        and unknown_start is not None
        and unknown_start in set(starts.values())
    )
    measured: JsonObject = {
        "declared": declared[:20],
        "source": source,
        "key": key,
        "probed": list(starts),
        "distinct_starts": len(set(starts.values())),
        "refused": sorted(errors),
        "unknown_served_as_default": served_default,
        "unknown_served_as": served_as,
        "fields_left_out": sorted(starts_of.noise)[:20],
    }
    unknown_kwargs = {"seed": seed, key: unknown_id, "episode_id": episode_id}
    evidence: list[Any] = [{"unknown_reset": unknown_kwargs, **unknown.describe(1)}, errors]
    problems = []
    # only where the key demonstrably selects tasks: an env that drops a key it does not take
    # serves its default for any value of it
    if served_as is not None and unknown_named is not None and selects:
        problems.append(
            f"reset({key}={unknown_id!r}) was accepted and its episode names task "
            f"{served_as!r} ({unknown_named[0]}): an unknown task is served as another task"
        )
    elif selects and served_default:
        problems.append(
            f"reset({key}={unknown_id!r}) started the same episode as a reset without "
            f"{key}, while the declared ids start different ones: an unknown task is served "
            "as the default task"
        )
    if swallowed:
        problems.append(
            f"reset({key}=...) starts the same episode for each of the {len(starts)} declared "
            f"tasks ({', '.join(starts)}, from {source}) and for an id no task has: the key "
            "is dropped, so only one declared task can ever run"
        )
    if problems:
        return failed(
            "; ".join(problems),
            f"Make reset({key}=...) select the task of that id (raise ValueError naming the "
            "known ids for any other), so that every task the env declares can be run.",
            measured=measured,
            evidence=evidence,
        )
    if not selects and unknown.first is None and len(declared) == 1:
        return passed(
            f"an unknown {key} is refused ({type(unknown.error).__name__})", measured=measured
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


#: Difficulties that are one rung of a ladder: an env that names one has the others.
LADDER = ("easy", "medium", "hard", "expert")
#: Observation fields that name a difficulty.
DIFFICULTY_KEYS = ("difficulty", "level", "difficulty_level")


def named_rung(observation: Any) -> tuple[str, str] | None:
    """The field of an observation naming a rung of a difficulty ladder (``difficulty: easy``)."""
    for path, value in _leaves(observation):
        if (
            path.rpartition(".")[2] in DIFFICULTY_KEYS
            and isinstance(value, str)
            and value.strip().lower() in LADDER
        ):
            return path, value
    return None


async def _no_task_key(
    subject: Subject,
    declared: list[str],
    source: str,
    keys: tuple[str, ...],
    play: Any,
    key: str,
    start: dict[str, Any],
) -> Finding:
    """The reset route takes no task key: fine unless it takes nothing that could select one.

    A route that takes only a seed and an episode id, for an env that declares several tasks
    (or names one rung of a difficulty ladder, ``difficulty: "easy"``: the others exist),
    selects none of them; if resets with different seeds keep naming one task (or the env
    names none), only that one can run.
    """
    selecting = [k for k in keys if k not in EPISODE_KEYS]
    rung = named_rung(start) if len(declared) < 2 else None
    if selecting or (len(declared) < 2 and rung is None):
        return skipped(
            f"the reset route takes no {key!r} (it takes {', '.join(keys) or 'nothing'}): the "
            "declared tasks are selected some other way"
        )
    names = []
    for offset in range(CYCLE_RESETS):
        trajectory = await play(None, key, seed=4242 + offset)
        observation = trajectory.first.observation if trajectory.first else None
        found = named_task(observation) if rung is None else named_rung(observation)
        names.append(found[1] if found is not None else None)
    what = "tasks" if rung is None else "difficulties"
    named = f"named_{what}"
    measured: JsonObject = {
        "declared": declared[:20],
        "source": source,
        "reset_keys": list(keys),
        named: names,
    }
    if len({n for n in names if n is not None}) >= 2:
        return skipped(
            f"the reset route takes no task, but successive resets serve different {what} "
            f"({', '.join(sorted({n for n in names if n}))}): they are cycled, not selected",
            measured=measured,
        )
    served = next((n for n in names if n is not None), None)
    if rung is not None:
        task = f" (task {declared[0]!r})" if declared else ""
        offered = (
            f"the env names difficulty {rung[1]!r} ({rung[0]}){task}, one rung of a "
            "difficulty ladder,"
        )
    else:
        listed = ", ".join(declared[:6])
        offered = f"the env declares {len(declared)} tasks ({listed}, from {source})"
    return failed(
        f"{offered} but its reset route takes {', '.join(keys) or 'nothing'}: no task can be "
        "selected"
        + (f", and {CYCLE_RESETS} resets all served {served!r}" if served else "")
        + f", so the other {what} can never run",
        "Let reset() take the task's id (e.g. reset(task_id=...)) and select that task, "
        "raising ValueError naming the known ids for any other.",
        measured=measured,
        evidence=[{"reset_keys": list(keys), named: names}],
    )
