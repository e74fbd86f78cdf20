"""Tasksets as Hub RL environment datasets: environment.yaml (hf-rl-env-0.1) and the card tags."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from huggingface_hub import HfApi, hf_hub_download
from typer.testing import CliRunner

from taskhub import (
    ConfigError,
    EvalConfig,
    SchemaError,
    evaluate,
    init_taskset,
    load_taskset,
    push_taskset,
)
from taskhub._cli import app
from taskhub.hub._common import split_readme
from tests.hub.hub_server import HubServer

ROWS = [
    {"task_id": "add-1", "reset": {"seed": 0, "family": "add", "difficulty": 1}, "answer": "37"},
    {"task_id": "add-2", "reset": {"seed": 0, "family": "add", "difficulty": 2}, "answer": "331"},
]
cli = CliRunner()


def _rows(folder: Path) -> Path:
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def _tags(folder: Path) -> list[str]:
    return split_readme((folder / "README.md").read_text())[0]["tags"]


def test_init_declares_a_space_env_in_the_documented_format(tmp_path: Path) -> None:
    folder = tmp_path / "ts"
    taskset = init_taskset(_rows(tmp_path), folder, env="owner/arith-env", split="test")
    declared = yaml.safe_load((folder / "environment.yaml").read_text())
    # the Hub's documentation of environment datasets: spec_version and a non-empty list of
    # environments, each with an id and its frameworks; OpenEnv names a manifest, a mode and
    # the Space serving it
    assert declared == {
        "spec_version": "hf-rl-env-0.1",
        "environments": [
            {
                "id": "ts",
                "title": "ts",
                "config_name": "default",
                "splits": ["test"],
                "frameworks": {
                    "openenv": {
                        "manifest": "openenv.yaml",
                        "mode": "space",
                        "space_id": "owner/arith-env",
                    }
                },
            }
        ],
    }
    assert _tags(folder)[:2] == ["rl-environment", "openenv"]
    assert taskset.environment is not None and taskset.environment.env_spec == "owner/arith-env"


def test_a_builtin_env_is_declared_only_with_a_space_or_an_image(tmp_path: Path) -> None:
    plain = init_taskset(_rows(tmp_path), tmp_path / "plain", env="arith", split="test")
    assert plain.environment is None and not (tmp_path / "plain" / "environment.yaml").exists()
    assert "rl-environment" not in _tags(tmp_path / "plain")
    result = cli.invoke(
        app,
        ["taskset", "init", str(_rows(tmp_path)), str(tmp_path / "cli"), "--env", "arith"],
    )
    assert "not declared as a Hub RL environment" in result.output
    image = init_taskset(
        _rows(tmp_path), tmp_path / "image", env="arith", split="test", image="reg/arith:1"
    )
    block = yaml.safe_load((tmp_path / "image" / "environment.yaml").read_text())
    assert block["environments"][0]["frameworks"]["openenv"] == {
        "manifest": "openenv.yaml",
        "mode": "container",
        "image": "reg/arith:1",
    }
    assert image.environment is not None and image.environment.image == "reg/arith:1"
    with pytest.raises(SchemaError, match="not both"):
        init_taskset(
            _rows(tmp_path), tmp_path / "both", env="arith", space="o/s", image="i", force=True
        )


def test_an_image_env_is_named_when_taskhub_cannot_run_it(tmp_path: Path) -> None:
    folder = tmp_path / "ts"
    init_taskset(_rows(tmp_path), folder, env="arith", split="test", image="reg/arith:1")
    readme = (folder / "README.md").read_text()
    (folder / "README.md").write_text(readme.replace("  env: arith\n", ""))
    assert load_taskset(str(folder)).card.env is None
    with pytest.raises(ConfigError, match=re.escape("container image 'reg/arith:1'")):
        evaluate(EvalConfig(model="scripted/oracle", taskset=str(folder)), run_dir=tmp_path / "r")


def test_a_bad_environment_yaml_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "ts"
    init_taskset(_rows(tmp_path), folder, env="owner/env", split="test")
    (folder / "environment.yaml").write_text("spec_version: hf-rl-env-0.1\nenvironments: []\n")
    with pytest.raises(SchemaError, match="environment.yaml: field 'environments'"):
        load_taskset(str(folder))
    (folder / "environment.yaml").write_text("spec_version: v9\nenvironments: []\n")
    with pytest.raises(SchemaError, match="spec_version 'v9' is not one taskhub reads"):
        load_taskset(str(folder))


def test_push_declares_the_env_and_load_finds_it(
    hub_server: HubServer,
    hf_token: str,
    make_repo_id: Callable[[], str],
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ts"
    init_taskset(_rows(tmp_path), folder, env="arith", split="test")  # not declared locally
    repo_id = make_repo_id()
    result = push_taskset(folder, repo_id, token=hf_token, space="owner/arith-env")
    assert {"environment.yaml", "README.md"} <= set(result.files)
    files = HfApi(token=hf_token).list_repo_files(repo_id, repo_type="dataset")
    assert "environment.yaml" in files
    card = Path(hf_hub_download(repo_id, "README.md", repo_type="dataset", token=hf_token))
    assert split_readme(card.read_text())[0]["tags"][:2] == ["rl-environment", "openenv"]
    assert not (folder / "environment.yaml").exists()  # the local folder is left as it was

    # a dataset whose card names no env runs on the Space its environment.yaml declares
    bare = tmp_path / "bare"
    init_taskset(_rows(tmp_path), bare, env="owner/arith-env", split="test")
    readme = (bare / "README.md").read_text()
    (bare / "README.md").write_text(readme.replace("  env: owner/arith-env\n", ""))
    other = make_repo_id()
    push_taskset(bare, other, token=hf_token)
    loaded = load_taskset(other)
    assert loaded.ref.kind == "hub" and loaded.card.env == "owner/arith-env"
    assert loaded.environment is not None and loaded.environment.spec_version == "hf-rl-env-0.1"
