"""Episodes several checks read, each played once per validation (``Product``s of the subject).

The do-nothing reference runs (episode determinism compares them, replayability replays them),
the do-nothing floor (floor gap, canaries, leakage), and the oracle runs (oracle max, leakage,
state containment, verifier determinism, replayability).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from taskhub import Task

from ._driver import Trajectory, median
from ._subject import Product, Subject, noop_policy

#: Steps of the episodes compared by the determinism and isolation checks.
COMPARE_STEPS = 4


@dataclass
class ReferenceRun:
    """One do-nothing episode played twice with the same reset kwargs."""

    task: Task
    first: Trajectory
    second: Trajectory


async def play_reference_runs(subject: Subject) -> list[ReferenceRun]:
    """The first and last task's do-nothing episode, each played twice with the same kwargs."""
    tasks = [subject.tasks[0]] + ([subject.tasks[-1]] if len(subject.tasks) > 1 else [])
    steps = min(COMPARE_STEPS, subject.max_steps_for(tasks[0]))
    runs = []
    for task in tasks:
        kwargs = subject.reset_kwargs(task)
        first = await subject.driver.play(kwargs, noop_policy(subject), max_steps=steps)
        second = await subject.driver.play(kwargs, noop_policy(subject), max_steps=steps)
        runs.append(ReferenceRun(task, first, second))
    return runs


#: Do-nothing episodes played twice (episode determinism compares them; replays reuse them).
REFERENCE_RUNS = Product("reference_runs", play_reference_runs)


@dataclass
class Floor:
    """What doing nothing earns: the median do-nothing episode reward, and the episodes."""

    value: float | None
    runs: list[Trajectory] = field(default_factory=list)


def empty_body_does_nothing(subject: Subject) -> bool:
    """Whether ``{}`` is a second way of doing nothing, beside the do-nothing action.

    So it is when the action schema requires no field and the do-nothing action is not ``{}``
    (a placeholder text was played because the env refused an empty body, or accepted it
    only later): a REPL that fines a placeholder ``noop`` as bad code and runs an empty cell
    for free.
    """
    required = (subject.driver.action_schema or {}).get("required") or []
    return not required and subject.noop_action() != {}


async def measure_floor(subject: Subject) -> Floor:
    """Median do-nothing episode reward over the sampled tasks.

    Where ``{}`` is a second way of doing nothing (``empty_body_does_nothing``), each task's
    floor is the better of the two: doing nothing earns what its cheapest spelling earns.
    """
    runs: list[Trajectory] = []
    totals: list[float] = []
    empty_too = empty_body_does_nothing(subject)
    for task in subject.tasks:
        played = [
            await subject.driver.play(
                subject.reset_kwargs(task, tag="floor"),
                noop_policy(subject),
                max_steps=subject.max_steps_for(task),
            )
        ]
        if empty_too:
            played.append(
                await subject.driver.play(
                    subject.reset_kwargs(task, tag="floor-empty"),
                    lambda _i, _r: {},
                    max_steps=subject.max_steps_for(task),
                )
            )
        runs.extend(played)
        ran = [r.total_reward for r in played if r.error is None]
        if ran:
            totals.append(max(ran))
    return Floor(median(totals) if totals else None, runs)


#: The do-nothing floor.
FLOOR = Product("floor", measure_floor)


def manifest_oracle_tasks(subject: Subject) -> tuple[list[Task], str | None]:
    """Oracle episodes from the manifest's ``capabilities.oracle`` file, and why not if none.

    The file (JSON list or JSON lines) holds ``{"reset": {...}, "actions": [...]}`` or
    ``{"reset": {...}, "answer": ...}`` objects. Script oracles are not executed.
    """
    manifest, folder = subject.env.manifest, subject.env.folder
    oracle = manifest.oracle if manifest else None
    if oracle is None or folder is None:
        return [], None
    location = str(oracle.get("location"))
    path = (folder / location).resolve()
    if not path.is_relative_to(folder.resolve()) or not path.is_file():
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


def oracle_steps(task: Task) -> int:
    return len(task.oracle_actions) if task.oracle_actions else 1


@dataclass
class OracleRuns:
    """The reference solutions as played: where they came from, or why there are none."""

    runs: list[tuple[Task, Trajectory]]
    source: str
    """``taskset`` rows, or the ``manifest``'s data oracle."""
    why_not: str | None = None
    """Why the manifest's oracle could not be used."""


async def play_oracle_runs(subject: Subject) -> OracleRuns:
    """Play each task's reference solution (the taskset's, else the manifest's data oracle)."""
    candidates = [t for t in subject.tasks if subject.oracle_policy(t) is not None]
    source, why_not = "taskset", None
    if not candidates:
        candidates, why_not = manifest_oracle_tasks(subject)
        candidates = candidates[: subject.config.tasks]
        source = "manifest"
    runs: list[tuple[Task, Trajectory]] = []
    for task in candidates:
        policy = subject.oracle_policy(task)
        if policy is None:
            continue
        trajectory = await subject.driver.play(
            subject.reset_kwargs(task, tag="oracle"),
            policy,
            max_steps=oracle_steps(task),
            snapshots=subject.driver.serves_state,
        )
        runs.append((task, trajectory))
    return OracleRuns(runs, source, why_not)


#: The oracle episodes.
ORACLE_RUNS = Product("oracle_runs", play_oracle_runs)
