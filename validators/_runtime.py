"""Runtime checks: startup, the episode contract, resource growth, checks over every exchange.

The episode contract: state, seeds, determinism, isolation, termination, a state that keeps
the answer to itself. The run-wide checks read every exchange of the validation: rewards,
observation schema, latency. The declaration checks compare the tools and tasks openenv.yaml
declares with the ones the env serves.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from taskhub import (
    EnvCapacityError,
    EnvError,
    EnvLaunchError,
    EnvTimeout,
    Task,
    TaskApiUnsupported,
    canonical_json,
)
from taskhub.env import HttpDialect, TaskApiClient, discover_tools, is_tool_env

from ._check import Finding, check, failed, passed, skipped
from ._driver import (
    Trajectory,
    field_diff,
    http_call,
    masked,
    observation_key,
    open_fds,
    percentile,
    process_rss_mb,
)
from ._episodes import COMPARE_STEPS, ORACLE_RUNS, REFERENCE_RUNS
from ._json import JsonObject
from ._protocol import HTTP_EPISODE, WIRE
from ._semantic import SEMANTIC_AFTER, answered, leaking_paths
from ._static import reset_parameters
from ._subject import Product, Subject, noop_policy

# --- runtime.startup ---------------------------------------------------------------------------


def _startup_cause(message: str) -> str:
    """A launch error in one line: what happened, and the last line the server printed.

    ``env server x exited with code 1 before becoming healthy: TypeError: env must be ...``
    """
    head, _, output = message.partition("Its output ends with:")
    first = head.strip().splitlines()[0] if head.strip() else message
    printed = [line.strip() for line in output.splitlines() if line.strip()]
    return f"{first.rstrip('.')}: {printed[-1][:300]}" if printed else first


@check("runtime.startup", level="runtime", provides=("server",))
async def check_startup(subject: Subject) -> Finding:
    """The env starts (a folder is launched locally) and answers HTTP."""
    driver = subject.driver
    if subject.env.folder is not None:
        started = time.perf_counter()
        try:
            server = await driver.launch()
        except (EnvLaunchError, EnvTimeout) as exc:
            return failed(
                f"the server did not start: {_startup_cause(str(exc))}",
                "Make `python -m uvicorn <app> --port P` work from the env folder with the "
                "declared dependencies installed; the log shows the error.",
                measured={"startup_s": round(time.perf_counter() - started, 3)},
                evidence=[str(exc)[-3000:]],
            )
        driver.sample_rss()
        answered = (
            "/health answered"
            if driver.health_path == "/health"
            else f"{driver.health_path} answered (/health answers 404)"
        )
        return passed(
            f"launched {subject.root.name} and {answered} in {time.perf_counter() - started:.2f}s",
            measured={
                "startup_s": round(time.perf_counter() - started, 3),
                "health_path": driver.health_path,
                "pid": server.process.pid,
                "url": server.url,
            },
        )
    reply = await http_call(driver, "/health")
    if reply.status is None:
        # a server without /health still answers something on /
        reply = await http_call(driver, "/")
    if reply.status is None:
        url, driver.url = driver.url, None
        return failed(
            f"{url} does not answer: {reply.error}",
            "Start the server and check the URL.",
            evidence=[reply.evidence()],
        )
    return passed(f"{driver.url} answers HTTP", measured={"status": reply.status})


def first_and_last(subject: Subject) -> list[Task]:
    """The first and the last task; only the first on an env measured slow.

    An env whose resets take longer than a request is given plays one task, so that the
    checks that play both still fit the validation's budget.
    """
    tasks = subject.tasks
    both = len(tasks) > 1 and subject.driver.slowdown <= 1.0
    return [tasks[0], tasks[-1]] if both else [tasks[0]]


# --- runtime.state_contract --------------------------------------------------------------------


@check("runtime.state_contract", level="runtime", needs=("episode",))
async def check_state_contract(subject: Subject) -> Finding:
    """state() names each episode by one id and counts steps from 0.

    The id is the one given to reset() when reset() declares an ``episode_id`` parameter;
    a reset() that does not (OpenEnv drops the key, or ``**kwargs`` swallows it) may name its
    episodes itself, with one id for the whole episode and a fresh one at each reset.
    """
    task = subject.tasks[0]
    kwargs = subject.reset_kwargs(task)
    trajectory = await subject.driver.play(
        kwargs, noop_policy(subject), max_steps=2, snapshots=True
    )
    if trajectory.error is not None:
        state_path = subject.driver.dialect.state_path or "/state"
        return failed(
            f"the episode failed: {trajectory.error}",
            subject.driver.in_transport(
                'Answer state frames with {"type": "state", "data": {episode_id, step_count}}.',
                f"Answer GET {state_path} with the episode in play: "
                '{"episode_id": ..., "step_count": ...}.',
            ),
            evidence=[trajectory.describe()],
        )
    states = list(trajectory.states)
    if trajectory.final_state is not None:
        states.append(trajectory.final_state)
    evidence: list[Any] = [{"episode_id": kwargs["episode_id"], "states": states[:4]}]
    if not states:
        return failed("no state was returned", "Serve state().", evidence=evidence)
    folder = subject.env.folder
    accepted = reset_parameters(folder) if folder is not None else None
    binding = accepted is not None and "episode_id" in accepted
    own = states[0].get("episode_id")
    problems = []
    for index, state in enumerate(states):
        episode_id = state.get("episode_id")
        if binding and episode_id != kwargs["episode_id"]:
            problems.append(
                f"after {index} step(s): episode_id is {episode_id!r}, "
                f"reset asked for {kwargs['episode_id']!r}"
            )
        elif not binding and (not isinstance(episode_id, str) or not episode_id):
            problems.append(f"after {index} step(s): episode_id is {episode_id!r}")
        elif not binding and episode_id != own:
            problems.append(
                f"after {index} step(s): episode_id changed from {own!r} to {episode_id!r}"
            )
        count = state.get("step_count")
        if type(count) is not int or count != index:
            problems.append(f"after {index} step(s): step_count is {count!r}")
    if not binding and not problems:
        # an env naming its own episodes must not give the next one the same name
        again = await subject.driver.play(
            subject.reset_kwargs(task), noop_policy(subject), max_steps=0, snapshots=True
        )
        if again.error is None and again.states:
            evidence[0]["next_episode_state"] = again.states[0]
            if again.states[0].get("episode_id") == own:
                problems.append(f"the next reset kept the episode_id {own!r}")
    measured: JsonObject = {
        "states": len(states),
        "steps": len(trajectory.steps),
        "reset_takes_episode_id": binding,
    }
    if problems:
        return failed(
            f"{len(problems)} state contract violation(s): {problems[0]}",
            "Keep the episode_id passed to reset() in the state (or, when reset() takes "
            "none, one fresh id per episode) and count step_count from 0 at reset, +1 per "
            "step.",
            measured=measured,
            evidence=[*problems[:5], *evidence],
        )
    how = "kept the episode_id" if binding else f"named the episode {own!r} itself"
    return passed(f"state() {how} and counted {len(states) - 1} step(s)", measured=measured)


# --- runtime.http_episode ----------------------------------------------------------------------


@check("runtime.http_episode", level="runtime", needs=("episode",))
async def check_http_episode(subject: Subject) -> Finding:
    """An episode over HTTP keeps its state between requests, and each client its own.

    A server that plays only over HTTP must carry the episode across ``POST /reset`` and
    ``/step`` (not build a fresh env for each: a ``/step`` that answers 500 or never
    advances), and must not let a second client's reset change the first client's episode
    (one global env for every client). A ``/ws`` server's stateless HTTP routes are
    ``protocol.http_stateless``'s finding.
    """
    probe = await subject.get(HTTP_EPISODE)
    if probe.outcome in ("broken", "shared"):
        return failed(
            probe.summary,
            probe.remediation,
            measured=probe.measured,
            evidence=probe.evidence,
        )
    if probe.outcome in ("carries", "isolated"):
        return passed(probe.summary, measured=probe.measured)
    if probe.outcome == "stateless":
        return skipped(
            "the HTTP routes serve a fresh env per request and episodes play over /ws "
            "(protocol.http_stateless reports it)",
            measured=probe.measured,
        )
    return skipped(probe.summary, measured=probe.measured)


# --- runtime.termination, runtime.step_after_done ----------------------------------------------


@check("runtime.termination", level="runtime", needs=("episode",))
async def check_termination(subject: Subject) -> Finding:
    """A do-nothing episode ends by itself (done) within the step and time ceilings.

    A warning in the shipped policies: an env that never ends (OpenEnv's echo env, a REPL)
    still plays, bounded by the client's step limit; training on it without one hangs.
    """
    cap = subject.policy.bounds.max_episode_steps
    timeout = subject.env.manifest.episode_timeout_s if subject.env.manifest else None
    tasks = first_and_last(subject)
    endless: list[Any] = []
    lengths = []
    for task in tasks:
        trajectory = await subject.driver.play(
            subject.reset_kwargs(task), noop_policy(subject), max_steps=cap
        )
        lengths.append(len(trajectory.steps))
        if trajectory.error is not None:
            endless.append({"error": str(trajectory.error)[:300], **trajectory.describe(3)})
        elif not trajectory.done:
            endless.append(trajectory.describe(3))
        elif timeout is not None and trajectory.duration_s > timeout:
            endless.append({"duration_s": trajectory.duration_s, "declared_s": timeout})
    measured: JsonObject = {"steps": lengths, "step_ceiling": cap}
    if endless:
        return failed(
            f"a do-nothing episode did not end within {cap} steps"
            + (f" or {timeout:g}s" if timeout else ""),
            "End every episode: set done=True when the task is solved, failed, or out of "
            "its move budget. An open-ended env (a chat or a REPL that the agent leaves "
            "when it likes) plays, but every client then has to bound its episodes: give it "
            "a step budget (max_steps) and say so in the README.",
            measured=measured,
            evidence=endless[:2],
        )
    return passed(f"do-nothing episodes ended after {lengths} steps", measured=measured)


@check(
    "runtime.step_after_done",
    level="runtime",
    needs=("episode",),
    after=("runtime.termination",),
)
async def check_step_after_done(subject: Subject) -> Finding:
    """A step after the episode ended is refused, not played."""
    task = subject.tasks[0]
    policy = noop_policy(subject)
    cap = subject.policy.bounds.max_episode_steps
    result = None
    try:
        async with subject.driver.episode(subject.reset_kwargs(task)) as (session, last):
            for index in range(cap):
                if last.done:
                    break
                last = await session.step(policy(index, last))
            if not last.done:
                return skipped("the episode did not end (runtime.termination reports it)")
            final = last
            # the reference answer, when there is one: a step after done must not pay
            solution = subject.oracle_actions(task)
            action = solution[0] if solution else policy(0, last)
            try:
                result = await session.step(action)
            except EnvError as exc:
                return passed(f"a step after done was refused: {exc}"[:300])
    except EnvError as exc:
        return failed(f"the episode failed: {exc}", "Episodes must run.")
    evidence = [
        {
            "action": action,
            "observation": result.observation,
            "reward": result.reward,
            "done": result.done,
            "changes_from_the_final_observation": field_diff(final.observation, result.observation),
        }
    ]
    changed = bool(evidence[0]["changes_from_the_final_observation"])
    if not changed and result.done and not result.reward:
        how = "answered like a step (the final observation again, done=True, no reward)"
    else:
        how = f"played on (done={result.done}, reward={result.reward})" + (
            ", with a new observation" if changed else ""
        )
    return failed(
        f"a step after done was accepted and {how} instead of an error",
        subject.driver.in_transport(
            "Refuse step() once the episode is over (raise: it becomes an EXECUTION_ERROR frame)",
            f"Refuse POST {subject.driver.dialect.step_path} once the episode is over (answer "
            "HTTP 4xx)",
        )
        + ": a client that keeps stepping must learn that the episode ended and call reset().",
        evidence=evidence,
    )


# --- runtime.seed_control ----------------------------------------------------------------------


@dataclass
class SeedProbe:
    """Resets of one task: the same seed twice (fresh sessions, then one session), other seeds."""

    task: Task
    seed: int
    episode_id: str
    fresh: list[Trajectory] = field(default_factory=list)
    same_session: list[JsonObject] = field(default_factory=list)
    same_session_error: str | None = None
    others: list[Trajectory] = field(default_factory=list)

    def key(self, observation: dict[str, Any]) -> str:
        """The observation without metadata, the episode id masked."""
        return observation_key(masked(observation, {self.episode_id}))


#: Seconds between the starts of two same-seed resets: a wall-clock time printed to the second
#: (``[2026-12-01 19:39:55] ...``) then always differs, never only when they straddle a tick.
CLOCK_TICK_S = 1.05


async def probe_seeds(subject: Subject) -> list[SeedProbe]:
    """Reset the first and last task (``first_and_last``) with one seed twice, and two others.

    Every reset of one task carries the same episode id, so that an observation that echoes
    it still compares equal; the id is masked as well. The two fresh-session resets start over
    a second apart, so that a clock in the observation is found on every run.
    """
    driver = subject.driver
    tasks = first_and_last(subject)
    probes = []
    for task in tasks:
        seed = task.reset.get("seed")
        base = seed if isinstance(seed, int) and not isinstance(seed, bool) else 1234
        probe = SeedProbe(task, base, driver.episode_id("seed"))

        def kwargs(value: int, probe: SeedProbe = probe) -> JsonObject:
            return {**subject.reset_kwargs(probe.task, seed=value), "episode_id": probe.episode_id}

        started = time.monotonic()
        probe.fresh.append(await driver.play(kwargs(base), lambda i, r: None, max_steps=0))
        # a clock printed to the second in the observation differs only across a second
        await asyncio.sleep(max(0.0, CLOCK_TICK_S - (time.monotonic() - started)))
        probe.fresh.append(await driver.play(kwargs(base), lambda i, r: None, max_steps=0))
        try:
            async with driver.session() as session:
                for _ in range(2):
                    probe.same_session.append((await session.reset(**kwargs(base))).observation)
        except EnvError as exc:
            probe.same_session_error = f"{type(exc).__name__}: {exc}"[:300]
        for value in (base + 1, base + 7919):
            probe.others.append(await driver.play(kwargs(value), lambda i, r: None, max_steps=0))
        probes.append(probe)
    return probes


#: Same-seed and other-seed resets (seed control and seed effect read them).
SEED_PROBES = Product("seed_probes", probe_seeds)


@check("runtime.seed_control", level="runtime", needs=("episode",))
async def check_seed_control(subject: Subject) -> Finding:
    """The same seed gives the same initial observation, in fresh sessions and in one session."""
    probes = await subject.get(SEED_PROBES)
    mismatches: list[Any] = []
    for probe in probes:
        runs = probe.fresh + probe.others
        broken = [r for r in runs if r.error is not None or r.first is None]
        if broken:
            return failed(
                f"reset failed: {broken[0].error}",
                "reset() must accept a seed.",
                evidence=[broken[0].describe()],
            )
        first, second = (r.first.observation for r in probe.fresh if r.first is not None)
        if probe.key(first) != probe.key(second):
            mismatches.append(
                {
                    "seed": probe.seed,
                    "where": "two fresh sessions",
                    "diff": field_diff(first, second, "observation"),
                }
            )
        elif len(probe.same_session) == 2:
            again_a, again_b = probe.same_session
            if probe.key(again_a) != probe.key(again_b):
                mismatches.append(
                    {
                        "seed": probe.seed,
                        "where": "two resets in one session",
                        "diff": field_diff(again_a, again_b, "observation"),
                    }
                )
    measured: JsonObject = {
        "seeds": [p.seed for p in probes],
        "same_seed_mismatches": len(mismatches),
        "same_session": all(len(p.same_session) == 2 for p in probes),
    }
    if mismatches:
        first_mismatch = mismatches[0]
        return failed(
            f"two resets with seed {first_mismatch['seed']} ({first_mismatch['where']}, same "
            f"episode id) gave different initial observations: {first_mismatch['diff'][0]}",
            "Draw every random choice from a generator seeded by reset(seed=...) "
            "(random.Random(seed)), never from global or unseeded randomness, clocks or "
            "per-instance counters; keep timestamps out of observations.",
            measured=measured,
            evidence=mismatches[:2],
        )
    return passed("each seed reproduces its initial observation", measured=measured)


@check("runtime.seed_effect", level="runtime", needs=("episode",), after=("runtime.seed_control",))
async def check_seed_effect(subject: Subject) -> Finding:
    """Different seeds give different starts: the seed reaches the env's randomness.

    With a taskset whose rows differ in more than their seed, the rows select the scenario and
    the seed need not change it; without one, resets differ only by their seed, and a seed
    that changes nothing means one fixed scenario.
    """
    if any(
        {k: v for k, v in t.reset.items() if k != "seed"}
        != {k: v for k, v in subject.tasks[0].reset.items() if k != "seed"}
        for t in subject.tasks
    ):
        return skipped("the taskset's rows select the scenario: the seed need not change it")
    probes = await subject.get(SEED_PROBES)
    distinct = []
    for probe in probes:
        keys = {probe.key(r.first.observation) for r in probe.fresh + probe.others if r.first}
        distinct.append(len(keys))
    measured: JsonObject = {"seeds": [p.seed for p in probes], "distinct_starts": distinct}
    if all(n == 1 for n in distinct):
        seeds = [probes[0].seed, probes[0].seed + 1, probes[0].seed + 7919]
        return failed(
            f"seeds {seeds} all gave the same initial observation: the seed changes nothing",
            "Build the episode from reset(seed=...): draw the scenario from random.Random(seed) "
            "so that seeds select different starts (or say in the README that the env is "
            "deterministic with one fixed scenario).",
            measured=measured,
            evidence=[probes[0].fresh[0].describe(2)],
        )
    return passed("other seeds give other starts", measured=measured)


# --- runtime.episode_determinism ---------------------------------------------------------------


@check("runtime.episode_determinism", level="runtime", needs=("episode",))
async def check_episode_determinism(subject: Subject) -> Finding:
    """The same seed and the same actions give the same trajectory (observations, rewards)."""
    runs = await subject.get(REFERENCE_RUNS)
    tasks = [run.task for run in runs]
    steps = min(COMPARE_STEPS, subject.max_steps_for(tasks[0]))
    mismatches: list[Any] = [
        {"first": run.first.describe(), "second": run.second.describe()}
        for run in runs
        if run.first.signature() != run.second.signature()
    ]
    measured: JsonObject = {"tasks": len(tasks), "steps": steps, "mismatches": len(mismatches)}
    if mismatches:
        return failed(
            f"{len(mismatches)} of {len(tasks)} replays differed from their first run",
            "Make reset(seed) and step() deterministic: seed every generator from the reset "
            "seed, and compute rewards from the state and the action only.",
            measured=measured,
            evidence=mismatches[:2],
        )
    return passed(f"{len(tasks)} episodes replayed identically", measured=measured)


# --- runtime.episode_isolation -----------------------------------------------------------------


@check(
    "runtime.episode_isolation",
    level="runtime",
    needs=("episode",),
    after=("runtime.episode_determinism",),
)
async def check_episode_isolation(subject: Subject) -> Finding:
    """Two interleaved sessions do not affect each other (no shared env state)."""
    tasks = subject.tasks
    task_a, task_b = tasks[0], tasks[1] if len(tasks) > 1 else tasks[0]
    kwargs_a = subject.reset_kwargs(task_a, tag="iso-a")
    seed_b = kwargs_a["seed"] + 1 if task_b is task_a else None
    kwargs_b = subject.reset_kwargs(task_b, seed=seed_b, tag="iso-b")
    steps = min(COMPARE_STEPS - 1, subject.max_steps_for(task_a))
    policy = noop_policy(subject)
    # an env without a state route is compared by its observations alone
    driver = subject.driver
    snapshots = driver.serves_state
    solo_a = await driver.play(kwargs_a, policy, max_steps=steps, snapshots=snapshots)
    solo_b = await driver.play(kwargs_b, policy, max_steps=steps, snapshots=snapshots)
    if solo_a.error or solo_b.error:
        return failed(
            f"a solo episode failed: {solo_a.error or solo_b.error}",
            "Episodes must run.",
            evidence=[solo_a.describe(), solo_b.describe()],
        )
    if observation_key(solo_a.observations[0]) == observation_key(solo_b.observations[0]):
        return skipped(
            "two different tasks gave the same initial observation: "
            "interference would not be visible"
        )
    inter_a = Trajectory(reset_kwargs=kwargs_a)
    inter_b = Trajectory(reset_kwargs=kwargs_b)
    try:
        async with (
            subject.driver.episode(kwargs_a) as (session_a, first_a),
            subject.driver.session() as session_b,
        ):
            inter_a.first = first_a
            try:
                inter_b.first = await session_b.reset(**kwargs_b)
            except EnvCapacityError:
                return skipped("the server serves one session at a time: sessions cannot interfere")
            if snapshots:
                inter_a.states.append(await session_a.state())
                inter_b.states.append(await session_b.state())
            for _ in range(steps):
                for session, trajectory in ((session_a, inter_a), (session_b, inter_b)):
                    last = trajectory.steps[-1][1] if trajectory.steps else trajectory.first
                    if last is None or last.done:
                        continue
                    action = policy(len(trajectory.steps), last)
                    if action is None:
                        continue
                    result = await session.step(action)
                    trajectory.steps.append((action, result))
                    if snapshots and not result.done:
                        trajectory.states.append(await session.state())
    except EnvError as exc:
        return failed(
            f"interleaved sessions broke: {exc}",
            driver.in_transport(
                "Give every WebSocket session its own env instance (create_app's env factory).",
                _own_http_env(driver.dialect),
            ),
            evidence=[inter_a.describe(), inter_b.describe()],
        )
    differ = [
        name
        for name, solo, inter in (("A", solo_a, inter_a), ("B", solo_b, inter_b))
        if solo.signature() != inter.signature()
    ]
    measured: JsonObject = {
        "transport": subject.driver.transport,
        "steps": steps,
        "sessions_affected": differ,
    }
    if differ:
        return failed(
            f"interleaving two sessions changed session {' and '.join(differ)}'s trajectory",
            driver.in_transport(
                "Keep all episode state per session (one Environment instance per WebSocket "
                "session); a module-level env is shared by every client.",
                _own_http_env(driver.dialect) + " A module-level env is shared by every client.",
            ),
            measured=measured,
            evidence=[
                {
                    "solo_a": solo_a.describe(),
                    "interleaved_a": inter_a.describe(),
                    "solo_states_a": solo_a.states[:3],
                    "interleaved_states_a": inter_a.states[:3],
                }
            ],
        )
    return passed("two interleaved sessions reproduced their solo trajectories", measured=measured)


def _own_http_env(dialect: HttpDialect) -> str:
    """How an HTTP-only server gives each client's episode its own env."""
    state = f", {dialect.state_path}" if dialect.state_path else ""
    return (
        f"Give each HTTP client's episode its own env: have {dialect.reset_path} create one "
        f"and return its id, and let {dialect.step_path}{state} act on the env that id names."
    )


# --- runtime.resource_bounds -------------------------------------------------------------------


#: Episodes played before memory and open files are first read.
GROWTH_WARMUP = 5


@check("runtime.resource_bounds", level="runtime", needs=("episode", "process"))
async def check_resource_bounds(subject: Subject) -> Finding:
    """Memory and open files stay flat over many episodes (no per-episode leak)."""
    if subject.driver.server is None:
        return skipped("no local server process")
    pid = subject.driver.server.process.pid
    policy = noop_policy(subject)
    episodes = subject.config.growth_episodes
    tasks = subject.tasks

    async def run(n: int) -> list[Trajectory]:
        return [
            await subject.driver.play(
                subject.reset_kwargs(tasks[i % len(tasks)], tag="growth"), policy, max_steps=3
            )
            for i in range(n)
        ]

    # a slow env warms up on fewer episodes and plays as many as fit in half the check's
    # deadline (at least the warm-up's number), so that the check ends rather than the budget
    limit = subject.config.check_timeout_s * min(max(subject.driver.slowdown, 1.0), 4.0)
    started = time.perf_counter()
    await run(1)
    per_episode = time.perf_counter() - started
    warmup = max(1, min(GROWTH_WARMUP - 1, int(limit / 8 / max(per_episode, 1e-3))))
    await run(warmup)
    fit = int(limit / 2 / max(per_episode, 1e-3))
    episodes = max(GROWTH_WARMUP, min(episodes, fit))
    rss0, fds0 = process_rss_mb(pid), open_fds(pid)
    runs = await run(episodes)
    await asyncio.sleep(0.2)
    rss1, fds1 = process_rss_mb(pid), open_fds(pid)
    failures = [r for r in runs if r.error is not None]
    if rss0 is None or rss1 is None or fds0 is None or fds1 is None:
        return skipped("the server's memory cannot be read (/proc)")
    bounds = subject.policy.bounds
    growth = rss1 - rss0
    per_100 = growth / episodes * 100
    measured: JsonObject = {
        "episodes": episodes,
        "episodes_asked": subject.config.growth_episodes,
        "episode_s": round(per_episode, 3),
        "rss_start_mb": round(rss0, 1),
        "rss_end_mb": round(rss1, 1),
        "growth_mb": round(growth, 2),
        "growth_mb_per_100_episodes": round(per_100, 2),
        "fds_start": fds0,
        "fds_end": fds1,
        "failed_episodes": len(failures),
    }
    problems = []
    if growth > bounds.min_rss_growth_mb and per_100 > bounds.max_rss_growth_mb_per_100_episodes:
        problems.append(
            f"memory grew {growth:.1f} MiB over {episodes} episodes ({per_100:.1f} MiB per 100)"
        )
    if fds1 - fds0 > max(10, episodes // 4):
        problems.append(f"open files grew from {fds0} to {fds1} over {episodes} episodes")
    if failures:
        problems.append(f"{len(failures)} of {episodes} episodes failed: {failures[0].error}")
    if problems:
        return failed(
            "; ".join(problems),
            "Release per-episode resources on reset() and close() (files, buffers, caches "
            "keyed by episode).",
            measured=measured,
            evidence=problems,
        )
    return passed(f"memory grew {growth:.1f} MiB over {episodes} episodes", measured=measured)


# --- run-wide checks ---------------------------------------------------------------------------


@check("runtime.reward_well_formed", level="runtime", needs=("episode", "exchanges"))
async def check_reward_well_formed(subject: Subject) -> Finding:
    """Every reward is a finite number in the declared range; null only before the end.

    OpenEnv allows a null reward: an env with a sparse reward pays nothing until the episode
    ends, and only the step that ends it must carry a number.

    Steps sent after the episode ended, and empty actions where real ones were played, are
    left out: other checks judge them.
    """
    declared = subject.env.declared_range
    problems: list[Any] = []
    rewards: list[float] = []
    exchanges = [
        e
        for e in subject.driver.exchanges
        if e.op in ("reset", "step") and e.error is None and not e.after_done
    ]  # a refusal returned no reward; a step after done is runtime.step_after_done's
    # an empty action is no action (protocol.malformed_input judges whether it is refused):
    # where real actions were played, what an empty one pays says nothing of the reward
    played = any(e.op == "step" and e.request for e in exchanges)
    excluded = pending = 0
    for exchange in exchanges:
        if played and exchange.op == "step" and not exchange.request:
            excluded += 1
            continue
        reply = exchange.reply or {}
        reward = reply.get("reward")
        if reward is None:
            if exchange.op == "step" and reply.get("done") is True:
                problems.append(
                    {"problem": "an episode ended with a null reward", **exchange.evidence()}
                )
            elif exchange.op == "step":
                pending += 1  # a sparse reward: null until the episode's end pays
            continue
        if not isinstance(reward, int | float) or not math.isfinite(reward):
            problems.append({"problem": f"reward {reward!r}", **exchange.evidence()})
            continue
        rewards.append(float(reward))
        if declared is not None and not declared[0] <= reward <= declared[1]:
            problems.append(
                {
                    "problem": f"reward {reward} outside the declared range {list(declared)}",
                    **exchange.evidence(),
                }
            )
    measured: JsonObject = {
        "rewards": len(rewards),
        "min": min(rewards) if rewards else None,
        "max": max(rewards) if rewards else None,
        "declared_range": list(declared) if declared else None,
        "problems": len(problems),
        "empty_actions_left_out": excluded,
        "null_before_the_end": pending,
    }
    if problems:
        first = problems[0]
        what = first.get("problem") or first.get("error") if isinstance(first, dict) else first
        return failed(
            f"{len(problems)} ill-formed reward(s): {what}",
            "Return a finite number in the declared reward range (null only before the "
            "episode ends), or declare the range the step rewards really take.",
            measured=measured,
            evidence=problems[:5],
        )
    if not rewards and pending:
        return skipped(
            f"{pending} step rewards were null and no played episode ended: a sparse reward "
            "pays at the end, which no episode of the validation reached",
            measured=measured,
            remediation="Give a taskset with answers or oracle_actions, so that an episode "
            "ends and its reward is read.",
        )
    if not rewards:
        return failed(
            "no step returned a reward", "Return a reward from step().", measured=measured
        )
    suffix = f" within {list(declared)}" if declared else " (no range declared)"
    return passed(f"{len(rewards)} rewards are finite numbers{suffix}", measured=measured)


#: JSON size of the observations runtime.observation_schema validates, at most (about).
SCHEMA_SAMPLE_BYTES = 1_000_000
#: Below this JSON size, observations that take over the deadline to validate point to a
#: pathological schema (a catastrophic pattern); above it, to their own size.
SCHEMA_SMALL_BYTES = 100_000

# Runs in a throwaway interpreter: a hostile schema (catastrophic regex, deep recursion) can
# only burn that process, under a wall-clock deadline.
_SCHEMA_WORKER = r"""
import json, sys
from jsonschema.validators import validator_for
job = json.load(sys.stdin)
out = []
validators = {}
for name, schema in job["schemas"].items():
    if schema is None:
        continue
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except Exception as exc:
        out.append({"schema": name, "problem": "invalid schema: " + str(exc)[:300]})
        continue
    validators[name] = cls(schema)
for index, (name, observation) in enumerate(job["items"]):
    validator = validators.get(name)
    if validator is None:
        continue
    for error in validator.iter_errors(observation):
        path = "/".join(str(p) for p in error.absolute_path) or "(root)"
        out.append({"observation": index, "schema": name, "path": path,
                    "problem": error.message[:300]})
        break
    if len(out) >= 20:
        break
print(json.dumps(out))
"""


@check(
    "runtime.observation_schema",
    level="runtime",
    needs=("episode", "exchanges"),
    after=("protocol.schema",),
)
async def check_observation_schema(subject: Subject) -> Finding:
    """Every observation matches the observation schema the server advertises."""
    if subject.driver.observation_schema is None:
        return skipped("the server advertises no observation schema")
    items: list[tuple[str, Any]] = []
    seen: set[str] = set()
    size = 0
    for exchange in subject.driver.exchanges:
        if exchange.op not in ("reset", "step") or exchange.reply is None:
            continue
        observation = exchange.reply.get("observation")
        key = exchange.op + canonical_json(observation)
        if key in seen:
            continue
        seen.add(key)
        items.append(
            ("reset_observation" if exchange.op == "reset" else "observation", observation)
        )
        size += len(key)
        # big observations (screens as pixel lists) are sampled: the deadline below is for
        # pathological schemas, not for the sheer size of what an env sends
        if len(items) >= 300 or (size > SCHEMA_SAMPLE_BYTES and len(items) >= 2):
            break
    job = {
        "schemas": {
            "observation": subject.driver.observation_schema,
            "reset_observation": subject.driver.reset_observation_schema,
        },
        "items": items,
    }
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            _SCHEMA_WORKER,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        async with asyncio.timeout(20):
            stdout, stderr = await process.communicate(json.dumps(job).encode())
    except TimeoutError:
        process.kill()
        await process.wait()
        if size > SCHEMA_SMALL_BYTES:
            return skipped(
                f"validating {len(items)} observations ({size // 1000} kB of JSON) against "
                "the schema took over 20s: they are too big to check within the deadline",
                measured={"observations": len(items), "json_bytes": size},
            )
        return failed(
            "validating observations against the schema took over 20s",
            "Simplify the observation schema (no pathological patterns).",
        )
    if process.returncode != 0:
        return failed(
            "the observation schema could not be evaluated",
            "Publish a valid JSON schema for the observation.",
            evidence=[stderr.decode(errors="replace")[-800:]],
        )
    problems = json.loads(stdout)
    measured: JsonObject = {"observations": len(items), "violations": len(problems)}
    if problems:
        first = problems[0]
        evidence = [
            {**p, "observation_value": items[p["observation"]][1]} if "observation" in p else p
            for p in problems[:5]
        ]
        return failed(
            f"{len(problems)} observation(s) break the advertised schema: "
            f"{first.get('path', '')}: {first['problem']}",
            "Make the observations match /schema (send what the Observation model declares).",
            measured=measured,
            evidence=evidence,
        )
    return passed(
        f"{len(items)} distinct observations match the advertised schema", measured=measured
    )


@check("runtime.step_latency", level="runtime", needs=("episode", "exchanges"))
async def check_step_latency(subject: Subject) -> Finding:
    """Step latency p50/p99 over every step of the validation stays under the policy bound."""
    steps = subject.driver.latencies("step")
    resets = subject.driver.latencies("reset")
    if not steps:
        return skipped("no step was measured")
    p50, p99 = percentile(steps, 0.5), percentile(steps, 0.99)
    bound = subject.policy.bounds.max_step_latency_p99_s
    measured: JsonObject = {
        "steps": len(steps),
        "step_p50_ms": round(p50 * 1000, 2),
        "step_p99_ms": round(p99 * 1000, 2),
        "reset_p50_ms": round(percentile(resets, 0.5) * 1000, 2) if resets else None,
        "reset_p99_ms": round(percentile(resets, 0.99) * 1000, 2) if resets else None,
        "bound_p99_ms": bound * 1000,
    }
    if p99 > bound:
        return failed(
            f"step latency p99 is {p99:.2f}s (bound {bound:g}s)",
            "Make step() fast, or move slow work out of the request path.",
            measured=measured,
        )
    return passed(
        f"step latency p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms over {len(steps)} steps",
        measured=measured,
    )


# --- runtime.oracle_containment ---------------------------------------------------------------


@check(
    "runtime.oracle_containment",
    level="runtime",
    needs=("episode",),
    after=SEMANTIC_AFTER,
)
async def check_oracle_containment(subject: Subject) -> Finding:
    """state(), which any client can call, does not reveal the answer before it is given."""
    runs = (await subject.get(ORACLE_RUNS)).runs
    if not answered(subject) or not runs:
        return skipped("no oracle episode with an answer ran")
    if not subject.driver.serves_state:
        return skipped("the env has no state route: no client can read an answer from state()")
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


# --- runtime.tool_declaration_accuracy, runtime.task_declaration_accuracy ---------------------


@check(
    "runtime.tool_declaration_accuracy",
    level="runtime",
    needs=("server",),
    uses=("protocol.schema", "protocol.websocket"),
)
async def check_tool_declaration_accuracy(subject: Subject) -> Finding:
    """The tools openenv.yaml declares are exactly the tools the env lists."""
    manifest = subject.env.manifest
    declared = manifest.declared_tools if manifest is not None else None
    await subject.get(WIRE)
    driver = subject.driver
    takes_calls = is_tool_env(driver.action_schema)
    if declared is None:
        if takes_calls:
            return skipped(
                "the env takes tool calls but openenv.yaml declares no tools",
                remediation="Declare validation.capabilities.declared_tools: [NAME, ...] so "
                "that the tools the env serves are checked against what it promises.",
            )
        return skipped("openenv.yaml declares no tools (validation.capabilities.declared_tools)")
    assert driver.url is not None
    config = driver.config
    try:
        tools, via = await discover_tools(
            driver.http,
            driver.url,
            driver.transport or "ws",
            timeout=config.op_timeout_s,
            max_frame_bytes=config.max_frame_bytes,
        )
    except EnvError as exc:
        return failed(
            f"openenv.yaml declares {len(declared)} tool(s) but the env lists none: {exc}",
            "Serve the declared tools (an MCPEnvironment lists them for a list_tools action and "
            "over POST /mcp), or remove validation.capabilities.declared_tools.",
            measured={"declared": list(declared), "takes_tool_calls": takes_calls},
            evidence=[str(exc)[:1000]],
        )
    served = [tool.name for tool in tools]
    missing = [name for name in declared if name not in served]
    undeclared = [name for name in served if name not in declared]
    measured: JsonObject = {
        "declared": list(declared),
        "served": served,
        "discovery": via,
        "missing": missing,
        "undeclared": undeclared,
    }
    if missing or undeclared:
        parts = []
        if missing:
            parts.append(f"declared but not served: {', '.join(missing)}")
        if undeclared:
            parts.append(f"served but not declared: {', '.join(undeclared)}")
        return failed(
            f"the declared tools differ from the listed ones ({'; '.join(parts)})",
            "Make validation.capabilities.declared_tools list exactly the tools the env serves.",
            measured=measured,
            evidence=[{"declared": list(declared), "listed": served}],
        )
    return passed(
        f"the {len(served)} declared tool(s) are the ones the env lists ({via})", measured=measured
    )


@check(
    "runtime.task_declaration_accuracy",
    level="runtime",
    needs=("server",),
    uses=("protocol.schema", "protocol.websocket"),
)
async def check_task_declaration_accuracy(subject: Subject) -> Finding:
    """The Task API and task counts openenv.yaml declares are what the env serves.

    Every split's count must match ``declared_task_count``; its first and last tasks must be
    served, and a task must start with ``reset(split=..., index=...)``.
    """
    manifest = subject.env.manifest
    counts = manifest.declared_task_count if manifest is not None else None
    if manifest is None or not (manifest.task_api or counts):
        return skipped(
            "openenv.yaml declares no Task API (validation.capabilities.task_api, "
            "declared_task_count)"
        )
    await subject.get(WIRE)
    driver = subject.driver
    assert driver.url is not None
    config = driver.config
    api = TaskApiClient(
        driver.url,
        http=driver.http,
        timeout=config.op_timeout_s,
        max_bytes=config.max_frame_bytes,
    )
    remediation = (
        "Implement OpenEnv's TaskProvider methods (list_splits, num_tasks, get_task, "
        "get_task_range) on the environment, and make declared_task_count say what they serve."
    )
    try:
        splits = [split.name for split in await api.splits()]
        served = {name: await api.num_tasks(name) for name in splits}
    except TaskApiUnsupported as exc:
        return failed(
            f"openenv.yaml declares the Task API but the env does not serve it: {exc}",
            remediation,
            evidence=[str(exc)[:1000]],
        )
    except EnvError as exc:
        return failed(f"the Task API failed: {exc}", remediation, evidence=[str(exc)[:1000]])
    problems: list[str] = []
    for name, count in (counts or {}).items():
        if name not in served:
            problems.append(f"split {name!r} is declared ({count} tasks) but not served")
        elif served[name] != count:
            problems.append(f"split {name!r} declares {count} tasks, serves {served[name]}")
    if counts:
        problems += [f"split {n!r} is served but not declared" for n in served if n not in counts]
    for name, count in served.items():
        for index in sorted({0, count - 1}) if count else []:
            try:
                await api.task(name, index)
            except EnvError as exc:
                problems.append(f"task {index} of split {name!r} is not served: {exc}")
    started = await _starts_by_index(subject, served)
    if started is not None:
        problems.append(started)
    measured: JsonObject = {"declared": dict(counts or {}), "served": dict(served)}
    if problems:
        return failed(
            f"{len(problems)} declaration problem(s): {problems[0]}",
            remediation,
            measured=measured,
            evidence=problems[:10],
        )
    return passed(
        f"{len(served)} split(s) serve the declared task counts "
        f"({', '.join(f'{n}: {c}' for n, c in served.items())})",
        measured=measured,
    )


async def _starts_by_index(subject: Subject, served: dict[str, int]) -> str | None:
    """Why ``reset(split=, index=)`` does not start a served task, or None when it does."""
    split = next((name for name, count in served.items() if count), None)
    if split is None or subject.driver.transport is None:
        return None
    trajectory = await subject.driver.play(
        {"split": split, "index": 0, "seed": 1}, lambda i, r: None, max_steps=0
    )
    if trajectory.error is not None or trajectory.first is None:
        return f"reset(split={split!r}, index=0) failed: {trajectory.error}"
    return None
