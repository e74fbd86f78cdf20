"""Session reuse: sound sessions are parked, failed ones closed, and records do not change."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import taskhub.env._launch as launch
from taskhub import (
    AgentFormatError,
    EnvExecutionError,
    EnvInfo,
    EnvTimeout,
    EvalConfig,
    evaluate,
    read_results,
)
from taskhub.env import EnvClient, LocalServer, SessionPool, builtin_envs, launch_server
from tests.servers import FakeEnv, counting_step, error, observation
from tests.taskhub.test_runner import _healthy, stable, write_taskset

pytestmark = pytest.mark.anyio


def _pool(env_url: str, http: httpx.AsyncClient, **kwargs: object) -> SessionPool:
    info = EnvInfo(spec=env_url, kind="url", urls=[env_url], transport="ws")
    options: dict = {"limit": None, "timeout": 2.0, "max_frame_bytes": 1 << 20, **kwargs}
    return SessionPool(info, http=http, **options)


async def _wait_for(condition, timeout: float = 20.0) -> bool:
    """Poll ``condition`` until it holds (the server sees a close a moment after it is sent)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def _play(pool: SessionPool, seed: int) -> bool:
    """One 'say N' episode; returns whether it ran on a reused session."""
    async with pool.session() as pooled:
        first = await pooled.session.reset(seed=seed)
        assert first.observation["question"] == f"say {seed}"
        assert (await pooled.session.step({"answer": str(seed)})).reward == 1.0
        return pooled.reused


async def test_a_sound_session_serves_the_next_episode() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http) as pool:
            assert [await _play(pool, seed) for seed in range(5)] == [
                False,
                True,
                True,
                True,
                True,
            ]
            assert env.sessions_opened == 1 and pool.idle_sessions == 1
        # closing the pool closes the parked session
        assert await _wait_for(lambda: env.active == 0)
        assert env.frames[-1] == {"type": "close"}


async def test_without_reuse_every_episode_opens_a_session() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http, reuse=False) as pool:
            assert [await _play(pool, seed) for seed in range(3)] == [False, False, False]
            assert env.sessions_opened == 3 and pool.idle_sessions == 0


@pytest.mark.parametrize(
    ("failure", "reused_after"),
    [
        (EnvExecutionError("step failed: EXECUTION_ERROR: boom"), False),
        (EnvTimeout("step: no reply"), False),
        (RuntimeError("a bug in the caller"), False),
        (asyncio.CancelledError(), False),
        (AgentFormatError("reply is empty", reply=""), True),
    ],
    ids=["env-error", "timeout", "exception", "cancelled", "agent-error"],
)
async def test_only_a_session_whose_env_side_went_well_is_parked(
    failure: BaseException, reused_after: bool
) -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http) as pool:
            with pytest.raises(type(failure)):
                async with pool.session() as pooled:
                    await pooled.session.reset(seed=1)
                    raise failure
            assert await _play(pool, 2) is reused_after
            assert env.sessions_opened == (1 if reused_after else 2)


async def test_an_env_error_frame_ends_the_session() -> None:
    def step(session, data):
        return (
            error("EXECUTION_ERROR", "boom") if session.target == 1 else observation({}, 1.0, True)
        )

    with FakeEnv(on_step=step) as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http) as pool:
            with pytest.raises(EnvExecutionError):
                async with pool.session() as pooled:
                    await pooled.session.reset(seed=1)
                    await pooled.session.step({"answer": "1"})
            assert await _play(pool, 2) is False
            assert await _play(pool, 3) is True
            assert env.sessions_opened == 2


async def test_a_session_the_server_closed_while_parked_is_not_handed_out() -> None:
    def step(session, data):
        session.close_after_reply = True
        return observation({}, 1.0, True)

    with FakeEnv(on_step=step) as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http) as pool:
            await _play(pool, 1)
            assert await _wait_for(lambda: env.active == 0)
            await asyncio.sleep(0.1)  # the close frame reaches the client
            assert await _play(pool, 2) is False
            assert env.sessions_opened == 2


async def test_the_session_that_sent_a_reset_ahead_goes_to_its_episode() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http) as pool:
            # two sessions in play at once, then parked: `ahead` first, `plain` last
            async with pool.session() as one, pool.session() as two:
                ahead, plain = one.session, two.session
                for pooled, seed in ((one, 1), (two, 2)):
                    await pooled.session.reset(seed=seed)
                await ahead.step({"answer": "1"}, then_reset={"seed": 7})
                await plain.step({"answer": "2"})
            assert isinstance(ahead, EnvClient) and ahead.reset_ahead == {"seed": 7}
            # another episode takes the session without a reset sent for someone else
            async with pool.session() as other:
                assert other.session is plain
            # freeing sessions, the pool keeps the one an episode is waiting for
            pool.close_idle(keep=1)
            assert pool.idle_sessions == 1
            assert await _wait_for(lambda: not plain.is_open)  # closed in the background
            async with pool.session(prefer=ahead) as mine:
                assert mine.session is ahead and mine.reused
                assert (await ahead.reset(seed=7)).observation["question"] == "say 7"
            assert env.sessions_opened == 2


async def test_a_session_that_sent_an_episodes_reset_goes_to_that_episode() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http) as pool:
            sessions = [EnvClient(env.url, max_frame_bytes=1 << 20) for _ in range(3)]
            for seed, session in enumerate(sessions):  # opened before the run, each reset
                await session.send_reset(seed=seed)
                assert await pool.adopt(session)
            for seed in (1, 0, 2):  # whatever order the episodes start in
                async with pool.session(reset={"seed": seed}) as pooled:
                    assert pooled.session is sessions[seed]
                    assert (await pooled.session.reset(seed=seed)).observation["question"] == (
                        f"say {seed}"
                    )
            assert env.sessions_opened == 3 and len(_resets_of(env)) == 3


def _resets_of(env: FakeEnv) -> list[dict]:
    return [frame["data"] for frame in env.frames if frame["type"] == "reset"]


async def test_parked_sessions_expire_and_free_the_server() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http, idle_timeout=0.2) as pool:
            await _play(pool, 1)
            assert await _wait_for(lambda: pool.idle_sessions == 0 and env.active == 0)
            assert await _play(pool, 2) is False


async def test_a_capacity_one_server_is_shared_by_one_parked_session() -> None:
    """Sessions are parked per server and never beyond its learnt capacity."""
    with FakeEnv(capacity=1) as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http) as pool:
            results = await asyncio.gather(*(_retry_capacity(pool, s) for s in range(8)))
            assert all(results) and env.max_active == 1
            assert pool.idle_sessions == 1
        assert await _wait_for(lambda: env.active == 0)


async def _retry_capacity(pool: SessionPool, seed: int) -> bool:
    from taskhub import EnvCapacityError

    for _ in range(400):
        try:
            await _play(pool, seed)
            return True
        except EnvCapacityError:
            await asyncio.sleep(0.02)
    return False


async def test_a_closed_pool_hands_out_nothing() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http:
            pool = _pool(env.url, http)
            await pool.aclose()
            with pytest.raises(RuntimeError, match="closed"):
                async with pool.session():
                    pass


async def test_an_adopted_session_serves_the_next_episode() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http) as pool:
            client = EnvClient(env.url, max_frame_bytes=1 << 20)
            await client.reset(seed=7)
            assert await pool.adopt(client) and pool.idle_sessions == 1
            assert client.timeout == 2.0  # the pool's deadline, not the opener's
            assert [await _play(pool, seed) for seed in range(2)] == [True, True]
            assert env.sessions_opened == 1


@pytest.mark.parametrize(
    ("options", "frame_limit"),
    [
        ({"reuse": False}, 1 << 20),  # --fresh-session: never played on
        ({}, 1 << 21),  # another frame limit than the pool's sessions get
        ({"limit": 1}, 1 << 20),  # no room: the pool's own session holds the one slot
    ],
    ids=["no-reuse", "frame-limit", "no-room"],
)
async def test_a_session_the_pool_would_not_park_is_closed_not_adopted(
    options: dict, frame_limit: int
) -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http, **options) as pool:
            if "limit" in options:
                async with pool.session() as pooled:
                    await pooled.session.reset(seed=1)
                    client = EnvClient(env.url, max_frame_bytes=frame_limit)
                    await client.reset(seed=7)
                    assert not await pool.adopt(client)
            else:
                client = EnvClient(env.url, max_frame_bytes=frame_limit)
                await client.reset(seed=7)
                assert not await pool.adopt(client)
            assert not client.is_open and pool.idle_sessions == (1 if "limit" in options else 0)
        assert not await pool.adopt(None)


async def test_close_idle_keeps_the_most_recently_parked() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http, _pool(env.url, http) as pool:
            leases = [pool.session() for _ in range(3)]
            sessions = [await lease.__aenter__() for lease in leases]
            for pooled in sessions:
                await pooled.session.reset(seed=1)
            for lease in leases:  # parked oldest first
                await lease.__aexit__(None, None, None)
            pool.close_idle(keep=1)
            assert pool.idle_sessions == 1
            assert await _wait_for(lambda: env.active == 1)
            async with pool.session() as pooled:  # the one kept: the last parked
                assert pooled.session is sessions[-1].session and pooled.reused


# --- the runner -------------------------------------------------------------------------------


def test_the_runner_reuses_sessions_and_closes_them_at_the_end(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 12)
    with FakeEnv() as env:
        result = evaluate(
            EvalConfig(model="scripted/oracle", taskset=str(taskset), env=env.url, concurrency=3),
            output_dir=tmp_path / "reuse",
        )
        assert result.summary.mean_reward == 1.0
        # the transport probe's session is one of the three: it plays episodes too
        assert env.sessions_opened <= 3
        assert asyncio.run(_wait_for(lambda: env.active == 0))
        opened = env.sessions_opened
        evaluate(
            EvalConfig(
                model="scripted/oracle",
                taskset=str(taskset),
                env=env.url,
                concurrency=3,
                fresh_session=True,
            ),
            output_dir=tmp_path / "fresh",
        )
        assert env.sessions_opened - opened == 12 + 1  # the probe's is closed, not played on


def test_an_episode_that_ended_in_an_env_error_does_not_pass_its_session_on(
    tmp_path: Path,
) -> None:
    taskset = write_taskset(tmp_path / "ts", 4)

    def step(session, data):
        return (
            error("EXECUTION_ERROR", "boom") if session.target == 1 else observation({}, 1.0, True)
        )

    with FakeEnv(on_step=step) as env:
        result = evaluate(
            EvalConfig(
                model="scripted/oracle",
                taskset=str(taskset),
                env=env.url,
                concurrency=1,
                max_retries=0,
            ),
            output_dir=tmp_path,
        )
        # t000 + t001 on the probe's session; t001 fails and closes it; t002 + t003 on a new one
        assert env.sessions_opened == 2
    outcomes = {r.task_id: r.outcome for r in read_results(result.run_dir)}
    assert outcomes == {"t000": "scored", "t001": "infra_error", "t002": "scored", "t003": "scored"}


@pytest.mark.parametrize("max_steps", [None, 1], ids=["reset-after", "reset-sent-ahead"])
def test_a_server_that_closes_every_session_costs_no_attempts(
    tmp_path: Path, max_steps: int | None
) -> None:
    taskset = write_taskset(tmp_path / "ts", 6)

    def step(session, data):
        session.close_after_reply = True
        return observation({}, 1.0, True)

    with FakeEnv(on_step=step) as env:
        result = evaluate(
            EvalConfig(
                model="scripted/oracle",
                taskset=str(taskset),
                env=env.url,
                concurrency=2,
                max_steps=max_steps,
            ),
            output_dir=tmp_path,
        )
    records = read_results(result.run_dir)
    assert len(records) == 6
    assert all(r.outcome == "scored" and r.attempts == 1 for r in records), [
        (r.outcome, r.attempts, r.error) for r in records
    ]


@pytest.fixture(scope="module", params=["arith", "gridworld"])
def reference_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, LocalServer]]:
    name = request.param
    server = launch_server(
        builtin_envs()[name], max_sessions=8, log_dir=tmp_path_factory.mktemp("env-logs")
    )
    try:
        asyncio.run(_healthy(server))
        yield name, server
    finally:
        server.stop()


@pytest.mark.parametrize("max_steps", [6, 1], ids=["ends-by-done", "last-step-known"])
def test_records_are_the_same_with_and_without_reuse(
    reference_server: tuple[str, LocalServer], tmp_path: Path, max_steps: int
) -> None:
    """With ``max_steps=1`` every step is known to be its episode's last: with reuse, it
    carries the next episode's reset."""
    name, server = reference_server
    records = {}
    for fresh in (False, True):
        config = EvalConfig(
            model="scripted/random",
            taskset=name,
            env=server.url,
            limit=8,
            samples=2,
            concurrency=3,
            seed=5,
            max_steps=max_steps,
            fresh_session=fresh,
        )
        result = evaluate(config, output_dir=tmp_path / str(fresh))
        records[fresh] = sorted(read_results(result.run_dir), key=lambda r: r.key())
    assert len(records[False]) == 16
    assert [stable(r) for r in records[False]] == [stable(r) for r in records[True]]
    assert (
        len(
            {
                r.steps[0].action["move" if name == "gridworld" else "answer"]
                for r in records[False]
                if r.steps
            }
        )
        > 1
    )


async def test_a_reference_env_session_is_reset_again(
    reference_server: tuple[str, LocalServer],
) -> None:
    name, server = reference_server
    async with httpx.AsyncClient() as http, _pool(server.url, http, timeout=30.0) as pool:
        firsts = []
        sessions = []
        for _ in range(3):
            async with pool.session() as pooled:
                assert isinstance(pooled.session, EnvClient)
                sessions.append(pooled.session)
                firsts.append((await pooled.session.reset(seed=3)).observation)
                assert (await pooled.session.state())["step_count"] == 0
        assert sessions[0] is sessions[1] is sessions[2]
        assert firsts[0] == firsts[1] == firsts[2]


@pytest.fixture
def read_ahead(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each ``EnvClient.reset`` found its reply sent ahead, in order."""
    seen: list[bool] = []
    reset = EnvClient.reset

    async def watched_reset(self: EnvClient, **kwargs: object) -> object:
        seen.append(self.reset_ahead == kwargs)
        return await reset(self, **kwargs)

    monkeypatch.setattr(EnvClient, "reset", watched_reset)
    return seen


def test_an_episode_whose_last_step_is_known_sends_the_next_reset_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_ahead: list[bool]
) -> None:
    taskset = write_taskset(tmp_path / "ts", 12)
    # the first sessions open as the episodes start, not beside the probe (a loaded machine
    # can make a loopback probe slow)
    monkeypatch.setattr(launch, "SLOW_PROBE_S", 60.0)
    with FakeEnv() as env:
        result = evaluate(
            EvalConfig(
                model="scripted/oracle",
                taskset=str(taskset),
                env=env.url,
                concurrency=3,
                max_steps=1,
            ),
            output_dir=tmp_path / "run",
        )
        resets = [frame["data"].get("seed") for frame in env.frames if frame["type"] == "reset"]
    records = read_results(result.run_dir)
    # each episode began on its own task's observation, and got its reply once
    assert all(
        r.initial_observation["question"] == f"say {r.reset_payload['seed']}" for r in records
    )
    assert all(r.outcome == "scored" and r.reward == 1.0 for r in records)
    assert resets[0] is None and sorted(resets[1:]) == list(range(12))  # the probe's, then one each
    # the probe's reset and each worker's first were sent alone; the other 9 went ahead
    assert read_ahead.count(True) == 9 and len(read_ahead) == 13


def test_a_slow_to_open_env_gets_its_first_sessions_and_resets_while_it_is_probed(
    tmp_path: Path, read_ahead: list[bool]
) -> None:
    taskset = write_taskset(tmp_path / "ts", 8)
    records = {}
    with FakeEnv(open_delay=0.2) as env:
        for fresh in (False, True):
            config = EvalConfig(
                model="scripted/oracle",
                taskset=str(taskset),
                env=env.url,
                concurrency=4,
                fresh_session=fresh,
            )
            result = evaluate(config, output_dir=tmp_path / str(fresh))
            records[fresh] = sorted(read_results(result.run_dir), key=lambda r: r.key())
            if not fresh:
                assert env.sessions_opened == 4  # the probe's and 3 beside it, all played on
                # the probe's reset, then the 4 workers' first episodes read what was sent
                assert read_ahead[1:5] == [True] * 4 and read_ahead.count(True) == 4
    assert [stable(r) for r in records[False]] == [stable(r) for r in records[True]]
    assert all(r.outcome == "scored" and r.attempts == 1 for r in records[False])


def test_a_run_frees_the_sessions_its_last_episodes_do_not_need(tmp_path: Path) -> None:
    """Workers with nothing left to start close their sessions while a slow episode plays."""
    taskset = write_taskset(tmp_path / "ts", 3)
    active_at_the_end: list[int] = []

    async def slow_last_step(session, data):
        if session.target == 0:  # t000: its answer comes long after the others are done
            await asyncio.sleep(1.0)
            active_at_the_end.append(session.env.active)
        return counting_step(session, data)

    with FakeEnv(on_step=slow_last_step) as env:
        result = evaluate(
            EvalConfig(model="scripted/oracle", taskset=str(taskset), env=env.url, concurrency=3),
            output_dir=tmp_path / "run",
        )
        assert result.summary.mean_reward == 1.0
        assert env.sessions_opened == 3
    assert active_at_the_end == [1]  # the other two were closed, not parked until the end
