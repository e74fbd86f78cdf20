"""``--env-provider``: OpenEnv's own providers start the env (uv here; Docker where it answers).

The uv test runs the real ``uv`` (a PyPI package of the test extra) through OpenEnv's
``UVProvider``: an env project whose dependencies uv installs into an isolated environment of
its own. Tests never reach the internet, so uv installs from a local folder of wheels packed
from this interpreter's own installed distributions (``UV_OFFLINE``, ``UV_NO_INDEX``).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from typer.testing import CliRunner

from taskhub import EnvLaunchError, EvalConfig, evaluate, read_manifest, read_results
from taskhub._cli import app
from tests.taskhub.test_runner import write_taskset

ROOT = Path(__file__).resolve().parents[2]
SERVER_DEPENDENCIES = ["starlette", "uvicorn", "websockets"]

APP = """
import sys

from starlette.responses import JSONResponse

from server.fake import FakeEnv


class Isolated(FakeEnv):
    async def _metadata(self, request):
        return JSONResponse({"name": "uv-fake", "description": sys.prefix, "version": "1"})


app = Isolated().app
"""


def _closure(names: list[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``names`` need to run (markers evaluated, no extras)."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(seen.values())


def _repack(dist: importlib.metadata.Distribution, folder: Path) -> Path:
    """A wheel of an installed distribution: its files and a RECORD with fresh hashes."""
    info = next(
        f for f in dist.files or [] if f.name == "WHEEL" and f.parent.suffix == ".dist-info"
    )
    wheel_meta = Path(str(dist.locate_file(info))).read_text()
    tag = next(
        line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")
    )
    name = dist.metadata["Name"].replace("-", "_").lower()
    path = folder / f"{name}-{dist.version}-{tag}.whl"
    record_name = f"{info.parent}/RECORD"
    rows = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for file in dist.files or []:
            text = str(file)
            if (
                text.startswith("..")
                or "__pycache__" in text
                or file.name in ("RECORD", "direct_url.json")
            ):
                continue
            source = Path(str(dist.locate_file(file)))
            if not source.is_file():
                continue
            data = source.read_bytes()
            wheel.writestr(text, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((text, f"sha256={digest}", str(len(data))))
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([*rows, (record_name, "", "")])
        wheel.writestr(record_name, out.getvalue())
    return path


@pytest.fixture(scope="module")
def uv_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An OpenEnv env project served by a scriptable FakeEnv, and the wheels it depends on."""
    if shutil.which("uv") is None:
        pytest.fail("uv is missing: it comes with the test extra (pip install -e '.[test]')")
    root = tmp_path_factory.mktemp("uv")
    wheels = root / "wheels"
    wheels.mkdir()
    for dist in _closure(SERVER_DEPENDENCIES):
        _repack(dist, wheels)
    project = root / "uv-fake"
    (project / "server").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "uv-fake"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        f"dependencies = {json.dumps(SERVER_DEPENDENCIES)}\n\n[tool.uv]\npackage = false\n"
    )
    (project / "openenv.yaml").write_text(
        "spec_version: 1\nname: uv-fake\ntype: space\nruntime: fastapi\n"
        "app: server.app:app\nport: 8000\n"
    )
    (project / "server" / "__init__.py").write_text("")
    shutil.copy(ROOT / "tests" / "servers.py", project / "server" / "fake.py")
    (project / "server" / "app.py").write_text(APP)
    return project


@pytest.fixture
def offline_uv(uv_project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """uv pointed at the local wheels only, with this Python and a private cache."""
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(uv_project.parent / "wheels"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("UV_PYTHON", sys.executable)
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "never")
    return uv_project


def test_uv_provider_runs_the_env_in_its_own_environment(offline_uv: Path, tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 4)
    config = EvalConfig(
        model="scripted/oracle", taskset=str(taskset), env=str(offline_uv), env_provider="uv"
    )
    result = evaluate(config, output_dir=tmp_path / "runs")
    assert result.manifest.status == "completed"
    records = read_results(result.run_dir)
    assert len(records) == 4 and all(r.reward == 1.0 for r in records)
    env = read_manifest(result.run_dir).env
    assert env is not None and env.provider == "uv" and env.kind == "folder"
    assert env.metadata is not None and env.metadata["name"] == "uv-fake"
    # the server ran in uv's environment, not in this Python
    assert env.metadata["description"] != sys.prefix
    with pytest.raises(httpx.ConnectError):  # and it was stopped when the run ended
        httpx.get(env.urls[0] + "/health", timeout=5)


def test_uv_provider_failure_is_an_error_naming_the_provider(
    offline_uv: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(offline_uv, broken)
    pyproject = broken / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"websockets"', '"no-such-dist-xyz"'))
    taskset = write_taskset(tmp_path / "ts", 1)
    result = CliRunner().invoke(
        app,
        ["eval", "scripted/oracle", str(broken), str(taskset), "--env-provider", "uv"]
        + ["-o", str(tmp_path / "runs")],
    )
    assert result.exit_code == 1
    # after the progress lines ("taskhub: starting env ..."), the error, naming the provider
    errors = [line for line in result.stderr.splitlines() if not line.startswith("taskhub: ")]
    assert errors[0].startswith("EnvLaunchError: env provider 'uv' could not start"), result.stderr


def test_unknown_providers_and_credential_options_are_refused(tmp_path: Path) -> None:
    taskset = write_taskset(tmp_path / "ts", 1)
    with pytest.raises(
        EnvLaunchError, match="unknown env provider 'dokcer'.*Did you mean 'docker'"
    ):
        evaluate(
            EvalConfig(
                model="scripted/oracle", taskset=str(taskset), env="arith", env_provider="dokcer"
            ),
            output_dir=tmp_path,
        )
    result = CliRunner().invoke(
        app,
        ["eval", "scripted/oracle", "some/image:1", str(taskset), "--env-provider", "daytona"]
        + ["--env-provider-option", "api_key=abc", "-o", str(tmp_path)],
    )
    assert result.exit_code == 1
    assert "option 'api_key' looks like a credential" in result.stderr
    folder = CliRunner().invoke(
        app,
        ["eval", "scripted/oracle", "arith", str(taskset), "--env-provider", "docker"]
        + ["-o", str(tmp_path)],
    )
    assert folder.exit_code == 1
    assert "runs an image, not the folder" in folder.stderr or "Docker is not available" in (
        folder.stderr
    )


def _docker_engine() -> str | None:
    """None when a container engine answers, else why not."""
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    try:
        answer = subprocess.run(["docker", "version"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "docker version did not answer within 20 s"
    if answer.returncode != 0:
        return "no container engine answers: " + (answer.stderr.strip().splitlines() or ["?"])[-1]
    return None


def test_docker_provider_runs_the_builtin_env_image(tmp_path: Path) -> None:
    reason = _docker_engine()
    if reason is not None:
        pytest.skip(reason)
    image = "taskhub-test-arith:latest"
    folder = ROOT / "taskhub" / "_envs" / "arith"
    subprocess.run(
        [
            "docker",
            "build",
            "-q",
            "-t",
            image,
            "-f",
            str(folder / "server" / "Dockerfile"),
            str(folder),
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    result = evaluate(
        EvalConfig(
            model="scripted/oracle", taskset="arith", env=image, env_provider="docker", limit=3
        ),
        output_dir=tmp_path,
    )
    assert result.manifest.status == "completed" and result.summary.mean_reward == 1.0
    assert result.manifest.env is not None and result.manifest.env.kind == "image"
