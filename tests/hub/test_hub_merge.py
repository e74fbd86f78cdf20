"""``results merge`` refuses shards of one Hub taskset at two commits, naming the commits."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from taskhub import (
    EvalConfig,
    ResultsError,
    TasksetCard,
    evaluate,
    init_taskset,
    merge_runs,
    push_taskset,
)
from tests.hub.hub_server import HubServer
from tests.servers import FakeEnv

ROWS = [{"task_id": f"t{i}", "reset": {"seed": i}, "answer": str(i)} for i in range(6)]


def test_shards_of_two_taskset_commits_do_not_merge(
    hub_server: HubServer,
    hf_token: str,
    make_repo_id: Callable[[], str],
    tmp_path: Path,
) -> None:
    repo_id = make_repo_id()
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:4]))
    folder = tmp_path / "ts"
    init_taskset(source, folder, env="arith", card=TasksetCard(name="shards"))
    first = push_taskset(folder, repo_id, token=hf_token).commit_sha
    (folder / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    second = push_taskset(folder, repo_id, token=hf_token).commit_sha
    with FakeEnv() as env:
        shards = [
            evaluate(
                EvalConfig(
                    model="scripted/oracle",
                    taskset=f"{repo_id}@{sha}",
                    env=env.url,
                    shard=(index, 2),
                ),
                run_dir=tmp_path / f"shard{index}",
            ).run_dir
            for index, sha in enumerate((first, second))
        ]
    with pytest.raises(
        ResultsError, match=re.escape(f"differ in taskset commit ({first!r} vs {second!r})")
    ):
        merge_runs(shards, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
