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
    EnvTimeout,
    Task,
)

from ._actions import offered_actions
from ._check import Finding, check, failed, passed, skipped
from ._driver import ActionPolicy, Trajectory, median
from ._episodes import FLOOR, ORACLE_RUNS, REFERENCE_RUNS, empty_body_does_nothing, oracle_steps
from ._json import JsonObject
from ._subject import Subject

#: Oracle episodes replayed per task by the verifier determinism check.
REPLAYS = 3

SEMANTIC_AFTER = ("runtime.episode_determinism", "taskset.reset_params")


# --- oracle ------------------------------------------------------------------------------------


@check("semantic.oracle_max", level="semantic", needs=("episode",), after=SEMANTIC_AFTER)
async def check_oracle_max(subject: Subject) -> Finding:
    """The reference solution reaches the maximum reward (within the declared tolerance)."""
    oracle = await subject.get(ORACLE_RUNS)
    if not oracle.runs and oracle.why_not is not None:
        return failed(
            oracle.why_not,
            "Point validation.capabilities.oracle at a JSON file of "
            '{"reset": {...}, "actions": [...]} episodes inside the package.',
        )
    if not oracle.runs:
        return skipped(
            "no oracle: no taskset row carries an answer or oracle_actions, and the manifest "
            "declares no oracle",
            remediation="To check that the verifier awards the maximum reward, give taskset "
            "rows an `answer` or `oracle_actions` (--taskset), or declare a data oracle in "
            "openenv.yaml (validation.capabilities.oracle).",
        )
    high = subject.reward_range[1]
    tolerance = subject.oracle_tolerance
    runs = oracle.runs
    short: list[Any] = [
        {"task_id": task.task_id, **trajectory.describe(3)}
        for task, trajectory in runs
        if trajectory.error is not None or trajectory.total_reward < high - tolerance
    ]
    totals = [t.total_reward for _, t in runs]
    measured: JsonObject = {
        "source": oracle.source,
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
        f"the reference solution reached {high:g} on {len(runs)} tasks ({oracle.source})",
        measured=measured,
    )


# --- floor -------------------------------------------------------------------------------------


@check(
    "semantic.floor_gap",
    level="semantic",
    needs=("episode",),
    after=("runtime.episode_determinism",),
)
async def check_floor_gap(subject: Subject) -> Finding:
    """Doing nothing scores at least the declared margin below the maximum reward."""
    measured_floor = await subject.get(FLOOR)
    floor, runs = measured_floor.value, measured_floor.runs
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
        errors = [f"{type(r.error).__name__}: {r.error}"[:300] for r in runs if r.error]
        return skipped(
            f"no do-nothing episode ran: {errors[0] if errors else 'none was played'}",
            measured=measured,
        )
    per_step = ""
    if floor > high:
        # the episodes sum to more than the range allows: the range bounds a step's reward
        steps = [r.reward or 0.0 for t in runs if t.error is None for _, r in t.steps]
        if steps:
            floor = sum(steps) / len(steps)
            measured["floor_per_step"] = floor
            per_step = " per step"
    if high - floor < margin:
        return failed(
            f"doing nothing scores {floor:g}{per_step}: only {high - floor:g} below the maximum "
            f"{high:g} (margin {margin:g})",
            "The verifier rewards no work: check for vacuous success conditions (an empty "
            "answer compared with an empty expectation, a default of success).",
            measured=measured,
            evidence=[r.describe(2) for r in runs[:2]],
        )
    return passed(
        f"doing nothing scores {floor:g}{per_step}, {high - floor:g} below the maximum",
        measured=measured,
    )


# --- canaries ----------------------------------------------------------------------------------


def broke_the_server(trajectory: Trajectory) -> bool:
    """Whether the episode ended because the server went away, not because it said no."""
    return isinstance(trajectory.error, EnvConnectError | EnvTimeout | EnvClosedError)


def canaries(subject: Subject, task: Task, other: Task) -> dict[str, ActionPolicy]:
    """Policies that must not earn more than doing nothing."""
    # canaries are valid actions (an invalid one is protocol.malformed_input's business):
    # `{}` when the schema allows it, else the emptiest valid action
    # where `{}` is a second way of doing nothing, the floor played it already
    required = (subject.driver.action_schema or {}).get("required") or []
    empty: JsonObject = subject.noop_action() if required else {}
    out: dict[str, ActionPolicy] = {}
    if not empty_body_does_nothing(subject):
        out["empty"] = lambda _i, _r: empty
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
    needs=("episode",),
    after=("runtime.episode_determinism",),
)
async def check_canary_floor(subject: Subject) -> Finding:
    """Canaries (empty, repeated, echoed, huge and spammed actions) score no more than the floor."""
    floor = (await subject.get(FLOOR)).value
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
            trajectory = await subject.driver.play(
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


# --- reward signal -----------------------------------------------------------------------------

#: Fewest distinct options that must all win before the reward is said to tell none apart.
MIN_OPTIONS = 3
#: Most steps of an episode that plays one option throughout.
OPTION_STEPS = 20


def _always(action: JsonObject) -> ActionPolicy:
    """A policy that plays ``action`` at every step."""
    return lambda _i, _r: dict(action)


@check("semantic.reward_signal", level="semantic", needs=("episode",))
async def check_reward_signal(subject: Subject) -> Finding:
    """Not every option the env offers wins: the reward tells a right choice from a wrong one.

    From the first task's start, each option of a set the observation offers (``rooms:
    [{"id": "A"}, ...]``, ``legal_moves``) is played as a whole episode. When at least
    ``MIN_OPTIONS`` distinct options each end their episode with the top of the reward range,
    above what doing nothing earns, no choice the agent makes can be wrong.
    """
    task = subject.tasks[0]
    start = await subject.driver.play(
        subject.reset_kwargs(task, tag="options"), lambda _i, _r: None, max_steps=0
    )
    if start.first is None:
        return skipped(f"the reset failed: {start.error}"[:400])
    sets = offered_actions(subject.driver.action_schema, start.first.observation)
    if not sets:
        return skipped("the start observation offers no set of options to choose from")
    floor = (await subject.get(FLOOR)).value
    high = subject.reward_range[1]
    key, actions = sets[0]
    runs: list[tuple[JsonObject, Trajectory]] = []
    for action in actions:
        trajectory = await subject.driver.play(
            subject.reset_kwargs(task, tag="options"),
            _always(action),
            max_steps=min(OPTION_STEPS, subject.max_steps_for(task)),
        )
        if trajectory.error is None and trajectory.steps:
            runs.append((action, trajectory))
    totals = [t.total_reward for _, t in runs]
    measured: JsonObject = {
        "options_of": key,
        "played": [a for a, _ in runs],
        "totals": totals,
        "floor": floor,
        "max": high,
    }
    if len(runs) < MIN_OPTIONS:
        return skipped(
            f"{len(runs)} of the {len(actions)} options tried from {key!r} could be played: "
            f"fewer than {MIN_OPTIONS}",
            measured=measured,
        )
    wins = all(t.done and t.total_reward >= high - 1e-9 for _, t in runs)
    if wins and floor is not None and floor < high:
        return failed(
            f"each of the {len(runs)} options played from {key!r} "
            f"({', '.join(json.dumps(a) for a, _ in runs[:4])}) ends its episode with the top "
            f"reward {high:g}: the reward does not tell a right choice from a wrong one",
            "Grade the choice against the task (here, which option meets the requirements): "
            "at least one offered option should score below the top, or the task is no test.",
            measured=measured,
            evidence=[{"action": a, **t.describe(2)} for a, t in runs[:3]],
        )
    distinct = sorted({round(t, 6) for t in totals})
    return passed(
        f"{len(runs)} options played from {key!r} earn {len(distinct)} different reward(s) "
        f"({', '.join(f'{v:g}' for v in distinct[:5])})",
        measured=measured,
    )


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


def answered(subject: Subject) -> bool:
    return any(
        t.answer is not None and not isinstance(t.answer, dict | list) for t in subject.tasks
    )


@check(
    "semantic.no_solution_leakage",
    level="semantic",
    needs=("episode",),
    after=SEMANTIC_AFTER,
)
async def check_no_solution_leakage(subject: Subject) -> Finding:
    """The reference answer appears in no observation the agent sees before it answers."""
    if not answered(subject):
        return skipped("no taskset row carries an answer to look for")
    runs = (await subject.get(ORACLE_RUNS)).runs
    noop_runs = (await subject.get(FLOOR)).runs
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


# --- verifier determinism ----------------------------------------------------------------------


@check(
    "semantic.verifier_determinism",
    level="semantic",
    needs=("episode",),
    after=SEMANTIC_AFTER,
)
async def check_verifier_determinism(subject: Subject) -> Finding:
    """Replaying the same solution (and the same wrong answer) always earns the same reward."""
    runs = (await subject.get(ORACLE_RUNS)).runs
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
                (
                    await subject.driver.play(kwargs, policy, max_steps=oracle_steps(task))
                ).total_reward
            )
            if wrong is not None:
                rewards["wrong"].append(
                    (
                        await subject.driver.play(
                            kwargs, wrong, max_steps=subject.max_steps_for(task)
                        )
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


async def _recorded(subject: Subject) -> list[tuple[Task, Trajectory]]:
    """Clean recorded episodes to replay: oracle runs first, then do-nothing runs."""
    oracle_runs = (await subject.get(ORACLE_RUNS)).runs
    reference = [(run.task, run.first) for run in await subject.get(REFERENCE_RUNS)]
    picked: list[tuple[Task, Trajectory]] = []
    for task, run in oracle_runs[: REPLAY_EPISODES - 1] + reference:
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
    disrupts=True,
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
    recorded = await _recorded(subject)
    if not recorded:
        return skipped("no clean episode was recorded (oracle and do-nothing runs all failed)")
    driver = subject.driver
    restarted = driver.server is not None and subject.env.folder is not None
    hash_seed = None
    if restarted:
        hash_seed = _other_hash_seed()
        driver.stop()
        driver.url = None
        try:
            await driver.launch(env={"PYTHONHASHSEED": hash_seed})
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
        replay = await subject.driver.play(
            run.reset_kwargs, _replaying(actions), max_steps=len(actions)
        )
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


# --- semantic.resource_envelope ---------------------------------------------------------------


@check("semantic.resource_envelope", level="semantic", needs=("episode", "process", "exchanges"))
async def check_resource_envelope(subject: Subject) -> Finding:
    """Measured memory and episode time stay within the declared resources."""
    manifest, driver = subject.env.manifest, subject.driver
    memory = manifest.memory_mb if manifest else None
    timeout = manifest.episode_timeout_s if manifest else None
    if memory is None and timeout is None:
        return skipped("no resources are declared (static.resource_declaration reports it)")
    driver.sample_rss()
    peak = max(driver.rss_samples_mb) if driver.rss_samples_mb else None
    longest = max(driver.episode_durations_s) if driver.episode_durations_s else None
    measured: JsonObject = {
        "peak_rss_mb": round(peak, 1) if peak else None,
        "declared_memory_mb": memory,
        "longest_episode_s": round(longest, 3) if longest else None,
        "declared_episode_timeout_s": timeout,
        "median_episode_s": round(median(driver.episode_durations_s), 4)
        if driver.episode_durations_s
        else None,
    }
    problems = []
    if memory is not None and peak is not None and peak > memory:
        problems.append(f"peak memory {peak:.0f} MiB exceeds the declared {memory:g} MiB")
    if timeout is not None and longest is not None and longest > timeout:
        problems.append(f"an episode took {longest:.1f}s, over the declared {timeout:g}s")
    if problems:
        return failed(
            "; ".join(problems),
            "Declare the resources the env really uses, or make it use less.",
            measured=measured,
        )
    return passed("memory and episode time stay within the declared resources", measured=measured)
