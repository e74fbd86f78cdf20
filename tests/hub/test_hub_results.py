"""Results on the Hub: push runs (redacted), keep the others, refuse duplicates, pull them back."""

from __future__ import annotations

import base64
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from typer.testing import CliRunner

from taskhub import (
    EvalConfig,
    ResultsError,
    Run,
    evaluate,
    pull_results,
    push_results,
    read_run,
    redact_run,
    write_manifest,
    write_results,
)
from taskhub._cli import app
from tests.hub.hub_server import HubServer

cli = CliRunner()

OPENAI_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
HF_KEY = "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm12345678"
BEARER = "Bearer abc.DEF-ghi_jkl/mno+pqr="
ENV_SECRET = "corp-internal-s3cr3t-2024"


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: the oracle on 3 arith tasks against the built-in env."""
    out = tmp_path_factory.mktemp("runs")
    result = evaluate(
        EvalConfig(model="scripted/oracle", taskset="arith", split="train", limit=3),
        output_dir=out,
    )
    return result.run_dir


def _copy_run(run_dir: Path, target: Path, *, run_id: str, edit: Callable[[Run], None]) -> Path:
    run = read_run(run_dir)
    manifest = run.manifest.model_copy(update={"run_id": run_id})
    records = [r.model_copy(update={"run_id": run_id}, deep=True) for r in run.records]
    edited = Run(target, manifest, records)
    edit(edited)
    target.mkdir(parents=True)
    write_manifest(target, edited.manifest)
    write_results(target / "episodes.jsonl", edited.records)
    return target


def _plant_secrets(run: Run) -> None:
    run.manifest.argv = ["taskhub", "eval", "--api-key", OPENAI_KEY, "openai/x", "auto", "arith"]
    first = run.records[0]
    first.messages[0].content += f"\nUse the key {OPENAI_KEY} and token {HF_KEY}."
    first.reset_payload["api_key"] = "plain-value-under-a-secret-name"
    first.steps[0].observation["note"] = f"Authorization: {BEARER}"
    first.steps[0].reply = f"my password={ENV_SECRET}"
    first.task.metadata["source"] = f"https://user:{ENV_SECRET}@example.org/data"
    run.records[1].initial_observation = {"question": f"env says {ENV_SECRET}"}
    run.records[2].messages[-1].content = f"answer {base64.b64encode(ENV_SECRET.encode()).decode()}"


def _all_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_all_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _all_strings(v)]
    return []


def _published_text(repo_id: str, sha: str) -> str:
    """Every string of every file of a commit, parquet cells decoded."""
    folder = Path(snapshot_download(repo_id, repo_type="dataset", revision=sha))
    parts = []
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".parquet":
            parts += _all_strings(pq.read_table(path).to_pylist())
        elif path.is_file():
            parts.append(path.read_text())
    return "\n".join(parts)


def test_redaction_replaces_every_secret_shape_and_value(oracle_run: Path, tmp_path: Path) -> None:
    run_dir = _copy_run(oracle_run, tmp_path / "r", run_id="planted", edit=_plant_secrets)
    run = read_run(run_dir)
    manifest, records, report = redact_run(run.manifest, run.records, {"CORP_TOKEN": ENV_SECRET})
    text = manifest.model_dump_json() + "".join(r.model_dump_json() for r in records)
    for secret in (OPENAI_KEY, HF_KEY, "abc.DEF-ghi_jkl", ENV_SECRET, "plain-value-under"):
        assert secret not in text
    assert base64.b64encode(ENV_SECRET.encode()).decode().rstrip("=") not in text
    assert records[0].reset_payload["api_key"] == "[REDACTED]"
    assert records[0].steps[0].observation["note"] == "Authorization: Bearer [REDACTED]"
    assert records[0].steps[0].reply == "my password=[REDACTED]"
    assert records[0].task.metadata["source"] == "https://[REDACTED]@example.org/data"
    assert manifest.argv is not None and manifest.argv[3] == "[REDACTED]"
    assert report.counts["secret:CORP_TOKEN"] >= 3 and report.counts["openai_key"] == 2
    # untouched fields stay equal
    assert records[1].reward == run.records[1].reward
    assert records[1].messages == run.records[1].messages


def test_redaction_fails_closed_on_what_it_cannot_inspect(oracle_run: Path) -> None:
    run = read_run(oracle_run)
    blob = base64.b64encode(bytes(range(256)) * 2).decode()
    record = run.records[1].model_copy(deep=True)
    record.steps[0].observation["image"] = blob
    with pytest.raises(
        ResultsError, match=r"episode 1 .*steps\[0\]\.observation\.image: holds an opaque blob"
    ):
        redact_run(run.manifest, [run.records[0], record])
    hidden = base64.b64encode((f"token {ENV_SECRET} " * 12).encode()).decode()
    record.steps[0].observation["image"] = hidden
    with pytest.raises(ResultsError, match="hidden inside an encoded blob"):
        redact_run(run.manifest, [record], {"CORP_TOKEN": ENV_SECRET})
    with pytest.raises(ResultsError, match="secret 'PIN_PASSWORD' is 4 characters long"):
        redact_run(run.manifest, run.records, {"PIN_PASSWORD": "1234"})
    # long runs of one character or of digits are text, not an encoding
    record.steps[0].observation["image"] = "7" * 500 + "x" * 300
    redact_run(run.manifest, [record])


@pytest.fixture(scope="module")
def results_repo(
    hub_server: HubServer,
    hf_token: str,
    make_repo_id: Callable[[], str],
    oracle_run: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """A results repo holding two runs, pushed one after the other."""
    repo_id = make_repo_id()
    base = tmp_path_factory.mktemp("results")
    first = _copy_run(oracle_run, base / "a", run_id="run-a", edit=_plant_secrets)
    second = _copy_run(oracle_run, base / "b", run_id="run-b", edit=lambda run: None)
    pushed_a = push_results(first, repo_id, token=hf_token, secrets={"CORP_TOKEN": ENV_SECRET})
    pushed_b = push_results(second, repo_id, token=hf_token)
    return {
        "repo_id": repo_id,
        "a": pushed_a.commit_sha,
        "b": pushed_b.commit_sha,
        "dirs": {"run-a": first, "run-b": second},
    }


def test_runs_land_in_their_own_folders_and_accumulate(
    results_repo: dict[str, Any], hf_token: str
) -> None:
    api = HfApi(token=hf_token)
    files = set(api.list_repo_files(results_repo["repo_id"], repo_type="dataset"))
    assert files == {
        ".gitattributes",
        "README.md",
        "runs/run-a/run.json",
        "runs/run-a/episodes.parquet",
        "runs/run-b/run.json",
        "runs/run-b/episodes.parquet",
    }
    readme = Path(snapshot_download(results_repo["repo_id"], repo_type="dataset")) / "README.md"
    card = readme.read_text()
    assert "path: runs/*/episodes.parquet" in card
    assert "`run-a`" in card and "`run-b`" in card and "`scripted/oracle`" in card


def test_nothing_secret_leaves_the_machine(results_repo: dict[str, Any]) -> None:
    text = _published_text(results_repo["repo_id"], results_repo["b"])
    for secret in (OPENAI_KEY, HF_KEY, "abc.DEF-ghi_jkl", ENV_SECRET, "plain-value-under"):
        assert secret not in text
    assert "[REDACTED]" in text


def test_pull_materializes_each_run_pinned_by_commit(
    results_repo: dict[str, Any], tmp_path: Path
) -> None:
    repo_id = results_repo["repo_id"]
    dirs = pull_results(repo_id, output_dir=tmp_path / "latest")
    assert [d.name for d in dirs] == ["run-a", "run-b"]
    pulled_b = read_run(dirs[1])
    original_b = read_run(results_repo["dirs"]["run-b"])
    assert pulled_b.manifest == original_b.manifest
    assert pulled_b.records == original_b.records
    pulled_a = read_run(dirs[0])
    assert pulled_a.records[0].reset_payload["api_key"] == "[REDACTED]"
    assert [r.reward for r in pulled_a.records] == [
        r.reward for r in read_run(results_repo["dirs"]["run-a"]).records
    ]
    # a pinned revision holds only what was there then; the default location is under HF_HOME
    pinned = pull_results(repo_id, results_repo["a"])
    assert [d.name for d in pinned] == ["run-a"]
    assert results_repo["a"] in str(pinned[0]) and str(pinned[0]).startswith(os.environ["HF_HOME"])
    assert pull_results(repo_id, results_repo["a"]) == pinned  # materialized once, reused
    with pytest.raises(ResultsError, match="the revision does not exist"):
        pull_results(repo_id, "no-such-branch")
    with pytest.raises(ResultsError, match="the repo was not found"):
        pull_results("testorg/no-such-results")


def test_the_dataset_viewer_config_loads_every_episode(results_repo: dict[str, Any]) -> None:
    import datasets

    loaded = datasets.load_dataset(results_repo["repo_id"], revision=results_repo["b"])
    rows = loaded["train"]
    assert sorted(set(rows["run_id"])) == ["run-a", "run-b"]
    assert len(rows) == 6
    assert set(rows["model"]) == {"scripted/oracle"}
    assert rows[0]["messages"][0]["role"] == "system"


def test_a_run_id_already_published_is_refused(results_repo: dict[str, Any], hf_token: str) -> None:
    repo_id = results_repo["repo_id"]
    head = HfApi(token=hf_token).dataset_info(repo_id).sha
    with pytest.raises(
        ResultsError, match=r"already holds a run with id 'run-b'.*Nothing was pushed"
    ):
        push_results(results_repo["dirs"]["run-b"], repo_id, token=hf_token)
    assert HfApi(token=hf_token).dataset_info(repo_id).sha == head


def test_a_push_that_cannot_be_redacted_publishes_nothing(
    hub_server: HubServer, hf_token: str, repo_id: str, oracle_run: Path, tmp_path: Path
) -> None:
    def add_blob(run: Run) -> None:
        run.records[0].steps[0].observation["blob"] = base64.b64encode(bytes(range(256))).decode()

    run_dir = _copy_run(oracle_run, tmp_path / "r", run_id="opaque", edit=add_blob)
    with pytest.raises(ResultsError, match="opaque blob"):
        push_results(run_dir, repo_id, token=hf_token)
    assert not HfApi(token=hf_token).repo_exists(repo_id, repo_type="dataset")
    with pytest.raises(ResultsError, match="results push needs a Hub token"):
        push_results(oracle_run, repo_id)


def test_concurrent_pushes_keep_every_run(
    hub_server: HubServer, hf_token: str, repo_id: str, oracle_run: Path, tmp_path: Path
) -> None:
    dirs = [
        _copy_run(oracle_run, tmp_path / f"c{i}", run_id=f"conc-{i}", edit=lambda run: None)
        for i in range(3)
    ]
    push_results(dirs[0], repo_id, token=hf_token)  # the repo exists before the race
    errors: list[BaseException] = []

    def push(path: Path) -> None:
        try:
            push_results(path, repo_id, token=hf_token)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=push, args=(d,)) for d in dirs[1:]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    runs = {
        f.split("/")[1]
        for f in HfApi(token=hf_token).list_repo_files(repo_id, repo_type="dataset")
        if f.startswith("runs/")
    }
    assert runs == {"conc-0", "conc-1", "conc-2"}
    card = (Path(snapshot_download(repo_id, repo_type="dataset")) / "README.md").read_text()
    assert all(f"`conc-{i}`" in card for i in range(3))


def test_cli_results_push_redacts_secret_environment_variables(
    hub_server: HubServer, hf_token: str, repo_id: str, oracle_run: Path, tmp_path: Path
) -> None:
    def leak(run: Run) -> None:
        run.records[0].messages[-1].content = f"the deploy key is {ENV_SECRET}"
        run.records[1].messages[-1].content = "the other one is internal-pass-9876"

    run_dir = _copy_run(oracle_run, tmp_path / "r", run_id="cli-run", edit=leak)
    result = cli.invoke(
        app,
        ["results", "push", str(run_dir), repo_id, "--secret-env", "DEPLOY_PHRASE"],
        env={"HF_TOKEN": hf_token, "DEPLOY_KEY": ENV_SECRET, "DEPLOY_PHRASE": "internal-pass-9876"},
    )
    assert result.exit_code == 0, result.output
    sha = re.search(r"commit ([0-9a-f]{40})", result.output).group(1)  # type: ignore[union-attr]
    text = _published_text(repo_id, sha)
    assert ENV_SECRET not in text and "internal-pass-9876" not in text
    again = cli.invoke(app, ["results", "push", str(run_dir), repo_id], env={"HF_TOKEN": hf_token})
    assert again.exit_code == 1
    assert (
        "ResultsError:" in again.output and "already holds a run with id 'cli-run'" in again.output
    )
    shutil.rmtree(run_dir)
    missing = cli.invoke(
        app, ["results", "push", str(run_dir), repo_id], env={"HF_TOKEN": hf_token}
    )
    assert missing.exit_code == 1 and "is not a run directory" in missing.output


def test_leaderboard_builds_from_a_hub_results_repo(
    results_repo: dict[str, Any], hf_token: str, tmp_path: Path
) -> None:
    repo_id = results_repo["repo_id"]
    site = tmp_path / "site"
    result = cli.invoke(
        app, ["leaderboard", "build", repo_id, "-o", str(site), "--token", hf_token]
    )
    assert result.exit_code == 0, result.output
    assert "for 2 runs" in result.stdout
    pages = {p.name for p in (site / "runs").glob("*.html")}
    assert any("run-a" in name for name in pages) and any("run-b" in name for name in pages)
    missing = cli.invoke(
        app,
        [
            "leaderboard",
            "build",
            "no-org/no-such-results",
            "-o",
            str(tmp_path / "x"),
            "--token",
            hf_token,
        ],
    )
    assert missing.exit_code == 1
    assert "no such file or directory, and not a readable Hub results dataset" in missing.stderr


def test_a_push_holds_a_few_records_and_one_row_group_at_a_time(
    hub_server: HubServer,
    hf_token: str,
    make_repo_id: Callable[[], str],
    oracle_run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tracemalloc

    import taskhub.hub._results as hub_results

    learnt = "value-learnt-from-the-last-record"

    def grow(episodes: int) -> Callable[[Run], None]:
        def edit(run: Run) -> None:  # episodes of ~25 KB of trajectory each
            first = run.records[0]
            run.records.clear()
            for sample in range(episodes):
                record = first.model_copy(update={"sample": sample}, deep=True)
                record.steps[0].observation["log"] = " ".join(
                    f"turn {sample}.{i}: the agent moved north" for i in range(700)
                )
                run.records.append(record)
            # a value under a secret-named key in the last record, written in the first too:
            # learnt in the first pass, redacted in the second wherever it is
            run.records[-1].reset_payload["api_key"] = learnt
            run.records[0].messages[-1].content = f"it printed {learnt}"

        return edit

    monkeypatch.setattr(hub_results, "READ_ROWS", 4)
    monkeypatch.setattr(hub_results, "ROW_GROUP_CHARS", 100_000)
    peaks, sizes, pushed = [], [], []
    small = _copy_run(oracle_run, tmp_path / "warm-up", run_id="warm-up", edit=grow(2))
    push_results(small, make_repo_id(), token=hf_token)  # what a first push imports is not counted
    for episodes in (2, 30):
        run_id = f"run-of-{episodes}"
        run_dir = _copy_run(oracle_run, tmp_path / run_id, run_id=run_id, edit=grow(episodes))
        sizes.append((run_dir / "episodes.jsonl").stat().st_size)
        repo_id = make_repo_id()
        tracemalloc.start()
        try:
            pushed.append((repo_id, push_results(run_dir, repo_id, token=hf_token).commit_sha))
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    # 28 episodes more (700 KB) add less than a third of their size: the records are read 4
    # at a time and written a row group (100 KB of them) at a time
    assert sizes[1] - sizes[0] > 700_000
    assert peaks[1] - peaks[0] < (sizes[1] - sizes[0]) / 3, (peaks, sizes)
    repo_id, sha = pushed[1]
    parquet = hf_hub_download(
        repo_id, "runs/run-of-30/episodes.parquet", repo_type="dataset", revision=sha
    )
    assert pq.ParquetFile(parquet).num_row_groups > 1
    pulled = read_run(pull_results(repo_id, sha, output_dir=tmp_path / "pulled")[0])
    assert [r.sample for r in pulled.records] == list(range(30))
    assert pulled.records[0].messages[-1].content == "it printed [REDACTED]"
    assert pulled.records[-1].reset_payload["api_key"] == "[REDACTED]"
    original = read_run(tmp_path / "run-of-30")
    assert pulled.records[7].steps == original.records[7].steps
