"""Evaluation results in model repos (.eval_results/*.yaml), against the loopback Hub."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from huggingface_hub import HfApi, hf_hub_download
from typer.testing import CliRunner

from taskhub import ResultsError, comparability, read_manifest
from taskhub._cli import app
from taskhub.hub import push_eval_results
from tests.hub.hub_server import HubServer
from tests.leaderboard.corpus import episode, write_run

SHA = "5503434ddd753f426f4b38109466949a1217c2bb"
cli = CliRunner()


def _run(root: Path, run_id: str, values: list[float], **kwargs: object) -> Path:
    records = [episode(run_id, f"t{i}", reward=r) for i, r in enumerate(values)]
    return write_run(root, run_id, records, commit_sha=SHA, **kwargs)  # type: ignore[arg-type]


def _result(repo: str, path: str, token: str) -> list[dict[str, object]]:
    local = hf_hub_download(repo, path, repo_type="model", token=token)
    loaded = yaml.safe_load(Path(local).read_text())
    assert isinstance(loaded, list)
    return loaded


def test_results_push_writes_the_model_repo_result_linking_back(
    hub_server: HubServer,
    hf_token: str,
    make_repo_id: Callable[[], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_TOKEN", hf_token)
    run = _run(tmp_path, "run-a", [1.0, 1.0, 0.0, 1.0])
    results_repo, model_repo = make_repo_id(), "testorg/my-model"
    pushed = cli.invoke(
        app, ["results", "push", str(run), results_repo, "--model-repo", model_repo]
    )
    assert pushed.exit_code == 0, pushed.output
    assert "wrote .eval_results/arith.yaml to testorg/my-model (main)" in pushed.output
    results_head = HfApi(token=hf_token).dataset_info(results_repo).sha
    (entry,) = _result(model_repo, ".eval_results/arith.yaml", hf_token)
    # the Hub's format: dataset.id (the benchmark), task_id, revision; value; date; source
    assert entry["dataset"] == {
        "id": "org/arith",
        "task_id": "test",
        "config": "default",
        "split": "test",
        "revision": SHA,
    }
    assert entry["value"] == 0.75
    assert datetime.fromisoformat(str(entry["date"])).year == 2026
    source = entry["source"]
    assert isinstance(source, dict)
    assert (
        source["url"] == f"{hub_server.url}/datasets/{results_repo}/tree/{results_head}/runs/run-a"
    )
    assert (source["name"], source["user"]) == ("taskhub results", "testuser")
    fingerprint = comparability(read_manifest(run)).fingerprint
    assert f"config {fingerprint};" in str(entry["notes"])


def test_one_file_per_configuration(
    hub_server: HubServer, hf_token: str, make_repo_id: Callable[[], str], tmp_path: Path
) -> None:
    model_repo = make_repo_id().replace("ds-", "model-")
    first = _run(tmp_path, "first", [1.0, 0.0])
    again = _run(tmp_path, "again", [1.0, 1.0])  # the same configuration: the file is updated
    other = _run(tmp_path, "other", [0.0, 0.0], rewards=["exact"])  # scored another way
    paths = [push_eval_results(run, model_repo, token=hf_token).files[0] for run in (first, again)]
    assert paths == [".eval_results/arith.yaml"] * 2
    assert _result(model_repo, paths[0], hf_token)[0]["value"] == 1.0
    config = comparability(read_manifest(other)).fingerprint
    separate = push_eval_results(other, model_repo, token=hf_token, metric="success_rate")
    assert separate.files == (f".eval_results/arith_{config}.yaml",)
    (entry,) = _result(model_repo, separate.files[0], hf_token)
    assert entry["value"] == 0.0 and str(entry["notes"]).startswith("success rate;")
    files = HfApi(token=hf_token).list_repo_files(model_repo, repo_type="model")
    assert sorted(f for f in files if f.startswith(".eval_results/")) == sorted(
        [".eval_results/arith.yaml", separate.files[0]]
    )


def test_a_taskset_not_on_the_hub_is_refused(
    hub_server: HubServer, hf_token: str, tmp_path: Path
) -> None:
    records = [episode("local", "t0", reward=1.0)]
    run = write_run(tmp_path, "local", records)
    with pytest.raises(ResultsError, match="was not loaded from the Hub"):
        push_eval_results(run, "testorg/some-model", token=hf_token)
    usage = cli.invoke(app, ["results", "push", str(run)])
    assert usage.exit_code == 2
