"""A real wheel carries every module, the built-in tasksets and the reference envs."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# source folder -> where it lands in the wheel
LAYOUT = {
    "taskhub": "taskhub",
    "rewards": "taskhub/rewards",
    "validators": "taskhub/validators",
    "leaderboard": "taskhub/leaderboard",
    "tasksets": "taskhub/tasksets",
}
SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}


def source_files() -> set[str]:
    expected = set()
    for folder, target in LAYOUT.items():
        base = ROOT / folder
        for path in base.rglob("*"):
            if path.is_file() and not SKIP_PARTS & set(path.parts) and path.suffix != ".pyc":
                expected.add(f"{target}/{path.relative_to(base).as_posix()}")
    return expected


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("taskhub_openenv-*.whl")
    return path


def test_wheel_carries_every_source_and_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(source_files() - names)
    assert missing == []
    assert not [
        n
        for n in names
        if n.split("/")[0] in ("rewards", "validators", "leaderboard", "tasksets", "tests")
    ]


def test_installed_wheel_runs_without_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "import taskhub, json\n"
        "from taskhub.env import builtin_envs\n"
        "ts = taskhub.load_taskset('arith')\n"
        "print(json.dumps({'file': taskhub.__file__, 'taskset': ts.ref.path,\n"
        "  'rows': sum(len(t) for t in ts.splits.values()),\n"
        "  'envs': {k: str(v) for k, v in builtin_envs().items()}}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=True,
    )
    import json

    info = json.loads(out.stdout)
    assert info["file"].startswith(str(target))
    assert info["taskset"].startswith(str(target)) and info["rows"] >= 200
    assert set(info["envs"]) >= {"arith", "gridworld"}
    for path in info["envs"].values():
        assert path.startswith(str(target))
        assert (Path(path) / "openenv.yaml").is_file() and (Path(path) / "server/app.py").is_file()
