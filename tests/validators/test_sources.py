"""Submissions from git (a local bare repository over file://, at a commit) and in isolated
virtual environments."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.validators.conftest import ENVS, FAST, QUIZ, pin_installed

GIT = [
    "git",
    "-c",
    "user.name=taskhub",
    "-c",
    "user.email=taskhub@example.org",
    "-c",
    "init.defaultBranch=main",
]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def bare_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A bare repo holding envs/good: commit 1 valid, commit 2 with a broken openenv.yaml."""
    work = tmp_path_factory.mktemp("git-work")
    shutil.copytree(ENVS / "_lite", work / "envs" / "_lite")
    shutil.copytree(ENVS / "good", work / "envs" / "good")
    git("init", "-q", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "good env", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    (work / "envs" / "good" / "openenv.yaml").write_text("name: [broken\n")
    git("commit", "-q", "-am", "break the manifest", cwd=work)
    second = git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path_factory.mktemp("git-bare") / "envs.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=work)
    return bare, first, second


def test_parse_git_sources() -> None:
    from taskhub.validators._sources import parse_git

    source = parse_git("git+file:///srv/envs.git@abc123#subdirectory=envs/good")
    assert source is not None
    assert (source.url, source.revision, source.subdirectory) == (
        "file:///srv/envs.git",
        "abc123",
        "envs/good",
    )
    assert parse_git("https://github.com/org/env.git@v1").revision == "v1"  # type: ignore[union-attr]
    assert parse_git("git+ssh://git@host/org/env.git").revision is None  # type: ignore[union-attr]
    assert parse_git("/some/folder") is None and parse_git("http://127.0.0.1:8000") is None


def test_validate_a_git_source_at_each_commit(bare_repo: tuple[Path, str, str]) -> None:
    from taskhub.validators import ValidationConfig, validate

    bare, first, second = bare_repo
    config = ValidationConfig(
        taskset=str(QUIZ), checks=["static.manifest", "protocol.episode"], **FAST
    )
    good = validate(f"git+{bare.as_uri()}@{first}#subdirectory=envs/good", config)
    assert good.target_kind == "git" and first in good.target
    assert good.verdict == "pass", [(c.id, c.summary) for c in good.checks if c.status != "pass"]
    assert {c.id for c in good.checks} >= {"static.manifest", "protocol.episode"}
    broken = validate(f"git+{bare.as_uri()}@{second}#subdirectory=envs/good", config)
    manifest = next(c for c in broken.checks if c.id == "static.manifest")
    assert manifest.status == "fail" and "not valid YAML" in manifest.summary
    assert broken.source_digest != good.source_digest


def test_a_git_revision_that_does_not_exist_is_an_error(
    bare_repo: tuple[Path, str, str],
) -> None:
    from taskhub.validators import validate

    report = validate(f"git+{(bare_repo[0]).as_uri()}@{'0' * 40}")
    assert report.verdict == "error" and report.exit_code == 3 and report.error is not None
    assert "git checkout" in report.error.message


def test_submissions_file_reads_git_rows(bare_repo: tuple[Path, str, str], tmp_path: Path) -> None:
    from taskhub.validators import read_submissions

    bare, first, _ = bare_repo
    path = tmp_path / "subs.csv"
    path.write_text(
        "name,git,commit,subdirectory,url,folder\n"
        f"a,{bare.as_uri()},{first},envs/good,,\n"
        "b,,,,http://127.0.0.1:1,\n"
        f"c,,,,,{ENVS / 'good'}\n"
    )
    subs = read_submissions(path)
    assert subs[0].target == f"git+{bare.as_uri()}@{first}#subdirectory=envs/good"
    assert subs[1].target == "http://127.0.0.1:1" and subs[2].target == str(ENVS / "good")


def helper_env(root: Path, version: str) -> Path:
    """The good env plus a vendored package that only its own requirements provide."""
    folder = root / f"helper_v{version[0]}"
    shutil.copytree(ENVS / "good", folder)
    pin_installed(folder / "server" / "requirements.txt")
    package = folder / "vendor" / "helperlib"
    (package / "helperlib").mkdir(parents=True)
    (package / "helperlib" / "__init__.py").write_text(f'VERSION = "{version}"\n')
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "helperlib"\nversion = "{version}"\n'
        '[tool.setuptools]\npackages = ["helperlib"]\n'
    )
    requirements = folder / "server" / "requirements.txt"
    requirements.write_text(requirements.read_text() + "./vendor/helperlib\n")
    app = folder / "server" / "app.py"
    app.write_text(
        app.read_text()
        .replace(
            'name="good")',
            'name="good", description=f"uses helperlib {helperlib.VERSION}")',
        )
        .replace("from server.quiz_environment", "import helperlib\n\nfrom server.quiz_environment")
    )
    return folder


@pytest.mark.slow  # real pip installs into fresh venvs: the slow pass of .ci/run runs it
def test_isolated_venvs_give_each_submission_its_own_packages(tmp_path: Path) -> None:
    from taskhub.validators import (
        BatchConfig,
        ValidationConfig,
        read_submissions,
        validate_batch_async,
    )

    root = tmp_path / "envs"
    root.mkdir()
    shutil.copytree(ENVS / "_lite", root / "_lite")
    v1, v2 = helper_env(root, "1.0"), helper_env(root, "2.0")
    subs_file = tmp_path / "subs.jsonl"
    subs_file.write_text(
        json.dumps({"name": "v1", "folder": str(v1)})
        + "\n"
        + json.dumps({"name": "v2", "folder": str(v2)})
        + "\n"
    )
    validation = ValidationConfig(taskset=str(QUIZ), checks=["protocol.metadata"], **FAST)

    def run(isolated: bool, out: Path) -> dict[str, dict]:  # type: ignore[type-arg]
        config = BatchConfig(
            output=out,
            workers=2,
            deadline_s=120,
            isolated_venv=isolated,
            offline=True,
            validation=validation,
        )
        asyncio.run(validate_batch_async(read_submissions(subs_file), config))
        return {n: json.loads((out / f"{n}.json").read_text()) for n in ("v1", "v2")}

    shared = run(False, tmp_path / "shared")
    for report in shared.values():
        startup = next(c for c in report["checks"] if c["id"] == "runtime.startup")
        assert startup["status"] == "fail"
        assert "No module named 'helperlib'" in json.dumps(startup["evidence"])
    isolated = run(True, tmp_path / "isolated")
    for name, version in (("v1", "1.0"), ("v2", "2.0")):
        report = isolated[name]
        assert report["verdict"] == "pass", report["checks"]
        assert report["env_metadata"]["description"] == f"uses helperlib {version}"
    import importlib.util

    assert importlib.util.find_spec("helperlib") is None  # nothing leaked into taskhub's env
