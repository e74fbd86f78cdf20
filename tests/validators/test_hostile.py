"""A hostile or broken server (hangs, floods, garbage, slowloris) gets failed checks, never a
hung or crashed validator; a URL that does not speak OpenEnv is unsupported (exit 2)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from taskhub import ValidationReport
from tests.servers import (
    CLOSE,
    FakeEnv,
    ServerThread,
    Session,
    counting_reset,
    free_port,
    observation,
    wait_served,
)

#: Deadlines of these runs: one request gets 1 s, the whole validation 40 s.
QUICK = {"op_timeout_s": 1.0, "check_timeout_s": 15.0, "budget_s": 40.0, "growth_episodes": 5}


def validate_url(url: str, **overrides: Any) -> tuple[ValidationReport, float]:
    from taskhub.validators import ValidationConfig, validate

    started = time.monotonic()
    report = validate(url, ValidationConfig(**{**QUICK, **overrides}))
    return report, time.monotonic() - started


def statuses(report: ValidationReport) -> dict[str, str]:
    return {c.id: c.status for c in report.checks}


def test_a_well_behaved_fake_env_passes_its_protocol_checks() -> None:
    wanted = [
        "protocol.health",
        "runtime.state_contract",
        "runtime.episode_isolation",
        "static.manifest",
        "runtime.resource_bounds",
    ]
    with FakeEnv() as env:
        report, _ = validate_url(env.url, checks=wanted)
    status = statuses(report)
    for check_id in (
        "protocol.health",
        "protocol.websocket",
        "protocol.episode",
        "runtime.state_contract",
        "runtime.episode_isolation",
    ):
        assert status[check_id] == "pass", (check_id, report.checks)
    assert status["static.manifest"] == "skip"  # a URL has no files
    assert status["runtime.resource_bounds"] == "skip"  # nor a local process
    # only the selected checks and what they need ran
    assert "semantic.oracle_max" not in status and "runtime.episode_determinism" in status


@pytest.mark.parametrize(
    ("behaviour", "broken"),
    [
        ("silent", "protocol.websocket"),  # never answers a frame
        ("garbage", "protocol.websocket"),  # answers text that is not JSON
        ("binary", "protocol.websocket"),  # answers binary frames
        ("flood", "protocol.episode"),  # answers with a frame beyond the size limit
        ("closes", "protocol.websocket"),  # drops the connection on every frame
    ],
)
def test_hostile_ws_server_fails_checks_within_deadlines(behaviour: str, broken: str) -> None:
    def on_reset(session: Session, data: dict[str, Any]) -> Any:
        if behaviour == "silent":
            return None
        if behaviour == "garbage":
            return "<html>Internal Server Error</html>"
        if behaviour == "binary":
            return b"\x00\x01\x02"
        if behaviour == "closes":
            return CLOSE
        return observation({"question": "x" * (6 * 1024 * 1024)})

    first = [True]

    def flood_after_ws_probe(session: Session, data: dict[str, Any]) -> Any:
        # let the plain /ws probe pass so that the flood hits the episode itself
        if behaviour == "flood" and first[0]:
            first[0] = False
            return observation({"question": "ok"})
        return on_reset(session, data)

    with FakeEnv(on_reset=flood_after_ws_probe) as env:
        report, took = validate_url(env.url)
    assert took < QUICK["budget_s"]
    status = statuses(report)
    assert status[broken] == "fail"
    assert "error" not in status.values(), [c for c in report.checks if c.status == "error"]
    assert report.verdict in ("fail", "unsupported")


async def _drip() -> AsyncIterator[bytes]:
    while True:
        yield b" "
        await asyncio.sleep(0.3)


def slowloris_app() -> Starlette:
    async def health(request: Request) -> Response:
        return JSONResponse({"status": "healthy"})

    async def drip(request: Request) -> Response:
        return StreamingResponse(_drip(), media_type="application/json")

    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:  # reads every frame, answers none
                await websocket.receive_text()
        except WebSocketDisconnect:
            pass

    return Starlette(
        routes=[
            Route("/health", health),
            Route("/metadata", drip),
            Route("/schema", drip),
            Route("/openapi.json", drip),
            WebSocketRoute("/ws", ws),
        ]
    )


def test_slowloris_http_and_hanging_ws_cannot_stall_the_validator() -> None:
    with ServerThread(slowloris_app()) as server:
        report, took = validate_url(server.url)
    assert took < QUICK["budget_s"]
    status = statuses(report)
    assert status["protocol.schema"] == "fail" and status["protocol.metadata"] == "fail"
    assert status["protocol.websocket"] == "fail"
    schema = next(c for c in report.checks if c.id == "protocol.schema")
    assert "no answer within" in str(schema.evidence)


def test_a_url_that_is_not_an_openenv_server_is_unsupported() -> None:
    async def page(request: Request) -> Response:
        return Response("<html>hello</html>", media_type="text/html", status_code=404)

    app = Starlette(routes=[Route("/", page)])
    with ServerThread(app) as server:
        report, _ = validate_url(server.url)
    assert report.verdict == "unsupported" and report.exit_code == 2


def test_an_unreachable_url_fails_startup() -> None:
    from tests.servers import free_port

    report, took = validate_url(f"http://127.0.0.1:{free_port()}")
    assert statuses(report)["runtime.startup"] == "fail"
    assert report.verdict == "fail" and took < 10


def test_the_time_budget_bounds_the_whole_run() -> None:
    def slow_step(session: Session, data: dict[str, Any]) -> Any:
        async def later() -> Any:
            await asyncio.sleep(0.4)
            return observation({"feedback": "wrong"}, 0.0, False)

        return later()

    with FakeEnv(on_step=slow_step) as env:
        report, took = validate_url(env.url, budget_s=4.0, op_timeout_s=2.0)
    assert took < 12
    errors = [c for c in report.checks if c.status == "error"]
    assert errors and all("time budget" in c.summary for c in errors)
    assert report.verdict == "fail"  # errors fail closed


def test_a_check_outlasted_by_a_slow_env_that_answers_is_skipped_not_failed() -> None:
    def slow_endless_step(session: Session, data: dict[str, Any]) -> Any:
        async def later() -> Any:
            await asyncio.sleep(0.1)
            return observation({"feedback": "wrong"}, 0.0, False)

        return later()

    steps = [0]

    def hangs_later(session: Session, data: dict[str, Any]) -> Any:
        steps[0] += 1
        if steps[0] <= 3:  # the protocol checks play; the long episode then hangs
            return observation({"feedback": "wrong"}, 0.0, False)

        async def never() -> Any:
            await asyncio.sleep(60)

        return never()

    checks = ["runtime.termination"]
    with FakeEnv(on_step=slow_endless_step) as env:
        slow, _ = validate_url(env.url, checks=checks, check_timeout_s=3.0, op_timeout_s=2.0)
    with FakeEnv(on_step=hangs_later) as env:
        hung, _ = validate_url(env.url, checks=checks, check_timeout_s=3.0, op_timeout_s=2.0)
    termination = next(c for c in slow.checks if c.id == "runtime.termination")
    assert termination.status == "skip", termination
    assert "kept answering" in termination.summary and termination.remediation
    # a request that outlasts its own deadline is the env's failure
    assert statuses(hung)["runtime.termination"] == "fail", hung.checks


def test_a_clock_printed_to_the_second_in_the_observation_is_always_found() -> None:
    def clock_reset(session: Session, data: dict[str, Any]) -> Any:
        reply = counting_reset(session, data)
        stamp = time.strftime("%H:%M:%S")
        reply["data"]["observation"]["log"] = [f"[{stamp}] [INFO] backup finished"]
        return reply

    with FakeEnv(on_reset=clock_reset) as env:
        report, _ = validate_url(env.url, checks=["runtime.seed_control"])
    seed = next(c for c in report.checks if c.id == "runtime.seed_control")
    # the two same-seed resets start over a second apart: never only when they straddle a tick
    assert seed.status == "fail", seed
    assert "observation.log[0]" in seed.summary


def test_an_empty_cell_that_costs_nothing_is_the_floor_not_a_canary() -> None:
    # a REPL: every field optional, a placeholder "noop" fined as bad code, an empty cell free
    schema = {"type": "object", "properties": {"code": {"type": "string"}}}

    def repl_step(session: Session, data: dict[str, Any]) -> Any:
        session.step_count += 1
        code = str(data.get("code", ""))
        return observation(
            {"stdout": "", "error": "NameError" if code else None},
            0.0 if not code else -0.5,
            session.step_count >= 3,
        )

    class Repl(FakeEnv):
        async def _schema(self, request: Request) -> Response:
            kinds = {
                "action": schema,
                "observation": {"type": "object"},
                "state": {"type": "object"},
            }
            return JSONResponse(kinds)

    with Repl(on_step=repl_step, action_schema=schema) as env:
        report, _ = validate_url(env.url, checks=["semantic.canary_floor", "semantic.floor_gap"])
    floor = next(c for c in report.checks if c.id == "semantic.floor_gap")
    assert floor.measured["action"] == {"code": "noop"}, floor  # the placeholder played first
    assert floor.measured["floor"] == 0.0, floor  # and the free empty cell is the floor
    canary = next(c for c in report.checks if c.id == "semantic.canary_floor")
    assert canary.status == "pass", canary
    assert "empty" not in canary.measured["mean_rewards"]


ROOMS = [{"id": "A", "seats": 4}, {"id": "B", "seats": 8}, {"id": "C", "seats": 6}]


@pytest.mark.parametrize("graded", [False, True])
def test_options_that_all_win_are_a_reward_that_tells_nothing_apart(graded: bool) -> None:
    # the start offers rooms to choose from; the answer names one (a one-step episode)
    def rooms_reset(session: Session, data: dict[str, Any]) -> Any:
        reply = counting_reset(session, data)
        reply["data"]["observation"]["state"] = {"people": 5, "rooms": ROOMS}
        return reply

    def rooms_step(session: Session, data: dict[str, Any]) -> Any:
        chosen = next((r for r in ROOMS if r["id"] == data.get("answer")), None)
        if chosen is None:
            reward = 0.0
        elif graded:
            reward = 1.0 if chosen["seats"] >= 5 and chosen["id"] == "C" else 0.3
        else:
            reward = 1.0  # every room passes
        return observation({"question": "booked"}, reward, True)

    class Typed(FakeEnv):  # a /schema whose observation and state are typed too
        async def _schema(self, request: Request) -> Response:
            typed = {"type": "object"}
            return JSONResponse(
                {"action": self.action_schema, "observation": typed, "state": typed}
            )

    with Typed(on_reset=rooms_reset, on_step=rooms_step) as env:
        report, _ = validate_url(env.url, checks=["semantic.reward_signal"])
    signal = next(c for c in report.checks if c.id == "semantic.reward_signal")
    assert signal.measured["options_of"] == "rooms"
    assert signal.measured["played"] == [{"answer": "A"}, {"answer": "B"}, {"answer": "C"}]
    if graded:
        assert signal.status == "pass", signal
        assert "earn 2 different reward(s) (0.3, 1)" in signal.summary
    else:
        assert signal.status == "fail", signal
        assert "each of the 3 options played from 'rooms'" in signal.summary
        assert "does not tell a right choice from a wrong one" in signal.summary
        assert [e["total_reward"] for e in signal.evidence] == [1.0, 1.0, 1.0]


def test_a_reset_that_takes_nothing_and_one_rung_of_a_difficulty_ladder_is_found_by_url() -> None:
    # served without its folder: no manifest lists the tasks, the observation names one rung
    folder = Path(__file__).parent / "envs" / "reset_takes_nothing"
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "server.app:app", "--port", str(port)]
    process = subprocess.Popen(command, cwd=folder, stderr=subprocess.DEVNULL)
    try:
        wait_served(port, process, "reset_takes_nothing")
        report, _ = validate_url(f"http://127.0.0.1:{port}", checks=["taskset.manifest_tasks"])
    finally:
        process.terminate()
        process.wait(10)
    tasks = next(c for c in report.checks if c.id == "taskset.manifest_tasks")
    assert tasks.status == "fail", tasks
    assert "names difficulty 'easy' (difficulty) (task 'task_easy')" in tasks.summary
    assert "its reset route takes nothing: no task can be selected" in tasks.summary
    assert tasks.measured["named_difficulties"] == ["easy"] * 3
