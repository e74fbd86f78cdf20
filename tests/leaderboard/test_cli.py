"""`taskhub leaderboard build|serve`."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from typer.testing import CliRunner

from taskhub._cli import app

from .corpus import episode, write_run


def test_build_writes_a_site_and_says_where(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    result = CliRunner().invoke(
        app, ["leaderboard", "build", str(corpus), "-o", str(out), "--title", "Arena <b>"]
    )
    assert result.exit_code == 0, result.output
    assert "18 pages for 6 runs (39 episodes) and 2 validation reports" in result.output
    assert "<title>Models × tasksets · Arena &lt;b&gt;</title>" in (out / "index.html").read_text()


def test_build_fails_cleanly_on_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["leaderboard", "build", str(tmp_path / "nope"), "-o", str(tmp_path / "s")]
    )
    assert result.exit_code == 1
    assert "ConfigError" in result.output and "no such file" in result.output


def test_build_validate_checks_every_record(corpus: Path, tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs", "r", [episode("r", "t")])
    path = run / "episodes.jsonl"
    path.write_text(path.read_text().replace('"split":', '"surprise":1,"split":'))
    ok = CliRunner().invoke(app, ["leaderboard", "build", str(run), "-o", str(tmp_path / "a")])
    assert ok.exit_code == 0, ok.output
    strict = CliRunner().invoke(
        app, ["leaderboard", "build", str(run), "-o", str(tmp_path / "b"), "--validate"]
    )
    assert strict.exit_code == 1 and "ResultsError" in strict.output


def test_csv_cells_never_start_a_formula(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs", "r", [episode("r", "=1+1")], model="x/=HYPERLINK(0)")
    CliRunner().invoke(app, ["leaderboard", "build", str(run), "-o", str(tmp_path / "s")])
    with (tmp_path / "s" / "data" / "leaderboard.csv").open(newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["model"] == "x/=HYPERLINK(0)"
    (tasks,) = (tmp_path / "s" / "data" / "runs").glob("*.tasks.csv")
    with tasks.open(newline="") as f:
        assert next(csv.DictReader(f))["task_id"] == "'=1+1"


def test_serve_serves_the_site(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    CliRunner().invoke(app, ["leaderboard", "build", str(corpus), "-o", str(out)])
    taskhub = Path(sys.executable).parent / "taskhub"
    server = subprocess.Popen(
        [str(taskhub), "leaderboard", "serve", str(out), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(url.group(0) + "index.html", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert response.status_code == 200 and "Models × tasksets" in response.text
        css = httpx.get(url.group(0) + "assets/style.css", timeout=5)
        assert css.status_code == 200
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(10)
        if server.stderr is not None:
            server.stderr.close()


def test_serve_refuses_a_folder_that_is_not_a_site(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["leaderboard", "serve", str(tmp_path)])
    assert result.exit_code == 1 and "has no index.html" in result.output
