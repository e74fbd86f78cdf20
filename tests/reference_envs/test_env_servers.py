"""The reference envs over the wire: uvicorn subprocesses from their folders, raw WS frames."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosedOK
from websockets.sync.client import ClientConnection, connect

from tests.reference_envs.refenv_helpers import ENV_NAMES, ENVS_DIR, EnvServer, read_rows

#: Seconds to wait for any one reply frame.
REPLY_TIMEOUT_S = 15.0

STATE_FIELDS = {
    "arith": {"episode_id", "step_count", "family", "difficulty", "seed"},
    "gridworld": {
        "episode_id",
        "step_count",
        "position",
        "size",
        "difficulty",
        "seed",
        "max_steps",
    },
    "ledger": {
        "episode_id",
        "step_count",
        "family",
        "difficulty",
        "seed",
        "max_calls",
        "submitted",
    },
}
ACTION_FIELDS = {
    "arith": {"answer"},
    "gridworld": {"move"},
    "ledger": {"type", "tool_name", "arguments"},
}


def send(ws: ClientConnection, frame: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps(frame))
    reply = json.loads(ws.recv(timeout=REPLY_TIMEOUT_S))
    assert isinstance(reply, dict)
    return reply


def oracle_actions(server: EnvServer, row: dict[str, Any]) -> list[dict[str, Any]]:
    if server.name == "arith":
        return [{"answer": rf"Therefore \boxed{{{row['answer']}}}"}]
    return list(row["oracle_actions"])


def test_health_schema_and_metadata(env_server: EnvServer) -> None:
    assert httpx.get(env_server.url + "/health").json() == {"status": "healthy"}
    schema = httpx.get(env_server.url + "/schema").json()
    assert {"action", "observation", "state"} <= set(schema)
    state_fields = set(schema["state"]["properties"])
    assert state_fields == STATE_FIELDS[env_server.name]
    action_fields = set(schema["action"]["properties"]) - {"metadata"}
    assert action_fields == ACTION_FIELDS[env_server.name]
    metadata = httpx.get(env_server.url + "/metadata").json()
    assert metadata["name"] == env_server.name and metadata["version"] == "0.1.0"


@pytest.mark.parametrize("index", [0, 1, 7])
def test_oracle_episode_over_websocket(env_server: EnvServer, index: int) -> None:
    row = read_rows(env_server.name, "test")[index]
    episode_id = f"{row['task_id']}-wire"
    with connect(env_server.ws_url, open_timeout=REPLY_TIMEOUT_S) as ws:
        reply = send(ws, {"type": "reset", "data": {**row["reset"], "episode_id": episode_id}})
        assert reply["type"] == "observation", reply
        assert reply["data"]["done"] is False and reply["data"]["reward"] is None
        actions = oracle_actions(env_server, row)
        for number, action in enumerate(actions, start=1):
            reply = send(ws, {"type": "step", "data": action})
            assert reply["type"] == "observation", reply
            last = number == len(actions)
            assert (reply["data"]["reward"], reply["data"]["done"]) == (float(last), last)
        state = send(ws, {"type": "state"})
        assert state["type"] == "state"
        assert state["data"]["episode_id"] == episode_id
        assert state["data"]["step_count"] == len(actions)
        assert state["data"]["seed"] == row["reset"]["seed"]
        assert set(state["data"]) == STATE_FIELDS[env_server.name]
        assert "answer" not in json.dumps(state["data"])

        error = send(ws, {"type": "step", "data": actions[0]})
        assert error["type"] == "error"
        assert error["data"]["code"] == "EXECUTION_ERROR"
        assert "episode is over; call reset()" in error["data"]["message"]

        ws.send(json.dumps({"type": "close"}))
        with pytest.raises(ConnectionClosedOK) as closed:
            ws.recv(timeout=REPLY_TIMEOUT_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


def test_bad_action_is_a_validation_error_and_the_session_survives(env_server: EnvServer) -> None:
    row = read_rows(env_server.name, "test")[2]
    with connect(env_server.ws_url, open_timeout=REPLY_TIMEOUT_S) as ws:
        send(ws, {"type": "reset", "data": row["reset"]})
        bad = {"move": "jump"} if env_server.name == "gridworld" else {"reply": "42"}
        error = send(ws, {"type": "step", "data": bad})
        assert error["type"] == "error" and error["data"]["code"] == "VALIDATION_ERROR"
        reply = send(ws, {"type": "step", "data": oracle_actions(env_server, row)[0]})
        assert reply["type"] == "observation"
        ws.send(json.dumps({"type": "close"}))


def test_bad_reset_is_an_execution_error(env_server: EnvServer) -> None:
    with connect(env_server.ws_url, open_timeout=REPLY_TIMEOUT_S) as ws:
        error = send(ws, {"type": "reset", "data": {"difficulty": 42}})
        assert error["type"] == "error" and error["data"]["code"] == "EXECUTION_ERROR"
        assert "difficulty must be an integer from 1 to 5, got 42" in error["data"]["message"]
        reply = send(ws, {"type": "reset", "data": {"seed": 3}})
        assert reply["type"] == "observation"


def test_concurrent_sessions_are_isolated(env_server: EnvServer) -> None:
    rows = read_rows(env_server.name, "test")[3:5]
    with (
        connect(env_server.ws_url, open_timeout=REPLY_TIMEOUT_S) as first,
        connect(env_server.ws_url, open_timeout=REPLY_TIMEOUT_S) as second,
    ):
        initial = [
            send(ws, {"type": "reset", "data": row["reset"]})
            for ws, row in ((first, rows[0]), (second, rows[1]))
        ]
        assert initial[0]["data"]["observation"] != initial[1]["data"]["observation"]
        plans = [oracle_actions(env_server, row) for row in rows]
        replies: list[dict[str, Any]] = [{}, {}]
        for step in range(max(map(len, plans))):
            for i, ws in enumerate((first, second)):
                if step < len(plans[i]):
                    replies[i] = send(ws, {"type": "step", "data": plans[i][step]})
        assert [r["data"]["reward"] for r in replies] == [1.0, 1.0]
        for i, ws in enumerate((first, second)):
            assert send(ws, {"type": "state"})["data"]["seed"] == rows[i]["reset"]["seed"]


@pytest.mark.parametrize("name", ENV_NAMES)
def test_the_app_imports_as_a_package_module(name: str) -> None:
    module = importlib.import_module(f"taskhub._envs.{name}.server.app")
    paths = {getattr(route, "path", None) for route in module.app.routes}
    assert {"/ws", "/health", "/schema", "/metadata", "/reset", "/step"} <= paths
    assert "/web" not in paths  # ENABLE_WEB_INTERFACE is unset


@pytest.mark.parametrize("name", ENV_NAMES)
def test_a_launched_server_does_not_import_the_web_ui_it_does_not_serve(name: str) -> None:
    # as taskhub launches it: `uvicorn NAME.server.app:app --app-dir ENVS_DIR` from the folder
    code = (
        f"import sys; sys.path.insert(0, {str(ENVS_DIR)!r}); import {name}.server.app as m; "
        "print('gradio' in sys.modules, any(r.path == '/web' for r in m.app.routes))"
    )
    env = {k: v for k, v in os.environ.items() if k != "ENABLE_WEB_INTERFACE"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ENVS_DIR / name,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_the_web_ui_is_served_when_enabled() -> None:
    # the envs keep openenv from importing gradio as they start only while the UI is off
    code = "\n".join(
        [
            "import importlib",
            f"for name in {list(ENV_NAMES)!r}:",
            "    app = importlib.import_module(f'taskhub._envs.{name}.server.app').app",
            "    print(any(r.path == '/web' for r in app.routes))",
        ]
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "ENABLE_WEB_INTERFACE": "true"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True"] * len(ENV_NAMES)
