"""OpenEnv's Task API: the client, tasksets built from an env's own tasks, and their rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from taskhub import TaskApiUnsupported, TasksetError, load_taskset
from taskhub._cli import app
from taskhub.env import TaskApiClient
from tests.reference_envs.refenv_helpers import EnvServer, read_rows
from tests.servers import FakeEnv

pytestmark = pytest.mark.anyio


async def test_the_client_reads_splits_counts_and_tasks(ledger_server: EnvServer) -> None:
    rows = read_rows("ledger", "test")
    async with httpx.AsyncClient() as http:
        api = TaskApiClient(ledger_server.url, http=http)
        assert await api.env_name() == "ledger"
        assert [(s.name, s.type) for s in await api.splits()] == [
            ("train", "train"),
            ("test", "test"),
        ]
        assert await api.num_tasks("test") == len(rows)
        task = await api.task("test", 4)
        assert task["task_id"] == rows[4]["task_id"] and "answer" not in task
        page = await api.task_range("test", 10, 13)
        assert [t["task_id"] for t in page] == [r["task_id"] for r in rows[10:13]]
        with pytest.raises(Exception, match="HTTP 400"):
            await api.task("test", 100)


async def test_an_env_without_the_task_api_is_named() -> None:
    with FakeEnv() as env:
        async with httpx.AsyncClient() as http:
            api = TaskApiClient(env.url, http=http, env_name="fake")
            with pytest.raises(TaskApiUnsupported, match=r"/fake/splits: HTTP 404"):
                await api.splits()
        with pytest.raises(TasksetError, match=re.escape(f"{env.url} does not serve its tasks")):
            load_taskset(env.url)


def test_load_taskset_reads_an_env_s_own_tasks(ledger_server: EnvServer) -> None:
    taskset = load_taskset(ledger_server.url)
    assert taskset.ref.kind == "env" and taskset.ref.source == ledger_server.url
    assert (taskset.name, taskset.card.env) == ("ledger", ledger_server.url)
    assert {s: len(t) for s, t in taskset.splits.items()} == {"train": 200, "test": 100}
    rows = read_rows("ledger", "test")
    first = taskset.tasks("test")[7]
    assert first.task_id == rows[7]["task_id"]
    assert first.reset == {"split": "test", "index": 7}
    assert first.metadata["question"] == rows[7]["metadata"]["question"]
    assert load_taskset(ledger_server.url).ref.fingerprint == taskset.ref.fingerprint


def test_taskset_init_from_env_writes_a_folder_that_runs(
    ledger_server: EnvServer, tmp_path: Path
) -> None:
    runner = CliRunner()
    folder = tmp_path / "from-env"
    result = runner.invoke(
        app, ["taskset", "init", str(folder), "--from-env", ledger_server.url, "--max-steps", "3"]
    )
    assert result.exit_code == 0, result.output
    assert f"env={ledger_server.url}" in result.output
    taskset = load_taskset(str(folder))
    assert (taskset.name, taskset.card.env, taskset.card.max_steps) == (
        "ledger",
        ledger_server.url,
        3,
    )
    assert taskset.tasks("train")[0].reset == {"split": "train", "index": 0}
    evaluated = runner.invoke(
        app,
        ["eval", "scripted/noop", "auto", str(folder), "--limit", "2", "-o", str(tmp_path)]
        + ["--json"],
    )
    assert evaluated.exit_code == 0, evaluated.output
    summary = json.loads(evaluated.stdout)["summary"]
    assert (summary["n_episodes"], summary["mean_reward"]) == (2, 0.0)
    refused = runner.invoke(app, ["taskset", "init", "a", "b", "--from-env", ledger_server.url])
    assert refused.exit_code == 2 and "give only the folder" in refused.output
