"""Tasksets on the Hub: init, check, push revisions and tags, show, load pinned, bad input.

Everything runs the real huggingface_hub client against the loopback Hub (tests/hub/hub_server.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from huggingface_hub import CommitOperationAdd, HfApi
from typer.testing import CliRunner

from taskhub import (
    ConfigError,
    SchemaError,
    TasksetCard,
    TasksetError,
    TasksetNotFound,
    UnknownPluginError,
    describe_taskset,
    init_taskset,
    load_taskset,
    push_taskset,
)
from taskhub._cli import app
from tests.hub.hub_server import HubServer

ROOT = Path(__file__).resolve().parents[2]
ARITH_TRAIN = ROOT / "tasksets" / "arith" / "data" / "train.jsonl"
cli = CliRunner()


def _rows(n: int, start: int = 0) -> list[dict[str, object]]:
    lines = ARITH_TRAIN.read_text().splitlines()[start : start + n]
    return [json.loads(line) for line in lines]


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _head(repo_id: str, token: str, revision: str | None = None) -> str:
    sha = HfApi(token=token).dataset_info(repo_id, revision=revision).sha
    assert sha is not None
    return sha


def test_init_from_a_file_writes_a_hub_layout_folder(tmp_path: Path) -> None:
    source = _write_jsonl(tmp_path / "rows.jsonl", _rows(5))
    card = TasksetCard(
        name="mini-arith",
        prompt_template="{{ observation.question }}",
        rewards=["env"],
        max_steps=1,
    )
    taskset = init_taskset(source, tmp_path / "ts", env="arith", card=card)

    assert taskset.name == "mini-arith"
    assert [t.task_id for t in taskset.tasks("train")] == [r["task_id"] for r in _rows(5)]
    readme = (tmp_path / "ts" / "README.md").read_text()
    header = yaml.safe_load(readme.split("---")[1])
    assert header["configs"] == [
        {"config_name": "default", "data_files": [{"split": "train", "path": "data/train.jsonl"}]}
    ]
    assert header["taskhub"] == {
        "name": "mini-arith",
        "env": "arith",
        "prompt_template": "{{ observation.question }}",
        "max_steps": 1,
    }
    # the rows are written back exactly (defaults omitted), so hashes are stable
    written = [json.loads(x) for x in (tmp_path / "ts/data/train.jsonl").read_text().splitlines()]
    assert written == _rows(5)
    assert cli.invoke(app, ["taskset", "check", str(tmp_path / "ts")]).exit_code == 0


def test_init_from_a_python_generator_with_splits(tmp_path: Path) -> None:
    module = tmp_path / "make_tasks.py"
    module.write_text(
        "def tasks():\n"
        "    rows = [{'task_id': f'sum-{i}', 'reset': {'seed': i, 'family': 'add'},\n"
        "             'answer': str(i)} for i in range(6)]\n"
        "    return {'train': rows[:4], 'test': rows[4:]}\n"
    )
    result = cli.invoke(
        app,
        ["taskset", "init", f"{module}:tasks", str(tmp_path / "gen"), "--env", "arith"],
    )
    assert result.exit_code == 0, result.output
    assert "train 4 rows, test 2 rows" in result.output
    taskset = load_taskset(str(tmp_path / "gen"))
    assert taskset.card.env == "arith"
    assert [t.task_id for t in taskset.tasks("test")] == ["sum-4", "sum-5"]


def test_check_and_init_reject_unknown_rewards_and_broken_templates(tmp_path: Path) -> None:
    source = _write_jsonl(tmp_path / "rows.jsonl", _rows(2))
    with pytest.raises(UnknownPluginError, match="unknown reward 'no_such_reward'"):
        init_taskset(
            source, tmp_path / "a", env="arith", card=TasksetCard(rewards=["no_such_reward"])
        )
    with pytest.raises(ConfigError, match="taskset card prompt_template does not compile"):
        init_taskset(source, tmp_path / "b", env="arith", card=TasksetCard(prompt_template="{{ x"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    init_taskset(source, tmp_path / "c", env="arith")
    readme = tmp_path / "c" / "README.md"
    readme.write_text(readme.read_text().replace("env: arith", "env: arith\n  rewards: [exactt]"))
    result = cli.invoke(app, ["taskset", "check", str(tmp_path / "c")])
    assert result.exit_code == 1
    assert "UnknownPluginError: unknown reward 'exactt'" in result.output


def test_init_names_the_bad_row_and_field_and_writes_nothing(tmp_path: Path) -> None:
    rows = _rows(3)
    rows[2] = {**rows[2], "max_steps": 0}
    source = _write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(SchemaError, match=r"train row 2 \(task_id='[^']+'\) .*field 'max_steps'"):
        init_taskset(source, tmp_path / "ts", env="arith")
    assert not (tmp_path / "ts").exists()
    with pytest.raises(ConfigError, match="neither a data file"):
        init_taskset(tmp_path / "missing.jsonl", tmp_path / "ts", env="arith")


@pytest.fixture(scope="module")
def two_revisions(
    hub_server: HubServer,
    hf_token: str,
    make_repo_id: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, str]:
    """A taskset pushed twice: v1 (4 rows, tagged v1) then v2 (6 rows) on main."""
    repo_id = make_repo_id()
    folder = tmp_path_factory.mktemp("pushed") / "ts"
    source = _write_jsonl(folder.parent / "rows.jsonl", _rows(4))
    init_taskset(source, folder, env="arith", card=TasksetCard(name="pushed"))
    first = push_taskset(folder, repo_id, tag="v1", token=hf_token)
    _write_jsonl(folder / "data" / "train.jsonl", _rows(6))
    (folder / "data" / "extra.txt").write_text("notes\n")
    second = push_taskset(folder, repo_id, token=hf_token)
    return {"repo_id": repo_id, "v1": first.commit_sha, "v2": second.commit_sha}


def test_each_revision_loads_by_sha_tag_and_branch(two_revisions: dict[str, str]) -> None:
    repo_id, v1, v2 = two_revisions["repo_id"], two_revisions["v1"], two_revisions["v2"]
    assert v1 != v2
    for source, sha, rows in [
        (f"{repo_id}@{v1}", v1, 4),
        (f"{repo_id}@v1", v1, 4),
        (f"{repo_id}@{v2}", v2, 6),
        (f"{repo_id}@main", v2, 6),
        (repo_id, v2, 6),
    ]:
        taskset = load_taskset(source)
        assert taskset.ref.commit_sha == sha, source
        assert len(taskset.tasks("train")) == rows, source
        assert taskset.ref.kind == "hub" and taskset.ref.repo_id == repo_id


def test_show_describes_a_pinned_revision(two_revisions: dict[str, str]) -> None:
    repo_id = two_revisions["repo_id"]
    info = describe_taskset(f"{repo_id}@v1")
    assert (info.commit_sha, info.revision, info.env) == (two_revisions["v1"], "v1", "arith")
    assert info.splits["train"].rows == 4
    assert info.splits["train"].columns == ["task_id", "reset", "answer", "metadata"]
    assert info.splits["train"].metadata_keys == ["difficulty", "family", "question"]

    result = cli.invoke(app, ["taskset", "show", f"{repo_id}@v1", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["commit_sha"] == two_revisions["v1"]
    assert shown["splits"]["train"]["rows"] == 4
    text = cli.invoke(app, ["taskset", "show", repo_id])
    assert two_revisions["v2"] in text.output and "train: 6 rows" in text.output


def test_a_push_replaces_the_whole_tree_in_one_commit(
    two_revisions: dict[str, str], hf_token: str
) -> None:
    api = HfApi(token=hf_token)
    repo_id = two_revisions["repo_id"]
    files_v1 = set(api.list_repo_files(repo_id, repo_type="dataset", revision=two_revisions["v1"]))
    files_v2 = set(api.list_repo_files(repo_id, repo_type="dataset", revision=two_revisions["v2"]))
    assert files_v1 == {".gitattributes", "README.md", "data/train.jsonl"}
    assert files_v2 == files_v1 | {"data/extra.txt"}
    commits = api.list_repo_commits(repo_id, repo_type="dataset")
    assert [c.commit_id for c in commits[:2]] == [two_revisions["v2"], two_revisions["v1"]]


def test_an_existing_tag_is_refused_before_anything_is_pushed(
    two_revisions: dict[str, str], hf_token: str, tmp_path: Path
) -> None:
    repo_id = two_revisions["repo_id"]
    folder = tmp_path / "ts"
    init_taskset(_write_jsonl(tmp_path / "r.jsonl", _rows(2)), folder, env="arith")
    with pytest.raises(TasksetError, match=r"tag 'v1' already exists .* Nothing was pushed"):
        push_taskset(folder, repo_id, tag="v1", token=hf_token)
    assert _head(repo_id, hf_token) == two_revisions["v2"]


def test_push_to_a_branch_leaves_main_alone(
    two_revisions: dict[str, str], hf_token: str, tmp_path: Path
) -> None:
    repo_id = two_revisions["repo_id"]
    folder = tmp_path / "ts"
    init_taskset(_write_jsonl(tmp_path / "r.jsonl", _rows(3, 10)), folder, env="arith")
    result = cli.invoke(
        app,
        ["taskset", "push", str(folder), repo_id, "--branch", "dev", "--json"],
        env={"HF_TOKEN": hf_token},
    )
    assert result.exit_code == 0, result.output
    pushed = json.loads(result.output)
    assert pushed["branch"] == "dev"
    assert load_taskset(f"{repo_id}@dev").ref.commit_sha == pushed["commit_sha"]
    assert _head(repo_id, hf_token) == two_revisions["v2"]


def test_push_without_a_token_or_with_a_bad_one_publishes_nothing(
    hub_server: HubServer, hf_token: str, repo_id: str, tmp_path: Path
) -> None:
    folder = tmp_path / "ts"
    init_taskset(_write_jsonl(tmp_path / "r.jsonl", _rows(2)), folder, env="arith")
    with pytest.raises(TasksetError, match=re.escape("taskset push needs a Hub token")):
        push_taskset(folder, repo_id)
    with pytest.raises(TasksetError, match=re.escape("the Hub refused the token (HTTP 401)")):
        push_taskset(folder, repo_id, token="hf_not_a_valid_token_at_all")
    result = cli.invoke(app, ["taskset", "push", str(folder), repo_id], env={"HF_TOKEN": ""})
    assert result.exit_code == 1
    assert "TasksetError: taskset push needs a Hub token" in result.output
    assert not HfApi(token=hf_token).repo_exists(repo_id, repo_type="dataset")


def test_push_of_an_invalid_folder_publishes_nothing(
    hub_server: HubServer, hf_token: str, repo_id: str, tmp_path: Path
) -> None:
    folder = tmp_path / "ts"
    init_taskset(_write_jsonl(tmp_path / "r.jsonl", _rows(3)), folder, env="arith")
    rows = _rows(3)
    rows[1]["reset"] = "not json"
    _write_jsonl(folder / "data" / "train.jsonl", rows)
    with pytest.raises(SchemaError, match=r"train row 1 .*field 'reset'"):
        push_taskset(folder, repo_id, token=hf_token)
    assert not HfApi(token=hf_token).repo_exists(repo_id, repo_type="dataset")


def test_private_taskset_needs_a_token(
    hub_server: HubServer, hf_token: str, repo_id: str, tmp_path: Path
) -> None:
    folder = tmp_path / "ts"
    init_taskset(_write_jsonl(tmp_path / "r.jsonl", _rows(2)), folder, env="arith")
    sha = push_taskset(folder, repo_id, token=hf_token, private=True).commit_sha
    assert HfApi(token=hf_token).repo_info(repo_id, repo_type="dataset").private is True
    with pytest.raises(TasksetNotFound, match="private and no valid token was given"):
        load_taskset(f"{repo_id}@main", token=False)  # type: ignore[arg-type]
    with pytest.raises(TasksetError, match="refused the token"):
        load_taskset(f"{repo_id}@main", token="hf_not_a_valid_token_at_all")
    assert load_taskset(f"{repo_id}@main", token=hf_token).ref.commit_sha == sha
    shown = cli.invoke(app, ["taskset", "show", repo_id], env={"HF_TOKEN": hf_token})
    assert shown.exit_code == 0 and sha in shown.output


def test_missing_repo_and_revision_are_clear(two_revisions: dict[str, str]) -> None:
    with pytest.raises(TasksetNotFound, match="'testorg/no-such-taskset' was not found"):
        load_taskset("testorg/no-such-taskset@main")
    with pytest.raises(TasksetNotFound, match="has no revision 'no-such-tag'"):
        load_taskset(f"{two_revisions['repo_id']}@no-such-tag")
    result = cli.invoke(app, ["taskset", "show", f"{two_revisions['repo_id']}@no-such-tag"])
    assert result.exit_code == 1
    assert "TasksetNotFound:" in result.output and "no-such-tag" in result.output


def test_a_hub_dataset_with_bad_rows_names_the_row_and_field(
    hub_server: HubServer, hf_token: str, repo_id: str
) -> None:
    api = HfApi(token=hf_token)
    api.create_repo(repo_id, repo_type="dataset")
    rows = _rows(3)
    rows[2] = {"task_id": "x", "reset": {}, "difficulty": 3}  # not a Task field
    sha = api.create_commit(
        repo_id,
        [
            CommitOperationAdd(
                "data/train.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode()
            )
        ],
        commit_message="raw upload",
        repo_type="dataset",
    ).oid
    with pytest.raises(SchemaError, match=r"train row 2 \(task_id='x'\).*field 'difficulty'"):
        load_taskset(f"{repo_id}@{sha}")


def test_a_pinned_revision_loads_offline_from_the_cache(two_revisions: dict[str, str]) -> None:
    repo_id, v1 = two_revisions["repo_id"], two_revisions["v1"]
    online = load_taskset(f"{repo_id}@{v1}")  # fills the cache (already there from the fixture)
    code = (
        "import json, sys, taskhub\n"
        "ts = taskhub.load_taskset(sys.argv[1])\n"
        "print(json.dumps({'sha': ts.ref.commit_sha, 'fingerprint': ts.ref.fingerprint,\n"
        "                  'ids': [t.task_id for t in ts.tasks('train')]}))\n"
    )
    # HF_HUB_OFFLINE is read when huggingface_hub is imported: a fresh interpreter sees it.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    out = subprocess.run(
        [sys.executable, "-c", code, f"{repo_id}@{v1}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    offline = json.loads(out.stdout)
    assert offline["sha"] == v1
    assert offline["fingerprint"] == online.ref.fingerprint
    assert offline["ids"] == [t.task_id for t in online.tasks("train")]
    missing = subprocess.run(
        [sys.executable, "-c", code, f"{repo_id}@{'0' * 40}"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0
    assert "is not in the local cache and the Hub cannot be reached" in missing.stderr
