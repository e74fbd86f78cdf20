"""A batch an organizer can run: safe report names, submissions validated in a copy, signals
that stop every worker and env server, clone failures as errors, a ranking by how far each env
got, isolated installs that keep pip's output and have their own time limit."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from taskhub import ConfigError, ValidationReport
from tests.validators.conftest import ENVS, FAST, QUIZ, pin_installed

#: Short batch runs: a static check, and one that needs the launched server.
QUICK = {**FAST, "checks": ["static.layout", "protocol.health"]}


def processes_under(root: Path, *, wait_s: float = 0.0) -> list[str]:
    """Live processes whose working directory or command line is under ``root``.

    Args:
        root: The folder.
        wait_s: Look again for up to this long while some are found (a killed process takes
            a moment to go).
    """
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                cwd = os.readlink(f"/proc/{pid}/cwd")
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, IndexError):
                continue
            if state != "Z" and (cwd.startswith(str(root)) or str(root) in cmdline):
                found.append(f"{pid}: {cmdline[:200]}")
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def tree_listing(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with its content digest."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def corpus_copy(tmp_path: Path, *names: str) -> Path:
    """The corpus envs ``names`` (and the module they share) copied under ``tmp_path``."""
    root = tmp_path / "envs"
    shutil.copytree(ENVS / "_lite", root / "_lite", ignore=shutil.ignore_patterns("__pycache__"))
    for name in names:
        shutil.copytree(ENVS / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_no_submission_name_can_overwrite_the_batch_files_or_another_report(
    tmp_path: Path,
) -> None:
    from taskhub.validators import (
        BatchConfig,
        Submission,
        ValidationConfig,
        read_submissions,
        validate_batch,
    )

    names = ["summary", "LOGS", "rfc008", "", "日本語", "../../escape", "good"]
    stems = [Submission(name=n or "x", target="t").file_stem for n in names]
    assert stems[-1] == "good" and stems[5] == "escape"
    assert all("/" not in s and not s.startswith(".") for s in stems)
    assert len({s.casefold() for s in stems}) == len(stems)
    assert stems[0].startswith("summary-") and stems[1].startswith("LOGS-")
    assert stems[4].startswith("submission-")
    # two names that map to one report file (here: in another case) are refused
    clash = tmp_path / "clash.jsonl"
    clash.write_text('{"name": "Good", "url": "http://x"}\n{"name": "good", "url": "http://y"}\n')
    with pytest.raises(ConfigError, match="same report file"):
        read_submissions(clash)
    # a submission named summary gets its own report; the batch's summary stays the summary
    submissions = [
        Submission(name="summary", target=str(ENVS / "good")),
        Submission(name="logs", target=str(ENVS / "good")),
    ]
    out = tmp_path / "out"
    config = BatchConfig(
        output=out, workers=2, validation=ValidationConfig(taskset=str(QUIZ), **QUICK)
    )
    rows = validate_batch(submissions, config)
    assert sorted(r["name"] for r in rows) == ["logs", "summary"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["schema_version"] == 2 and summary["validated"] == 2
    assert (out / "logs").is_dir()
    for row in rows:
        report = ValidationReport.model_validate_json((out / row["report"]).read_text())
        assert report.name == row["name"] and row["report"] != "summary.json"
    with pytest.raises(ConfigError, match="same report file"):
        validate_batch([submissions[0], submissions[0]], config)


def test_submissions_are_validated_in_a_copy_never_in_place(tmp_path: Path) -> None:
    from taskhub.validators import BatchConfig, Submission, ValidationConfig, validate_batch

    root = corpus_copy(tmp_path, "good")
    folder = root / "good"
    app = folder / "server" / "app.py"
    # an env that writes into its own folder when it starts
    app.write_text(
        app.read_text().replace(
            "app = create_app(",
            '__import__("pathlib").Path("written-at-startup.txt").write_text("x")\n'
            "app = create_app(",
        )
    )
    before = tree_listing(root)
    out = tmp_path / "out"
    config = BatchConfig(output=out, validation=ValidationConfig(taskset=str(QUIZ), **QUICK))
    rows = validate_batch([Submission(name="writes", target=str(folder))], config)
    report = ValidationReport.model_validate_json((out / rows[0]["report"]).read_text())
    startup = next(c for c in report.checks if c.id == "runtime.startup")
    assert startup.status == "pass", startup.summary  # it ran, and wrote into its copy
    assert report.target == str(folder) and report.target_kind == "folder"
    assert tree_listing(root) == before
    assert not (out / ".work" / "writes").exists()  # the copy is gone too


def test_a_clone_that_fails_is_an_error_not_an_unsupported_target(tmp_path: Path) -> None:
    from taskhub.validators import BatchConfig, Submission, ValidationConfig, validate_batch

    missing = (tmp_path / "no-such-repo.git").as_uri()
    out = tmp_path / "out"
    config = BatchConfig(output=out, validation=ValidationConfig(**QUICK))
    rows = validate_batch([Submission(name="gone", target=f"git+{missing}@main")], config)
    assert (rows[0]["verdict"], rows[0]["exit_code"]) == ("error", 3)
    report = ValidationReport.model_validate_json((out / "gone.json").read_text())
    assert report.target_kind == "git" and report.error is not None
    assert "git clone" in report.error.message


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_every_worker_and_env_server(tmp_path: Path, stop: signal.Signals) -> None:
    root = corpus_copy(tmp_path, "hangs", "good")
    subs = tmp_path / "subs.jsonl"
    subs.write_text(
        json.dumps({"name": "hangs", "folder": str(root / "hangs")})
        + "\n"
        + json.dumps({"name": "good", "folder": str(root / "good")})
        + "\n"
    )
    out = tmp_path / "out"
    taskhub = str(Path(sys.executable).parent / "taskhub")
    argv = [taskhub, "validate", "--batch", str(subs), "--out", str(out), "--workers", "2"]
    argv += ["--taskset", str(QUIZ), "--startup-timeout", "120", "--check", "protocol.health"]
    batch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait until the hung env's server runs (in its copy under the batch's work folder) and
        # its worker has told the batch so
        server = out / ".work" / "hangs" / "src" / "hangs"
        pids = out / ".work" / "hangs.pids"
        deadline = time.monotonic() + 120
        while not (processes_under(server) and pids.is_file() and pids.read_text().strip()):
            assert batch.poll() is None, batch.communicate()
            assert time.monotonic() < deadline, "the hung env's server never started"
            time.sleep(0.2)
        batch.send_signal(stop)
        _, stderr = batch.communicate(timeout=60)
    finally:
        if batch.poll() is None:
            batch.kill()
    assert batch.returncode == 128 + stop, stderr
    assert "every worker and env server was stopped" in stderr
    # nothing the batch started survives it
    assert processes_under(out, wait_s=10) == []
    assert not (out / "hangs.json").exists()  # left for a resumed run
    assert json.loads((out / "summary.json").read_text())["pending"] >= 1


def sdist(root: Path, name: str, setup_py: str | None = None) -> Path:
    """A source distribution ``name-1.0.tar.gz`` of a one-module package, built by hand."""
    import tarfile

    source = root / f"{name}-1.0"
    (source / name).mkdir(parents=True)
    (source / name / "__init__.py").write_text('VERSION = "1.0"\n')
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "1.0"\n[tool.setuptools]\npackages = ["{name}"]\n'
    )
    if setup_py is not None:
        (source / "setup.py").write_text(setup_py)
    archive = root / f"{name}-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname=source.name)
    return archive


@pytest.mark.slow  # real pip installs into fresh venvs: the slow pass of .ci/run runs it
def test_isolated_installs_log_pip_share_a_wheel_cache_and_have_their_own_time_limit(
    tmp_path: Path,
) -> None:
    from taskhub.validators import BatchConfig, Submission, ValidationConfig, validate_batch

    wheels = tmp_path / "dist"
    wheels.mkdir()
    shared = sdist(wheels, "sharedlib")
    pinned = (
        f"sharedlib @ {shared.as_uri()}#sha256={hashlib.sha256(shared.read_bytes()).hexdigest()}"
    )
    slow = sdist(
        wheels, "slowlib", "import time\nfrom setuptools import setup\ntime.sleep(600)\nsetup()\n"
    )
    root = corpus_copy(tmp_path, "good")
    for name, requirement in (
        ("a", pinned),
        ("b", pinned),
        ("slow", str(slow)),
        ("late", str(slow)),
    ):
        shutil.copytree(root / "good", root / name)
        requirements = root / name / "server" / "requirements.txt"
        pin_installed(requirements)
        requirements.write_text(requirements.read_text() + requirement + "\n")
    out = tmp_path / "out"
    config = BatchConfig(
        output=out,
        workers=2,  # a, then b, beside the slow one
        isolated_venv=True,
        offline=True,
        install_timeout_s=40,
        validation=ValidationConfig(taskset=str(QUIZ), **QUICK),
    )
    started = time.monotonic()
    rows = {
        r["name"]: r
        for r in validate_batch(
            [Submission(name=n, target=str(root / n)) for n in ("a", "slow", "b")]
            + [Submission(name="late", target=str(root / "late"), deadline_s=25)],
            config,
        )
    }
    assert time.monotonic() - started < 400  # the slow build did not hold the batch
    logs = {n: (out / "logs" / f"{n}.log").read_text() for n in rows}
    # pip's own output is in each submission's log; the second install used the first's wheel
    assert "Building wheel for sharedlib" in logs["a"] and "Successfully installed" in logs["a"]
    assert "Using cached sharedlib-1.0-py3-none-any.whl" in logs["b"]
    assert f"--cache-dir {out / '.pip-cache'}" in logs["b"]
    assert rows["a"]["verdict"] == rows["b"]["verdict"] == "pass"
    # the install that ran out of its time limit says so; the static checks ran before it
    report = ValidationReport.model_validate_json((out / "slow.json").read_text())
    checks = {c.id: c for c in report.checks}
    assert report.verdict == "fail" and checks["static.layout"].status == "pass"
    startup = checks["runtime.startup"]
    assert startup.status == "fail" and startup.measured["prepare_timed_out"] is True
    assert "ran out of its 40s time limit" in startup.summary
    assert "slowlib" in json.dumps(startup.evidence)  # pip's last lines
    assert checks["protocol.health"].measured["blocked_by"] == "runtime.startup"
    # a deadline that falls during the install says that the install is what ran out
    late = ValidationReport.model_validate_json((out / "late.json").read_text())
    assert late.verdict == "error" and late.error is not None
    assert "still installing its requirements" in late.error.message
    assert [c.id for c in late.checks] == ["static.layout"]  # the static check stands
    assert processes_under(out, wait_s=10) == []  # the builds pip started were stopped too


def test_a_git_source_that_cannot_be_cloned_exits_3(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from taskhub._cli import app

    missing = (tmp_path / "no-such-repo.git").as_uri()
    result = CliRunner().invoke(app, ["validate", f"git+{missing}@main", "--json"])
    assert result.exit_code == 3, result.output
    report = ValidationReport.model_validate_json(result.stdout)
    assert report.verdict == "error" and "git clone" in (
        report.error.message if report.error else ""
    )


@pytest.mark.timeout(900)  # it may be the first to pay for the corpus batch (session fixture)
def test_skips_name_the_failure_that_caused_them_and_count_against_the_env(
    corpus_batch: dict[str, Any],
) -> None:
    from taskhub.validators import render_report

    crashed = corpus_batch["reports"]["crash_on_start"]
    skips = [
        c for c in crashed.checks if c.status == "skip" and not c.measured.get("not_implemented")
    ]
    by_id = {c.id: c for c in crashed.checks}

    def root(check_id: str) -> str:  # follow the chain of skips to the failure behind it
        found = by_id[check_id]
        blocker = found.measured.get("blocked_by")
        return root(blocker) if found.status == "skip" and blocker else check_id

    caused = [c for c in skips if c.level != "statistical"]
    assert {root(c.id) for c in caused} == {"runtime.startup"}, [(c.id, c.summary) for c in skips]
    # without a model the statistical checks do not apply, started or not: not counted
    assert all("blocked_by" not in c.measured for c in skips if c.level == "statistical")
    card = render_report(crashed)
    assert "1. The server did not start" in card
    assert "kept " in card.split("Passed:")[0]  # folded under the startup failure
    rows = corpus_batch["summary"]
    ranks = {r["name"]: r for r in rows}
    played = [r["rank"] for r in rows if r["reached"] == "played"]
    assert ranks["crash_on_start"]["reached"] == "none"
    assert ranks["crash_on_start"]["rank"] > max(played)
    assert ranks["crash_on_start"]["score"] < min(
        r["score"] for r in rows if r["verdict"] == "pass"
    )
    # RFC 008's ids no taskhub check implements are skips that say why
    good = {c.id: c for c in corpus_batch["reports"]["good"].checks}
    assert (
        good["static.sbom"].status == "skip" and "container engine" in good["static.sbom"].summary
    )
    assert "hub.cosign_signature" not in good  # a local report has no hub-lane id
