"""The OpenEnv client against scriptable servers on loopback: dialects, errors, limits."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

import taskhub.env._launch as launch
from taskhub import (
    EnvCapacityError,
    EnvClosedError,
    EnvConnectError,
    EnvExecutionError,
    EnvProtocolError,
    EnvTimeout,
)
from taskhub.env import (
    EnvClient,
    EnvHandle,
    HttpEnvSession,
    launch_server,
    probe_transport,
    space_url,
    split_base_url,
    wait_healthy,
)
from tests.servers import (
    CLOSE,
    FakeEnv,
    counting_reset,
    counting_step,
    error,
    free_port,
    observation,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("dialect", ["0.3", "0.10"])
async def test_episode_in_both_dialects(dialect: str) -> None:
    with FakeEnv(dialect=dialect) as env:
        async with EnvClient(env.url) as client:
            first = await client.reset(seed=7, episode_id="ep-1")
            assert first.observation["question"] == "say 7"
            assert first.reward is None and first.done is False
            assert (first.metadata is None) == (dialect == "0.3")
            result = await client.step({"answer": "7"})
            assert result.reward == 1.0 and result.done is True
            state = await client.state()
            assert state == {"episode_id": "ep-1", "step_count": 1}
        # the client sent exactly the protocol frames, action unwrapped
        assert env.frames[0] == {"type": "reset", "data": {"seed": 7, "episode_id": "ep-1"}}
        assert env.frames[1] == {"type": "step", "data": {"answer": "7"}}
        assert env.frames[-1] == {"type": "close"}


@pytest.mark.parametrize(
    ("reward", "expected"), [(None, None), (True, 1.0), (3, 3.0), (0.25, 0.25)]
)
async def test_reward_may_be_null_bool_int_or_float(reward: object, expected: float | None) -> None:
    with FakeEnv(on_step=lambda s, d: observation({}, reward, True)) as env:
        async with EnvClient(env.url) as client:
            await client.reset()
            assert (await client.step({"answer": "x"})).reward == expected


@pytest.mark.parametrize(
    ("code", "exc_type", "session_usable"),
    [
        ("VALIDATION_ERROR", EnvProtocolError, True),
        ("EXECUTION_ERROR", EnvExecutionError, True),
        ("UNKNOWN_TYPE", EnvProtocolError, True),
        ("SESSION_ERROR", EnvClosedError, False),
        ("FACTORY_ERROR", EnvClosedError, False),
    ],
)
async def test_error_frames_map_to_typed_errors(
    code: str, exc_type: type[Exception], session_usable: bool
) -> None:
    calls = {"n": 0}

    def step(session, data):
        calls["n"] += 1
        return error(code, "it broke") if calls["n"] == 1 else observation({}, 1.0, True)

    with FakeEnv(on_step=step) as env:
        async with EnvClient(env.url) as client:
            await client.reset()
            with pytest.raises(exc_type, match=re.escape(f"step failed: {code}: it broke")) as info:
                await client.step({"answer": "1"})
            assert info.value.code == code
            if session_usable:
                assert (await client.step({"answer": "1"})).reward == 1.0
            else:
                with pytest.raises(EnvClosedError, match="session is closed"):
                    await client.step({"answer": "1"})


async def test_capacity_reached_before_first_send_is_back_pressure() -> None:
    with FakeEnv(capacity=1) as env:
        async with EnvClient(env.url) as first:
            await first.reset()
            async with EnvClient(env.url) as second:
                with pytest.raises(EnvCapacityError, match="CAPACITY_REACHED") as info:
                    await second.reset()
                assert info.value.retryable


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("this is not json", "not JSON"),
        ("[1, 2, 3]", "non-object frame"),
        (b"\x00\x01binary", "binary frame"),
        ('{"type": "observation", "data": {"observation": "nope"}}', "must be an object"),
        ('{"type": "observation", "data": {"observation": {}, "done": "yes"}}', "done must be"),
        ('{"type": "observation", "data": {"observation": {}, "reward": NaN}}', "NaN"),
        ('{"type": "observation", "data": {"observation": {}, "reward": "high"}}', "reward must"),
        ('{"type": "state", "data": {}}', "expected an observation frame"),
    ],
    ids=[
        "text",
        "array",
        "binary",
        "obs-not-object",
        "done-not-bool",
        "nan",
        "reward-str",
        "wrong-type",
    ],
)
async def test_garbage_frames_are_protocol_errors(reply: object, message: str) -> None:
    with FakeEnv(on_step=lambda s, d: reply) as env:
        async with EnvClient(env.url) as client:
            await client.reset()
            with pytest.raises(EnvProtocolError, match=re.escape(message)):
                await client.step({"answer": "1"})


async def test_server_closing_mid_episode() -> None:
    with FakeEnv(on_step=lambda s, d: CLOSE) as env:
        async with EnvClient(env.url) as client:
            await client.reset()
            with pytest.raises(EnvClosedError, match="closed the session") as info:
                await client.step({"answer": "1"})
            assert info.value.retryable


async def test_hanging_server_times_out_and_socket_is_dropped() -> None:
    with FakeEnv(on_step=lambda s, d: None) as env:
        client = EnvClient(env.url, timeout=0.3)
        async with client:
            await client.reset()
            with pytest.raises(EnvTimeout, match=r"no reply .* within 0.3s"):
                await client.step({"answer": "1"})
            # a late reply must never be read as the answer to the next request
            with pytest.raises(EnvClosedError):
                await client.state()


async def test_multi_megabyte_frame_is_refused() -> None:
    huge = observation({"blob": "x" * (3 * 1024 * 1024)}, 0.0, True)
    with FakeEnv(on_step=lambda s, d: huge) as env:
        async with EnvClient(env.url, max_frame_bytes=1024 * 1024) as client:
            await client.reset()
            with pytest.raises(EnvProtocolError, match="larger than 1048576 bytes"):
                await client.step({"answer": "1"})


def _resets(env: FakeEnv) -> list[dict]:
    return [frame["data"] for frame in env.frames if frame["type"] == "reset"]


async def test_a_reset_sent_behind_the_last_step_is_read_not_sent_again() -> None:
    with FakeEnv() as env:
        async with EnvClient(env.url) as client:
            await client.reset(seed=1)
            transport = client._ws.transport  # type: ignore[union-attr]
            writes: list[bytes] = []
            write = transport.write
            transport.write = lambda data: (writes.append(data), write(data))[1]  # type: ignore[method-assign]
            result = await client.step({"answer": "1"}, then_reset={"seed": 2})
            assert len(writes) == 1  # the step and the reset behind it: one write, one segment
            assert result.reward == 1.0 and result.done  # the step's own reply
            assert client.reset_ahead == {"seed": 2}
            first = await client.reset(seed=2)
            assert first.observation["question"] == "say 2" and client.reset_ahead is None
            rendered = []

            async def render() -> None:  # work done while the env answers the step
                rendered.append(True)

            result = await client.step_while({"answer": "2"}, render, then_reset={"seed": 3})
            assert result.reward == 1.0 and rendered == [True]
            assert (await client.reset(seed=3)).observation["question"] == "say 3"
        assert _resets(env) == [{"seed": 1}, {"seed": 2}, {"seed": 3}]


@pytest.mark.parametrize("then", ["reset", "step", "state"])
async def test_another_request_first_reads_and_drops_the_reset_sent_ahead(then: str) -> None:
    with FakeEnv() as env:
        async with EnvClient(env.url) as client:
            await client.reset(seed=1, episode_id="one")
            await client.step({"answer": "1"}, then_reset={"seed": 2, "episode_id": "two"})
            if then == "reset":  # another episode than the one sent ahead
                assert (await client.reset(seed=5)).observation["question"] == "say 5"
                assert _resets(env)[-1] == {"seed": 5}
            elif then == "step":  # the episode sent ahead has begun on the server: play it
                assert (await client.step({"answer": "2"})).reward == 1.0
            else:
                assert (await client.state())["episode_id"] == "two"
            assert client.reset_ahead is None


async def test_a_reset_sent_before_its_episode_is_read_by_its_reset() -> None:
    with FakeEnv() as env:
        async with EnvClient(env.url) as client:
            await client.send_reset(seed=4, episode_id="four")
            assert client.reset_ahead == {"seed": 4, "episode_id": "four"}
            first = await client.reset(seed=4, episode_id="four")
            assert first.observation["question"] == "say 4" and client.reset_ahead is None
            await client.send_reset(seed=5)
            # another episode comes first: the reply is dropped, its own reset sent
            assert (await client.reset(seed=6)).observation["question"] == "say 6"
        assert _resets(env) == [{"seed": 4, "episode_id": "four"}, {"seed": 5}, {"seed": 6}]


async def test_an_error_frame_answering_a_reset_sent_ahead() -> None:
    def reset(session, data):
        if data.get("seed") == 2:
            return error("VALIDATION_ERROR", "no seed 2")
        return counting_reset(session, data)

    with FakeEnv(on_reset=reset) as env:
        async with EnvClient(env.url) as client:
            await client.reset(seed=1)
            await client.step({"answer": "1"}, then_reset={"seed": 2})
            with pytest.raises(EnvProtocolError, match="reset failed: VALIDATION_ERROR: no seed 2"):
                await client.reset(seed=2)  # the episode it was sent for gets its error
            await client.reset(seed=1)
            await client.step({"answer": "1"}, then_reset={"seed": 2})
            # dropped for another request: the session is still usable
            assert (await client.reset(seed=3)).observation["question"] == "say 3"


async def test_a_session_the_server_closed_after_the_last_step_fails_the_reset_sent_ahead() -> None:
    def step(session, data):
        session.close_after_reply = True
        return counting_step(session, data)

    with FakeEnv(on_step=step) as env:
        async with EnvClient(env.url) as client:
            await client.reset(seed=1)
            assert (await client.step({"answer": "1"}, then_reset={"seed": 2})).reward == 1.0
            with pytest.raises(EnvClosedError):
                await client.reset(seed=2)


async def test_refused_connection_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(
        EnvConnectError, match=re.escape(f"cannot connect to {url}/ws".replace("http", "ws"))
    ):
        async with EnvClient(url, connect_timeout=2) as client:
            await client.reset()


async def test_closed_client_cannot_reopen() -> None:
    with FakeEnv() as env:
        client = EnvClient(env.url)
        async with client:
            await client.reset()
        with pytest.raises(RuntimeError, match="Cannot reopen"):
            await client.connect()


async def test_http_only_server_is_probed_and_driven_over_http() -> None:
    with FakeEnv(ws=False) as env:
        async with httpx.AsyncClient() as http:
            assert await probe_transport(http, env.url) == "http"
            async with HttpEnvSession(env.url, http=http) as session:
                first = await session.reset(seed=5)
                assert first.observation["question"] == "say 5"
                result = await session.step({"answer": "5"})
                assert result.reward == 1.0 and result.done


async def test_ws_server_is_probed_as_ws() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http:
            assert await probe_transport(http, env.url) == "ws"


@pytest.mark.parametrize("keep", [True, False])
async def test_the_probe_shakes_hands_with_the_env_headers_and_its_session_can_be_kept(
    keep: bool,
) -> None:
    token = {"authorization": "Bearer hf_private"}  # a private Space's handshake
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http:
            async with EnvHandle.open(
                env.url, http=http, headers=token, keep_session=keep
            ) as handle:
                assert env.handshakes[0]["authorization"] == "Bearer hf_private"
                session = handle.take_session()
                assert (session is not None) is keep
                if session is not None:  # open, reset once by the probe: it plays on
                    assert session.is_open and session.headers == token
                    assert session.timeout == 60.0  # not the probe's short reset deadline
                    assert (await session.reset(seed=4)).observation["question"] == "say 4"
                    await session.close()
                assert handle.take_session() is None
            assert env.sessions_opened == 1


@pytest.mark.parametrize("slow", [True, False], ids=["slow-to-open", "fast"])
async def test_a_slow_servers_first_sessions_open_and_reset_beside_the_probe(
    slow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a probe within SLOW_PROBE_S is a fast server's (raised here: a loaded machine is slow)
    monkeypatch.setattr(launch, "SLOW_PROBE_S", 0.05 if slow else 60.0)
    firsts = [{"seed": n, "episode_id": f"e{n}"} for n in (3, 4, 5)]
    with FakeEnv(open_delay=0.3 if slow else 0.0) as env:
        async with httpx.AsyncClient() as http:
            async with EnvHandle.open(
                env.url, http=http, keep_session=True, first_resets=firsts, max_frame_bytes=1 << 20
            ) as handle:
                sessions = handle.take_sessions()
                if not slow:  # the probe's session only, reset by the probe alone
                    assert len(sessions) == 1 and sessions[0].reset_ahead is None
                    assert env.sessions_opened == 1
                    await sessions[0].close()
                    return
                # opened while the probe's handshake waited, each sent its reset; the probe's
                # session sent the first
                assert [s.reset_ahead for s in sessions] == firsts
                assert all(s.is_open and s.max_frame_bytes == 1 << 20 for s in sessions)
                for session, first in zip(sessions, firsts, strict=True):
                    assert (await session.reset(**first)).observation["question"] == (
                        f"say {first['seed']}"
                    )
                    await session.close()
                assert handle.take_sessions() == []
            assert env.sessions_opened == 3
            # the probe's own reset, then each first reset once
            resets = _resets(env)
            assert resets[0] == {} and sorted(resets[1:], key=lambda r: r["seed"]) == firsts
            # without keep_session nothing is kept, and no session is opened for them
            async with EnvHandle.open(env.url, http=http, first_resets=firsts) as handle:
                assert handle.take_sessions() == []
            assert env.sessions_opened == 4


async def test_sessions_opened_beside_a_slow_probe_of_an_http_server_are_dropped() -> None:
    with FakeEnv(ws=False, open_delay=0.2) as env:
        async with httpx.AsyncClient() as http:
            firsts = [{"seed": 1}, {"seed": 2}]
            async with EnvHandle.open(
                env.url, http=http, keep_session=True, first_resets=firsts
            ) as handle:
                assert handle.info is not None and handle.info.transport == "http"
                assert handle.take_sessions() == []


async def test_a_first_reset_beyond_the_servers_capacity_answers_with_the_refusal() -> None:
    with FakeEnv(capacity=1, open_delay=0.2) as env:
        async with httpx.AsyncClient() as http:
            firsts = [{"seed": 1}, {"seed": 2}]
            async with EnvHandle.open(
                env.url, http=http, keep_session=True, first_resets=firsts
            ) as handle:
                sessions = handle.take_sessions()
                refused = 0
                for session, first in zip(sessions, firsts, strict=False):
                    try:
                        await session.reset(**first)
                    except EnvCapacityError:  # the pool learns the limit from it
                        refused += 1
                    await session.close()
                # the server took one of the two, whichever came first
                assert len(sessions) - refused == 1


async def test_a_kept_probe_session_nobody_took_closes_with_the_handle() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http:
            async with EnvHandle.open(env.url, http=http, keep_session=True):
                assert env.active == 1
            for _ in range(100):  # the server sees the close a moment after it is sent
                if env.active == 0:
                    break
                await asyncio.sleep(0.02)
            assert env.active == 0 and env.frames[-1] == {"type": "close"}


async def test_slow_env_does_not_block_other_sessions() -> None:
    async def slow_step(session, data):
        await asyncio.sleep(0.5)
        return observation({}, 1.0, True)

    with FakeEnv(on_step=slow_step) as env:

        async def one() -> float | None:
            async with EnvClient(env.url) as client:
                await client.reset()
                return (await client.step({"answer": "1"})).reward

        started = asyncio.get_running_loop().time()
        rewards = await asyncio.gather(*(one() for _ in range(6)))
        assert rewards == [1.0] * 6
        assert asyncio.get_running_loop().time() - started < 2.5


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:1", ("http://h:1", "ws://h:1/ws")),
        ("https://x.hf.space/", ("https://x.hf.space", "wss://x.hf.space/ws")),
        ("ws://h:1/ws", ("http://h:1", "ws://h:1/ws")),
        ("wss://h/prefix/ws", ("https://h/prefix", "wss://h/prefix/ws")),
        ("http://h/prefix", ("http://h/prefix", "ws://h/prefix/ws")),
    ],
)
def test_split_base_url(url: str, expected: tuple[str, str]) -> None:
    assert split_base_url(url) == expected


def test_space_url() -> None:
    assert space_url("OpenEnv/Echo_Env.v2") == "https://openenv-echo-env-v2.hf.space"


async def test_http_session_survives_the_connection_a_500_closed(tmp_path: Path) -> None:
    """uvicorn closes the keep-alive connection after an unhandled exception's 500: the next
    reset must not fail on that dead pooled connection."""
    folder = Path(__file__).resolve().parents[1] / "validators" / "envs" / "http_only"
    server = launch_server(folder, log_dir=tmp_path)
    try:
        async with httpx.AsyncClient() as http:
            await wait_healthy(http, server.url, server=server)
            session = HttpEnvSession(server.url, http=http, timeout=10)
            with pytest.raises(EnvExecutionError, match="HTTP 500"):
                await session.reset(seed=1, op="no-such-op")
            first = await session.reset(seed=1, op="add")
            assert "What is" in first.observation["question"]
            assert (await session.state())["op"] == "add"
    finally:
        server.stop()


async def test_a_server_launched_without_a_log_folder_leaves_no_temp_folder() -> None:
    folder = Path(__file__).resolve().parents[1] / "validators" / "envs" / "http_only"
    server = launch_server(folder)
    scratch = server.log_path.parent
    try:
        async with httpx.AsyncClient() as http:
            await wait_healthy(http, server.url, server=server)
        assert scratch.name.startswith("taskhub-env-") and server.log_path.is_file()
    finally:
        server.stop()
    assert server.process.poll() is not None
    assert not scratch.exists()
