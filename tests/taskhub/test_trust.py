"""A taskset is data: the code its rows and card name runs only when the user trusts it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from taskhub import (
    ConfigError,
    EpisodeRecord,
    EvalConfig,
    RemoteCodeError,
    ResultsError,
    SchemaError,
    TasksetCard,
    TasksetError,
    evaluate,
    load_taskset,
    read_results,
    read_results_table,
    read_run,
    resume,
)
from taskhub._cli import app
from taskhub._templates import Templates
from taskhub._urls import redact_urls_in
from taskhub.training import TrainingEnv
from tests.servers import (
    CLOSE,
    FakeEnv,
    ModelScript,
    ModelServer,
    Reply,
    Session,
    counting_reset,
    observation,
)

ROOT = Path(__file__).resolve().parents[2]
cli = CliRunner()

EVILMOD = """\
from pathlib import Path
Path(__file__).with_name("EVILMOD_RAN").write_text("imported")

def score(completion):
    return 1.0
"""


def _taskset(folder: Path, *, row_rewards: list[str] | None, card: str = "") -> Path:
    """A one-split taskset of arith rows; ``row_rewards`` on the first row."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    lines = (ROOT / "tasksets" / "arith" / "data" / "test.jsonl").read_text().splitlines()[:2]
    rows = [json.loads(line) for line in lines]
    if row_rewards is not None:
        rows[0]["rewards"] = row_rewards
    (folder / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n"
        f"    path: data/test.jsonl\ntaskhub:\n  env: arith\n{card}---\n# evil\n"
    )
    (folder / "evilmod.py").write_text(EVILMOD)
    return folder


def test_a_row_that_imports_code_is_refused_naming_it(tmp_path: Path) -> None:
    folder = _taskset(tmp_path / "evil", row_rewards=["python:evilmod:score"])
    config = EvalConfig(model="scripted/oracle", taskset=str(folder))
    with pytest.raises(RemoteCodeError) as caught:
        evaluate(config, output_dir=tmp_path / "runs")
    message = str(caught.value)
    assert "test row 0 (task_id=" in message
    assert "'python:evilmod:score' (imports module 'evilmod')" in message
    assert "--trust-remote-code" in message
    assert not (folder / "EVILMOD_RAN").exists()
    assert not (tmp_path / "runs").exists()  # refused before anything is written


def test_card_rewards_and_an_env_folder_are_refused_too(tmp_path: Path) -> None:
    env_folder = ROOT / "taskhub" / "_envs" / "arith"
    card = "  rewards: ['trl:evilmod:score', 'exact']\n"
    folder = _taskset(tmp_path / "evil", row_rewards=None, card=card)
    readme = (folder / "README.md").read_text().replace("env: arith", f"env: {env_folder}")
    (folder / "README.md").write_text(readme)
    with pytest.raises(RemoteCodeError) as caught:
        evaluate(EvalConfig(model="scripted/oracle", taskset=str(folder)), output_dir=tmp_path)
    assert caught.value.specs == [
        f"card env: {env_folder}",
        "card rewards: trl:evilmod:score",
    ]
    # the user's own ENV and rewards replace the card's: nothing of the taskset runs
    result = evaluate(
        EvalConfig(
            model="scripted/oracle", taskset=str(folder), env="arith", rewards=["exact"], limit=1
        ),
        output_dir=tmp_path / "runs",
    )
    assert result.summary.outcomes["scored"] == 1


def test_training_env_refuses_untrusted_code(tmp_path: Path) -> None:
    folder = _taskset(tmp_path / "evil", row_rewards=["openenv:evilmod:Rubric"])
    with pytest.raises(RemoteCodeError, match="openenv:evilmod:Rubric"):
        TrainingEnv(load_taskset(str(folder)))
    TrainingEnv(load_taskset(str(folder)), rewards=["exact"])  # the user's rewards: fine


def test_show_and_check_list_the_code_a_taskset_runs(tmp_path: Path) -> None:
    folder = _taskset(tmp_path / "evil", row_rewards=["python:evilmod:score", "exact"])
    shown = cli.invoke(app, ["taskset", "show", str(folder)])
    assert shown.exit_code == 0, shown.output
    assert "runs code (1; evaluating it needs --trust-remote-code):" in shown.output
    assert "test row 0 (task_id=" in shown.output and "python:evilmod:score" in shown.output
    checked = cli.invoke(app, ["taskset", "check", str(folder), "--json"])
    assert checked.exit_code == 0, checked.output
    assert len(json.loads(checked.output)["remote_code"]) == 1
    assert not (folder / "EVILMOD_RAN").exists()
    clean = cli.invoke(app, ["taskset", "check", "arith"])
    assert "runs code" not in clean.output


def _taskhub(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "taskhub", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_current_directory_is_never_on_the_path(tmp_path: Path) -> None:
    folder = _taskset(tmp_path / "evil", row_rewards=["python:evilmod:score"])
    refused = _taskhub(["eval", "scripted/oracle", "auto", ".", "-o", "runs"], folder)
    assert refused.returncode == 1, refused.stderr
    assert "RemoteCodeError: taskset 'evil' would run code" in refused.stderr
    # trusted, the module is still not imported from the folder the run started in
    trusted = _taskhub(
        ["eval", "scripted/oracle", "auto", ".", "-o", "runs", "--trust-remote-code"], folder
    )
    assert trusted.returncode == 1, trusted.stderr
    assert "cannot import module 'evilmod'" in trusted.stderr
    assert "the current directory is not on the Python path" in trusted.stderr
    assert not (folder / "EVILMOD_RAN").exists()


# --- data files stay inside their taskset ---------------------------------------------------


def _card(folder: Path, path: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n"
        f"    path: {json.dumps(path)}\ntaskhub:\n  env: arith\n---\n"
    )
    return folder


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../outside/secret.jsonl", "leaves the taskset folder"),
        ("data/../../outside/secret.jsonl", "leaves the taskset folder"),
        ("{outside}/secret.jsonl", "absolute paths are refused"),
        ("~/secret.jsonl", "absolute paths are refused"),
        ("data/link.jsonl", "leads outside the taskset folder"),
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "home", "symlink"],
)
def test_data_files_that_leave_the_taskset_are_refused(
    tmp_path: Path, path: str, message: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text('{"task_id": "stolen", "reset": {"seed": 1}}\n')
    folder = _card(tmp_path / "sets" / "evil", path.format(outside=outside))
    (folder / "data").mkdir()
    (folder / "data" / "link.jsonl").symlink_to(outside / "secret.jsonl")
    with pytest.raises(SchemaError, match=re.escape(message)) as caught:
        load_taskset(str(folder))
    assert "split 'test'" in str(caught.value) or "link.jsonl" in str(caught.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"task_id": "a"}\n{"task_id": "\xff\xfe"}\n', "test.jsonl line 2: not UTF-8 text"),
        (
            b'{"task_id": "a", "reset": ' + b'{"x": ' * 10_000 + b"1" + b"}" * 10_001 + b"\n",
            "test.jsonl line 1: not valid JSON: nested deeper than 100 levels",
        ),
        (
            b'{"task_id": "a", "reset": ' + b'{"x": ' * 300 + b"1" + b"}" * 301 + b"\n",
            "test.jsonl line 1: not valid JSON: nested deeper than 100 levels",
        ),
    ],
    ids=["non-utf8", "10000-deep", "300-deep"],
)
def test_bad_data_files_are_named_not_tracebacks(
    tmp_path: Path, content: bytes, message: str
) -> None:
    folder = _card(tmp_path / "bad", "data/test.jsonl")
    (folder / "data").mkdir()
    (folder / "data" / "test.jsonl").write_bytes(content)
    with pytest.raises(TasksetError, match=re.escape(message)):
        load_taskset(str(folder))


# --- bounded frames and replies; malformed endpoint replies are infra errors -----------------


def _deep(depth: int) -> dict[str, object]:
    value: dict[str, object] = {"leaf": 1}
    for _ in range(depth):
        value = {"x": value}
    return value


def _hostile_reset(session: Session, data: dict[str, object]) -> Reply:
    reply = counting_reset(session, data)
    if data.get("seed") == 1:  # one task's env frame is nested 300 deep (about 600 bytes)
        return observation({"question": _deep(300)})
    return reply


@pytest.fixture(scope="module")
def hostile_env() -> Iterator[FakeEnv]:
    with FakeEnv(on_reset=_hostile_reset) as env:
        yield env


def _say_tasks(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tasks.jsonl"
    rows = [{"task_id": f"t{i}", "reset": {"seed": i}, "answer": str(i)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_frame_nested_300_deep_is_that_episodes_error(
    tmp_path: Path, hostile_env: FakeEnv
) -> None:
    tasks = _say_tasks(tmp_path, 3)
    config = EvalConfig(model="scripted/oracle", env=hostile_env.url, taskset=str(tasks))
    result = evaluate(config, run_dir=tmp_path / "run")
    assert result.manifest.status == "completed"
    records = {r.task_id: r for r in read_results(result.run_dir)}
    assert [records[t].outcome for t in ("t0", "t1", "t2")] == ["scored", "infra_error", "scored"]
    error = records["t1"].error
    assert error is not None and "nested deeper than 100 levels" in error.message


def _model_run(
    tmp_path: Path, env: FakeEnv, script: ModelScript, *, n: int = 1
) -> list[EpisodeRecord]:
    with ModelServer({"m": script}) as server:
        config = EvalConfig(
            model="openai/m",
            base_url=server.base_url,
            env=env.url,
            taskset=str(_say_tasks(tmp_path, n)),
            # the replies come at once: a short deadline would only fail on a busy machine
            model_timeout_s=60,
            max_retries=0,
        )
        return read_results(evaluate(config, run_dir=tmp_path / "run").run_dir)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"choices": ["42"]}', "not a choice with a message object"),
        ('{"choices": [{"message": "42"}]}', "not a choice with a message object"),
        (
            '{"choices": [{"message": {"content": "0"}}], "usage": {"prompt_tokens": "lots"}}',
            "usage.prompt_tokens = 'lots': not a token count",
        ),
        ('{"choices": [{"message": {"content": "0"}}], "usage": [1]}', "usage.prompt_tokens"),
        ('{"choices": [{"message": {"content": ' + "[" * 300 + "1" + "]" * 300 + "}}]}", "deeper"),
    ],
    ids=["choice-string", "message-string", "usage-text", "usage-list", "deep"],
)
def test_malformed_endpoint_replies_are_infra_errors(
    tmp_path: Path, hostile_env: FakeEnv, raw: str, message: str
) -> None:
    (record,) = _model_run(tmp_path, hostile_env, ModelScript(raw=raw))
    assert record.outcome == "infra_error"
    assert record.error is not None and message in record.error.message


def test_retry_after_soon_is_retried_with_backoff(tmp_path: Path, hostile_env: FakeEnv) -> None:
    script = ModelScript(reply="0", failures=[(503, "busy", {"Retry-After": "soon"})])
    (record,) = _model_run(tmp_path, hostile_env, script)
    assert record.outcome == "scored" and record.reward == 1.0


def test_an_oversize_reply_is_cut_marked_and_never_sent(
    tmp_path: Path, hostile_env: FakeEnv
) -> None:
    before = len(hostile_env.frames)
    (record,) = _model_run(tmp_path, hostile_env, ModelScript(reply="9" * 3_000_000))
    assert record.outcome == "agent_error"
    assert record.error is not None and "reply size limit" in record.error.message
    reply = record.messages[-1].content
    assert reply.endswith(f"[reply cut by taskhub at {1 << 20} of 3000000 characters]")
    assert record.steps == []  # never sent to the env
    assert all(frame["type"] != "step" for frame in hostile_env.frames[before:])
    size = (tmp_path / "run" / "episodes.jsonl").stat().st_size
    assert size < 1.2 * (1 << 20)  # stored once, cut


# --- credentials are never stored -------------------------------------------------------------

PLANTED = (
    "PLANTEDPASS123",
    "PLANTEDQUERYKEY456",
    "sk-PLANTEDAPIKEY7890abcdefghij",
    "PLANTEDENV789",
)


def test_credentials_in_every_input_are_never_written(tmp_path: Path, hostile_env: FakeEnv) -> None:
    password, query_key, api_key, env_secret = PLANTED
    with ModelServer({"m": ModelScript(reply="0")}) as server:
        host = server.base_url.removeprefix("http://")
        base_url = f"http://user:{password}@{host}?api_key={query_key}&api-version=1"
        env_host = hostile_env.url.removeprefix("http://")
        env_url = f"http://envuser:{env_secret}@{env_host}/?token={env_secret}"
        result = subprocess.run(
            [sys.executable, "-m", "taskhub", "--log-level", "INFO", "eval", "openai/m", env_url,
             str(_say_tasks(tmp_path / "tasks", 2)), "--base-url", base_url,
             "--api-key", api_key, "--run-dir", str(tmp_path / "run"), "--max-retries", "0"],
            env={**os.environ, "OPENAI_API_KEY": api_key},
            capture_output=True,
            text=True,
            timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert server.requests[0]["headers"]["authorization"].startswith("Basic")  # creds used
    for secret in PLANTED:
        assert secret not in result.stdout + result.stderr
    built = cli.invoke(
        app, ["leaderboard", "build", str(tmp_path / "run"), "-o", str(tmp_path / "site")]
    )
    assert built.exit_code == 0, built.output
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["model"]["details"]["endpoint"].startswith("http://127.0.0.1:")
    assert "api_key=[REDACTED]" in manifest["model"]["base_url"]
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    files += [p for p in (tmp_path / "site").rglob("*") if p.is_file()]
    assert len(files) > 10
    for path in files:
        text = path.read_bytes().decode("utf-8", "replace")
        for secret in PLANTED:
            assert secret not in text, f"{secret} leaked into {path}"


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        (  # a log line's "URL: message", the colon right after the port
            "http://envuser:PLANTED1@127.0.0.1:8000: no answer within 0.05 s",
            "http://127.0.0.1:8000: no answer within 0.05 s",
        ),
        (
            "see http://u:PLANTED2@host/v1?api_key=PLANTED3.",
            "see http://host/v1?api_key=[REDACTED].",
        ),
        ("(at ws://u:PLANTED4@host:81/ws), then", "(at ws://host:81/ws), then"),
        ("http://u:PLANTED5@host:notaport/x", "http://host:notaport/x"),  # unreadable: no userinfo
    ],
)
def test_credentials_in_a_url_followed_by_punctuation_are_taken_out(text: str, clean: str) -> None:
    assert redact_urls_in(text) == clean


# --- one writer per run; one record per episode; --retry infra -------------------------------

_FLAKY: dict[str, int] = {}


def _flaky_reset(session: Session, data: dict[str, object]) -> Reply:
    if data.get("seed") == 1 and _FLAKY.setdefault("closed", 0) == 0:
        _FLAKY["closed"] = 1
        return CLOSE  # the first attempt at t1 loses its session: an infra error
    return counting_reset(session, data)


def test_one_writer_a_stale_lock_taken_over_and_retried_infra_errors(tmp_path: Path) -> None:
    with FakeEnv(on_reset=_flaky_reset) as env:
        tasks = _say_tasks(tmp_path, 3)
        config = EvalConfig(model="scripted/oracle", env=env.url, taskset=str(tasks), max_retries=0)
        run_dir = evaluate(config, run_dir=tmp_path / "run").run_dir
        assert [r.outcome for r in read_results(run_dir)].count("infra_error") == 1
        holder = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; from taskhub._lock import RunLock; "
             "RunLock(sys.argv[1]).acquire(); print('locked', flush=True); time.sleep(120)",
             str(run_dir)],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            with pytest.raises(ResultsError, match=rf"pid {holder.pid} on host .+, since 20"):
                resume(run_dir, retry=["infra"])
        finally:
            holder.kill()
            holder.wait()
            if holder.stdout is not None:
                holder.stdout.close()
        # the holder died: its lock with it; the next writer takes over
        result = resume(run_dir, retry=["infra"])
    assert result.summary.n_episodes == 3 and result.summary.outcomes["scored"] == 3
    lines = (run_dir / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 4  # the infra-error attempt stays as history
    run = read_run(run_dir)
    assert (len(run.records), run.retried, run.duplicates) == (3, 1, 0)
    # a second writer's copy of an episode: dropped by every reader, said so
    with (run_dir / "episodes.jsonl").open("a") as f:
        f.write(next(line for line in lines if '"outcome":"scored"' in line) + "\n")
    run = read_run(run_dir)
    assert (len(run.records), run.duplicates) == (3, 1)
    assert read_results_table(run_dir).num_rows == 3
    shown = cli.invoke(app, ["results", "show", str(run_dir)])
    assert "dropped 1 duplicate record(s)" in shown.output


# --- templates are bounded --------------------------------------------------------------------

TEMPLATE_ATTACKS = {
    "format-width": ("{{ '%2000000000s' % 'x' }}", "the format '%2000000000' is over"),
    "repeat": ("{{ 'x' * 2000000000 }}", "'*' would build 2000000000 items"),
    "center": ("{{ 'x'|center(2000000000) }}", "asks for more than the output limit"),
    "ljust": ("{{ 'x'.ljust(2000000000) }}", "asks for more than the output limit"),
    "str-format": ("{{ '{:2000000000}'.format('x') }}", "the format '{:2000000000}' is over"),
    "doubling": (
        "{% set ns = namespace(s='xxxxxxxxxx') %}"
        "{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "'~' would build a text over the output limit",
    ),
    "flood": (
        "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
        "the output is over the 1048576-character limit",
    ),
    "recursion": ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursion"),
}


@pytest.mark.parametrize("name", list(TEMPLATE_ATTACKS))
def test_a_hostile_template_is_an_error_not_a_crash(name: str) -> None:
    source, message = TEMPLATE_ATTACKS[name]
    started = time.monotonic()
    templates = Templates.from_card(TasksetCard(prompt_template=source))  # compiles, no folding
    with pytest.raises(ConfigError, match=re.escape(message)):
        templates.render("first")
    assert time.monotonic() - started < 30


def test_a_template_that_never_ends_is_that_episodes_error(
    tmp_path: Path, hostile_env: FakeEnv
) -> None:
    nested = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    folder = _taskset(tmp_path / "slow", row_rewards=None, card=f"  prompt_template: {nested!r}\n")
    config = EvalConfig(
        model="scripted/oracle", env=hostile_env.url, taskset=str(folder), episode_timeout_s=2
    )
    started = time.monotonic()
    result = evaluate(config, run_dir=tmp_path / "run")
    assert time.monotonic() - started < 60
    records = read_results(result.run_dir)
    assert [r.outcome for r in records] == ["infra_error", "infra_error"]
    assert all("deadline" in (r.error.message if r.error else "") for r in records)


# --- names are validated ----------------------------------------------------------------------


@pytest.mark.parametrize("run_id", [".", "..", "", "a/b", "../up"])
def test_a_run_id_that_cannot_name_a_folder_is_refused(tmp_path: Path, run_id: str) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    template = {
        "run_id": run_id,
        "taskhub_version": "0",
        "status": "completed",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "config": {"model": "scripted/oracle", "taskset": "arith"},
        "taskset": {"source": "arith", "kind": "builtin", "name": "arith", "fingerprint": "f"},
        "split": "test",
        "model": {"spec": "scripted/oracle", "provider": "scripted", "name": "oracle"},
    }
    (folder / "run.json").write_text(json.dumps(template))
    with pytest.raises(ResultsError, match="field 'run_id'.*cannot name a folder"):
        read_run(folder)
    shown = cli.invoke(app, ["results", "push", str(folder), "org/results", "--token", "hf_x"])
    assert shown.exit_code == 1 and "cannot name a folder" in shown.output


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ([".", "b"], "has no letter or digit"),
        (["..", "b"], "has no letter or digit"),
        (["a b", "a-b"], "would write the same report file (a-b.json) as 'a b'"),
        (["Good", "good"], "would write the same report file (good.json) as 'Good'"),
    ],
    ids=["dot", "dotdot", "collision", "case"],
)
def test_batch_names_that_cannot_name_a_report_are_refused(
    tmp_path: Path, names: list[str], message: str
) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps({"name": n, "target": "arith"}) + "\n" for n in names))
    out = tmp_path / "out"
    result = cli.invoke(app, ["validate", "--batch", str(batch), "--out", str(out)])
    assert result.exit_code != 0
    assert message in result.output
    assert not out.exists()  # refused before anything is written


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "b": [1.5, -0.0, 1e16, 123456789012345678901234567890], "c": null}',
        '"\\ud800"',  # a lone surrogate: json reads it
        '{"a": 1e400}',  # out of float range: json reads it as inf
        '{"a": 1, "a": 2}',
        '{"a": NaN}',
        "[1, 2",
        "\ufeff{}",
        '{"a": "\u00e9"}'.encode("utf-16"),
        '{"a": "é"}'.encode(),
    ],
)
def test_strict_json_reads_what_json_reads(text: str | bytes) -> None:
    from taskhub._limits import loads_bounded

    def strict(t: str | bytes) -> object:
        return json.loads(t, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))

    try:
        expected: object = strict(text)
    except ValueError as exc:
        expected = type(exc)
    try:
        got: object = loads_bounded(text)
    except ValueError as exc:
        got = type(exc) if type(exc) is expected else exc
    assert got == expected or (got != got and expected != expected)
