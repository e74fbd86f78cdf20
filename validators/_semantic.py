"""Taskset and semantic checks: the env does its task, and its verifier means what it says.

The env honours its taskset's reset parameters, the reference solution reaches max reward,
doing nothing (or gaming the verifier) does not, the answer never leaks, and the verifier
scores the same input the same way every time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from typing import Any

from taskhub import (
    EnvClosedError,
    EnvConnectError,
    EnvError,
    EnvExecutionError,
    EnvTimeout,
    Task,
    canonical_json,
)

from ._check import Finding, JsonObject, check, failed, passed, skipped
from ._runtime import noop_policy, stable_state
from ._static import reset_parameters
from ._subject import ActionPolicy, Subject, Trajectory, median, observation_key

#: Reset keys every env gets from the validator itself.
PROTOCOL_KEYS = frozenset({"seed", "episode_id"})
#: Oracle episodes replayed per task by the verifier determinism check.
REPLAYS = 3

SEMANTIC_AFTER = ("runtime.episode_determinism", "taskset.reset_params")


# --- taskset.reset_params ----------------------------------------------------------------------


async def _initial(subject: Subject, kwargs: JsonObject) -> tuple[str, str] | str:
    """``(observation key, state key)`` right after reset, or the error text."""
    trajectory = await subject.play(kwargs, lambda i, r: None, max_steps=0, snapshots=True)
    if trajectory.error is not None or trajectory.first is None:
        return f"{type(trajectory.error).__name__}: {trajectory.error}"
    state = stable_state(trajectory.states[0]) if trajectory.states else ""
    return observation_key(trajectory.first.observation), state


@check(
    "taskset.reset_params",
    level="taskset",
    order=50,
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
    dropped = [k for k, effect in effects.items() if effect == "none"]
    accepted = reset_parameters(subject.folder) if subject.folder is not None else None
    if accepted is not None:
        unknown = [k for k in keys if k not in accepted]
        for key in unknown:
            if key not in dropped:
                dropped.append(key)
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


async def _key_effect(subject: Subject, key: str) -> str:
    """Whether substituting another row's value for ``key`` changes the start.

    ``changes``, ``none`` when it never does, ``untested`` when no two rows differ in it.
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
    taskset = subject.taskset
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
    order=51,
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
        trajectory = await subject.play(kwargs, lambda i, r: None, max_steps=0)
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


# --- oracle ------------------------------------------------------------------------------------


def manifest_oracle_tasks(subject: Subject) -> tuple[list[Task], str | None]:
    """Oracle episodes from the manifest's ``capabilities.oracle`` file, and why not if none.

    The file (JSON list or JSON lines) holds ``{"reset": {...}, "actions": [...]}`` or
    ``{"reset": {...}, "answer": ...}`` objects. Script oracles are not executed.
    """
    oracle = subject.manifest.oracle if subject.manifest else None
    if oracle is None or subject.folder is None:
        return [], None
    location = str(oracle.get("location"))
    path = (subject.folder / location).resolve()
    if not path.is_relative_to(subject.folder.resolve()) or not path.is_file():
        return [], f"the declared oracle {location!r} is not a file inside the package"
    if path.suffix not in (".json", ".jsonl"):
        return [], (
            f"the declared oracle {location!r} is a {oracle.get('form')} oracle: "
            "taskhub replays only data oracles (JSON episodes), it runs no scripts"
        )
    try:
        text = path.read_text(encoding="utf-8")
        rows = (
            json.loads(text)
            if path.suffix == ".json"
            else [json.loads(line) for line in text.splitlines() if line.strip()]
        )
        if isinstance(rows, dict):
            rows = [rows]
        tasks = [
            Task(
                task_id=f"manifest-oracle-{i}",
                reset=row.get("reset", {}),
                oracle_actions=row.get("actions"),
                answer=row.get("answer"),
            )
            for i, row in enumerate(rows)
        ]
    except (ValueError, AttributeError, TypeError) as exc:
        return [], f"the declared oracle {location!r} is not a list of episodes: {exc}"
    return tasks, None


def _oracle_steps(task: Task) -> int:
    return len(task.oracle_actions) if task.oracle_actions else 1


@check("semantic.oracle_max", level="semantic", order=60, needs=("episode",), after=SEMANTIC_AFTER)
async def check_oracle_max(subject: Subject) -> Finding:
    """The reference solution reaches the maximum reward (within the declared tolerance)."""
    candidates = [t for t in subject.tasks if subject.oracle_policy(t) is not None]
    source = "taskset"
    why_not = None
    if not candidates:
        candidates, why_not = manifest_oracle_tasks(subject)
        candidates = candidates[: subject.config.tasks]
        source = "manifest"
    if not candidates:
        return failed(
            why_not
            or "no oracle: no taskset row carries an answer or oracle_actions, and the "
            "manifest declares no oracle",
            "Give the env a way to show its verifier awards max reward: taskset rows with "
            "`answer` or `oracle_actions` (--taskset), or a data oracle in openenv.yaml "
            "(validation.capabilities.oracle).",
        )
    high = subject.reward_range[1]
    tolerance = subject.oracle_tolerance
    runs: list[tuple[Task, Trajectory]] = []
    short: list[Any] = []
    for task in candidates:
        policy = subject.oracle_policy(task)
        if policy is None:
            continue
        trajectory = await subject.play(
            subject.reset_kwargs(task, tag="oracle"),
            policy,
            max_steps=_oracle_steps(task),
            snapshots=True,
        )
        runs.append((task, trajectory))
        if trajectory.error is not None or trajectory.total_reward < high - tolerance:
            short.append({"task_id": task.task_id, **trajectory.describe(3)})
    subject.cache["oracle_runs"] = runs
    totals = [t.total_reward for _, t in runs]
    measured: JsonObject = {
        "source": source,
        "tasks": len(runs),
        "max": high,
        "tolerance": tolerance,
        "oracle_rewards": totals,
        "ended": sum(t.done for _, t in runs),
    }
    if short:
        return failed(
            f"the reference solution scored below {high - tolerance:g} on {len(short)} of "
            f"{len(runs)} tasks",
            "Fix the verifier (or the reference answers): a correct solution must earn the "
            "maximum reward.",
            measured=measured,
            evidence=short[:3],
        )
    return passed(
        f"the reference solution reached {high:g} on {len(runs)} tasks ({source})",
        measured=measured,
    )


# --- floor -------------------------------------------------------------------------------------


async def measure_floor(subject: Subject) -> tuple[float | None, list[Trajectory]]:
    """Median do-nothing episode reward over the sampled tasks (cached)."""
    if "floor" in subject.cache:
        floor: float | None = subject.cache["floor"]
        runs: list[Trajectory] = subject.cache["noop_runs"]
        return floor, runs
    runs = []
    for task in subject.tasks:
        runs.append(
            await subject.play(
                subject.reset_kwargs(task, tag="floor"),
                noop_policy(subject),
                max_steps=subject.max_steps_for(task),
            )
        )
    totals = [r.total_reward for r in runs if r.error is None]
    floor = median(totals) if totals else None
    subject.cache["floor"], subject.cache["noop_runs"] = floor, runs
    return floor, runs


@check(
    "semantic.floor_gap",
    level="semantic",
    order=61,
    needs=("episode",),
    after=("runtime.episode_determinism",),
)
async def check_floor_gap(subject: Subject) -> Finding:
    """Doing nothing scores at least the declared margin below the maximum reward."""
    floor, runs = await measure_floor(subject)
    high = subject.reward_range[1]
    margin = subject.floor_margin
    totals = [r.total_reward for r in runs if r.error is None]
    measured: JsonObject = {
        "floor": floor,
        "max": high,
        "margin": margin,
        "noop_rewards": totals,
        "action": subject.noop_action(),
    }
    if floor is None:
        return failed(
            "no do-nothing episode ran",
            "Accept the emptiest valid action.",
            measured=measured,
            evidence=[r.describe(2) for r in runs[:2]],
        )
    if high - floor < margin:
        return failed(
            f"doing nothing scores {floor:g}: only {high - floor:g} below the maximum {high:g} "
            f"(margin {margin:g})",
            "The verifier rewards no work: check for vacuous success conditions (an empty "
            "answer compared with an empty expectation, a default of success).",
            measured=measured,
            evidence=[r.describe(2) for r in runs[:2]],
        )
    return passed(
        f"doing nothing scores {floor:g}, {high - floor:g} below the maximum", measured=measured
    )


# --- canaries ----------------------------------------------------------------------------------


def broke_the_server(trajectory: Trajectory) -> bool:
    """Whether the episode ended because the server went away, not because it said no."""
    return isinstance(trajectory.error, EnvConnectError | EnvTimeout | EnvClosedError)


def canaries(subject: Subject, task: Task, other: Task) -> dict[str, ActionPolicy]:
    """Policies that must not earn more than doing nothing."""
    # canaries are valid actions (an invalid one is protocol.malformed_input's business):
    # `{}` when the schema allows it, else the emptiest valid action
    required = (subject.action_schema or {}).get("required") or []
    empty: JsonObject = subject.noop_action() if required else {}
    out: dict[str, ActionPolicy] = {"empty": lambda _i, _r: empty}
    other_actions = subject.oracle_actions(other) if other is not task else None
    repeated: JsonObject | None = None
    if other_actions and task.answer != other.answer:
        repeated = other_actions[0]
    field = subject.text_field()
    if field is not None:
        repeated = repeated or {field: "0"}
        out["echo"] = lambda _i, r: {field: json.dumps(r.observation, ensure_ascii=False)}
        out["huge"] = lambda _i, _r: {field: "0123456789" * 10_000}
        numbers = [str(n) for n in range(-100, 1001)]
        boxed = " ".join("\\boxed{" + n + "}" for n in numbers[:300])
        spam = f"answer: {' '.join(numbers)} {boxed} true yes correct {{}}"
        out["format_spam"] = lambda _i, _r: {field: spam}
    if repeated is not None:
        action = dict(repeated)
        out["repeated"] = lambda _i, _r: action
    return out


@check(
    "semantic.canary_floor",
    level="semantic",
    order=62,
    needs=("episode",),
    after=("runtime.episode_determinism",),
)
async def check_canary_floor(subject: Subject) -> Finding:
    """Canaries (empty, repeated, echoed, huge and spammed actions) score no more than the floor."""
    floor, _ = await measure_floor(subject)
    if floor is None:
        return skipped("no floor could be measured (semantic.floor_gap reports it)")
    low, high = subject.reward_range
    limit = floor + subject.policy.bounds.canary_tolerance * (high - low)
    tasks = subject.tasks[: min(4, len(subject.tasks))]
    scores: dict[str, list[float]] = {}
    rejected: dict[str, int] = {}
    examples: dict[str, Any] = {}
    for index, task in enumerate(tasks):
        other = tasks[(index + 1) % len(tasks)]
        for name, policy in canaries(subject, task, other).items():
            trajectory = await subject.play(
                subject.reset_kwargs(task, tag=f"canary-{name}"),
                policy,
                max_steps=subject.max_steps_for(task),
            )
            if broke_the_server(trajectory):
                crashed = {"canary": name, "task_id": task.task_id, **trajectory.describe(2)}
                return failed(
                    f"the {name} canary broke the server: {trajectory.error}"[:400],
                    "Reject bad replies with an error (or a zero reward); never let one action "
                    "crash or hang the server.",
                    measured={"floor": floor, "canary": name},
                    evidence=[crashed],
                )
            if trajectory.error is not None and not trajectory.steps:
                rejected[name] = rejected.get(name, 0) + 1
            scores.setdefault(name, []).append(trajectory.total_reward)
            if trajectory.total_reward > floor:
                examples.setdefault(name, {"task_id": task.task_id, **trajectory.describe(2)})
    means = {name: sum(v) / len(v) for name, v in scores.items()}
    measured: JsonObject = {
        "floor": floor,
        "limit": round(limit, 4),
        "mean_rewards": means,
        "rejected": rejected,
        "tasks": len(tasks),
    }
    gamed = {name: mean for name, mean in means.items() if mean > limit}
    if gamed:
        names = ", ".join(f"{n} ({m:.2f})" for n, m in sorted(gamed.items()))
        return failed(
            f"canaries beat the floor {floor:g}: {names}",
            "Make the verifier parse one answer strictly: reject empty, oversized and "
            "multi-answer replies, and never match the answer as a substring of free text.",
            measured=measured,
            evidence=[examples[n] for n in sorted(gamed) if n in examples][:3],
        )
    return passed(f"{len(means)} canaries stayed at the floor ({floor:g})", measured=measured)


# --- leakage -----------------------------------------------------------------------------------


def _leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [
            leaf for k, v in value.items() for leaf in _leaves(v, f"{path}.{k}" if path else str(k))
        ]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v, path + "[]")]
    return [(path, value)]


def _norm(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return re.sub(r"\s+", " ", text).strip().lower()


def leaking_paths(
    items: list[tuple[Task, list[dict[str, Any]]]], ignore: frozenset[str] = frozenset()
) -> tuple[dict[str, list[str]], int]:
    """Paths whose value is (or spells out) the task's answer in most tasks.

    ``items`` pairs each task with what the agent saw. A path leaks when, in at least two
    tasks and in more than half of them, a value there equals the answer or contains it as a
    separate token. Answers shorter than three characters (``7``, ``42``) appear by chance in
    questions, so a token match of one counts only when it recurs in at least three tasks.
    """
    hits: dict[str, list[str]] = {}
    short_hits: dict[str, list[str]] = {}
    checked = 0
    for task, documents in items:
        if task.answer is None or isinstance(task.answer, dict | list):
            continue
        answer = _norm(task.answer)
        if not answer:
            continue
        checked += 1
        token = re.compile(rf"(?<![\w.]){re.escape(answer)}(?![\w.])")
        found: set[str] = set()
        found_short: set[str] = set()
        for document in documents:
            for path, value in _leaves(document):
                if path.split(".")[-1] in ignore or value is None:
                    continue
                text = _norm(value)
                if text == answer or (len(answer) >= 3 and token.search(text)):
                    found.add(path)
                elif token.search(text):
                    found_short.add(path)
        for path in found:
            hits.setdefault(path, []).append(task.task_id)
        for path in found_short - found:
            short_hits.setdefault(path, []).append(task.task_id)
    need = 1 if checked == 1 else max(2, checked // 2 + 1)
    leaks = {p: ids for p, ids in hits.items() if len(ids) >= need}
    for path, ids in short_hits.items():
        total = ids + hits.get(path, [])
        if len(total) >= max(3, need):
            leaks[path] = total
    return leaks, checked


def _answered(subject: Subject) -> bool:
    return any(
        t.answer is not None and not isinstance(t.answer, dict | list) for t in subject.tasks
    )


@check(
    "semantic.no_solution_leakage",
    level="semantic",
    order=63,
    needs=("episode",),
    after=SEMANTIC_AFTER,
)
async def check_no_solution_leakage(subject: Subject) -> Finding:
    """The reference answer appears in no observation the agent sees before it answers."""
    if not _answered(subject):
        return skipped("no taskset row carries an answer to look for")
    runs: list[tuple[Task, Trajectory]] = subject.cache.get("oracle_runs") or []
    _, noop_runs = await measure_floor(subject)
    seen: dict[str, list[dict[str, Any]]] = {}
    for task, trajectory in runs:
        seen.setdefault(task.task_id, []).extend(trajectory.pre_done_observations())
    for task, trajectory in zip(subject.tasks, noop_runs, strict=False):
        seen.setdefault(task.task_id, []).extend(trajectory.pre_done_observations())
    items = [(t, seen.get(t.task_id, [])) for t in subject.tasks]
    leaks, checked = leaking_paths(items)
    measured: JsonObject = {"tasks_checked": checked, "leaking_fields": sorted(leaks)}
    if leaks:
        path, ids = next(iter(sorted(leaks.items())))
        example = next(t for t in subject.tasks if t.task_id == ids[0])
        return failed(
            f"the answer is in the observation field {path!r} in {len(ids)} of {checked} tasks",
            "Never put the expected answer (or anything it can be read from) in an "
            "observation; keep it server-side.",
            measured=measured,
            evidence=[
                {
                    "task_id": example.task_id,
                    "answer": example.answer,
                    "observations": seen[example.task_id][:2],
                }
            ],
        )
    return passed(f"no answer appears in the observations of {checked} tasks", measured=measured)


@check(
    "runtime.oracle_containment",
    level="runtime",
    order=70,
    needs=("episode",),
    after=SEMANTIC_AFTER,
)
async def check_oracle_containment(subject: Subject) -> Finding:
    """state(), which any client can call, does not reveal the answer before it is given."""
    runs: list[tuple[Task, Trajectory]] = subject.cache.get("oracle_runs") or []
    if not _answered(subject) or not runs:
        return skipped("no oracle episode with an answer ran")
    items = [(task, trajectory.states) for task, trajectory in runs]
    leaks, checked = leaking_paths(items, ignore=frozenset({"episode_id"}))
    measured: JsonObject = {"tasks_checked": checked, "leaking_fields": sorted(leaks)}
    if leaks:
        path, ids = next(iter(sorted(leaks.items())))
        example = next(t for t, _ in runs if t.task_id == ids[0])
        states = next(tr.states for t, tr in runs if t.task_id == ids[0])
        return failed(
            f"state() reveals the answer in {path!r} in {len(ids)} of {checked} tasks",
            "Keep the ground truth out of the State model: state() is served to every client.",
            measured=measured,
            evidence=[{"task_id": example.task_id, "answer": example.answer, "states": states[:2]}],
        )
    return passed(f"state() holds no answer in {checked} tasks", measured=measured)


# --- verifier determinism ----------------------------------------------------------------------


@check(
    "semantic.verifier_determinism",
    level="semantic",
    order=64,
    needs=("episode",),
    after=SEMANTIC_AFTER,
)
async def check_verifier_determinism(subject: Subject) -> Finding:
    """Replaying the same solution (and the same wrong answer) always earns the same reward."""
    runs: list[tuple[Task, Trajectory]] = subject.cache.get("oracle_runs") or []
    if not runs:
        return skipped("no oracle episode ran (semantic.oracle_max reports why)")
    unstable: list[Any] = []
    measured_rewards: dict[str, dict[str, list[float]]] = {}
    tasks = [task for task, _ in runs][:3]
    for index, task in enumerate(tasks):
        policy = subject.oracle_policy(task)
        if policy is None:
            continue
        other = tasks[(index + 1) % len(tasks)]
        wrong = canaries(subject, task, other).get("repeated")
        rewards: dict[str, list[float]] = {"oracle": [], "wrong": []}
        kwargs = subject.reset_kwargs(task, tag="replay")
        for _ in range(REPLAYS):
            rewards["oracle"].append(
                (await subject.play(kwargs, policy, max_steps=_oracle_steps(task))).total_reward
            )
            if wrong is not None:
                rewards["wrong"].append(
                    (
                        await subject.play(kwargs, wrong, max_steps=subject.max_steps_for(task))
                    ).total_reward
                )
        measured_rewards[task.task_id] = rewards
        for name, values in rewards.items():
            if len(set(values)) > 1:
                unstable.append({"task_id": task.task_id, "replayed": name, "rewards": values})
    measured: JsonObject = {"replays": REPLAYS, "rewards": measured_rewards}
    if unstable:
        return failed(
            f"the same input earned different rewards on {len(unstable)} replay set(s)",
            "Make the verifier a pure function of the episode (no randomness, clocks or "
            "external calls).",
            measured=measured,
            evidence=unstable[:3],
        )
    return passed(
        f"{len(measured_rewards)} tasks replayed {REPLAYS}x with identical rewards",
        measured=measured,
    )


# --- semantic.replayability --------------------------------------------------------------------

#: Recorded episodes replayed by the replayability check.
REPLAY_EPISODES = 4


def _frames(trajectory: Trajectory) -> list[tuple[str, dict[str, Any], float | None, bool]]:
    """``(label, observation, reward, done)`` of the reset and of every step."""
    frames = []
    if trajectory.first is not None:
        first = trajectory.first
        frames.append(("the reset", first.observation, first.reward, first.done))
    for index, (_, result) in enumerate(trajectory.steps, 1):
        frames.append((f"step {index}", result.observation, result.reward, result.done))
    return frames


def first_difference(recorded: Trajectory, replayed: Trajectory) -> str:
    """Where a replay first parts from its recording, in words."""

    def show(value: Any) -> str:
        text = json.dumps(value, sort_keys=True, default=str)
        return text if len(text) <= 120 else text[:117] + "..."

    for (label, obs_a, reward_a, done_a), (_, obs_b, reward_b, done_b) in zip(
        _frames(recorded), _frames(replayed), strict=False
    ):
        for key in sorted((set(obs_a) | set(obs_b)) - {"metadata"}):
            if obs_a.get(key) != obs_b.get(key):
                return (
                    f"at {label}, observation field {key!r} was {show(obs_a.get(key))} and is "
                    f"now {show(obs_b.get(key))}"
                )
        if reward_a != reward_b:
            return f"at {label}, the reward was {reward_a} and is now {reward_b}"
        if done_a != done_b:
            return f"at {label}, done was {done_a} and is now {done_b}"
    if replayed.error is not None:
        return f"the replay broke: {type(replayed.error).__name__}: {replayed.error}"
    return f"the recording has {len(recorded.steps)} step(s), the replay {len(replayed.steps)}"


def _recorded(subject: Subject) -> list[tuple[Task, Trajectory]]:
    """Clean recorded episodes to replay: oracle runs first, then do-nothing runs."""
    oracle: list[tuple[Task, Trajectory]] = subject.cache.get("oracle_runs") or []
    reference = [(task, run) for task, _, run in subject.cache.get("reference_runs") or []]
    picked: list[tuple[Task, Trajectory]] = []
    for task, run in oracle[: REPLAY_EPISODES - 1] + reference:
        if run.error is None and run.first is not None and len(picked) < REPLAY_EPISODES:
            picked.append((task, run))
    return picked


def _replaying(actions: list[JsonObject]) -> ActionPolicy:
    """A policy that sends ``actions`` in order, then stops."""
    return lambda i, _r: actions[i] if i < len(actions) else None


def _other_hash_seed() -> str:
    """A ``PYTHONHASHSEED`` unlike this process's (which the first server inherited)."""
    current = os.environ.get("PYTHONHASHSEED", "")
    seed = secrets.randbelow(2**32 - 1) + 1
    if current.isdigit():
        seed = (int(current) % (2**32 - 1)) + 1
    return str(seed)


@check(
    "semantic.replayability",
    level="semantic",
    order=76,
    needs=("episode",),
    after=("runtime.episode_determinism", "semantic.verifier_determinism"),
)
async def check_replayability(subject: Subject) -> Finding:
    """A recorded episode replays identically on a restarted server.

    The recorded actions are sent again, with the same reset kwargs (the episode id too), to a
    fresh server process: a launched env is stopped and started again, under a different
    ``PYTHONHASHSEED``. The observations, rewards and dones must match the recording. Episode
    and verifier determinism replay within one process (and must pass first), so this is what
    catches state that lives as long as the process: salted ``hash()`` values, set iteration
    order, counters, caches, clocks read at import. A running server that taskhub did not
    launch is replayed in fresh sessions, not restarted.
    """
    recorded = _recorded(subject)
    if not recorded:
        return skipped("no clean episode was recorded (oracle and do-nothing runs all failed)")
    restarted = subject.server is not None and subject.folder is not None
    hash_seed = None
    if restarted:
        hash_seed = _other_hash_seed()
        subject.stop()
        subject.url = None
        try:
            await subject.launch(env={"PYTHONHASHSEED": hash_seed})
        except (EnvError, OSError) as exc:
            return failed(
                f"the server did not start again after a restart: {type(exc).__name__}: {exc}",
                "Start from a clean process every time: no state kept on disk between runs "
                "that stops the server from coming back.",
            )
    differing: list[Any] = []
    for task, run in recorded:
        actions = [action for action, _ in run.steps]
        # the same reset kwargs, episode_id included, as episode determinism replays them
        replay = await subject.play(run.reset_kwargs, _replaying(actions), max_steps=len(actions))
        if replay.signature(states=False) != run.signature(states=False):
            differing.append(
                {
                    "task_id": task.task_id,
                    "difference": first_difference(run, replay),
                    "recorded": run.describe(),
                    "replayed": replay.describe(),
                }
            )
    measured: JsonObject = {
        "episodes": len(recorded),
        "steps": sum(len(run.steps) for _, run in recorded),
        "server_restarted": restarted,
        "pythonhashseed": hash_seed,
        "differing": len(differing),
    }
    where = "a restarted server" if restarted else "the running server, in fresh sessions"
    if differing:
        return failed(
            f"{len(differing)} of {len(recorded)} recorded episodes replayed differently on "
            f"{where}; task {differing[0]['task_id']}: {differing[0]['difference']}",
            "Derive every observation and reward from the reset arguments and the actions only: "
            "no hash() of strings (salted per process), no set iteration order, no counters, "
            "caches or clocks that outlive an episode.",
            measured=measured,
            evidence=differing[:2],
        )
    return passed(
        f"{len(recorded)} recorded episodes replayed identically on {where}", measured=measured
    )
