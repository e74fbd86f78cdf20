"""The real huggingface_hub and datasets clients against the loopback Hub (tests/hub/hub_server.py).

These tests pin what taskhub relies on: uploads in the Hub dataset layout, pinned revisions by sha
and tag, exact snapshots, `load_dataset` per revision, `push_to_hub`, ranges, auth and errors.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub import (
    CommitOperationAdd,
    HfApi,
    HfFileSystem,
    hf_hub_download,
    snapshot_download,
)
from huggingface_hub.errors import (
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.hub.hub_server import INVALID_CREDENTIALS, HubServer

# huggingface_hub 2.4 PUTs LFS objects with httpx2's deprecated `data=<file>`; with
# filterwarnings=error every LFS upload (any parquet, so every push_to_hub) would fail.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Use 'content=<...>' to upload raw bytes/text content.:DeprecationWarning"
)

Rows = list[dict[str, Any]]

CARD_V1 = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train.jsonl
  - split: test
    path: data/test.jsonl
---
# Arithmetic taskset (v1)
"""
CARD_V2 = CARD_V1.replace("test", "validation").replace("(v1)", "(v2)")


@dataclass(frozen=True)
class Revision:
    sha: str
    files: dict[str, bytes]
    """Every file of the commit (including the `.gitattributes` the Hub creates) and its bytes."""
    splits: dict[str, Rows]
    scores: Rows


@dataclass(frozen=True)
class Published:
    repo_id: str
    initial_sha: str
    v1: Revision
    v2: Revision


def _jsonl(rows: Rows) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _parquet(rows: Rows) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for path, content in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(content)


def _read_tree(folder: str | Path) -> dict[str, bytes]:
    root = Path(folder)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _rows(dataset: Any) -> Rows:
    return [dict(row) for row in dataset]


@pytest.fixture(scope="module")
def published(
    hf_token: str, make_repo_id: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Published:
    """A dataset repo with two uploads of a Hub-layout folder; tag `v1` marks the first."""
    api = HfApi(token=hf_token)
    repo_id = make_repo_id()
    api.create_repo(repo_id, repo_type="dataset")
    initial_sha = api.repo_info(repo_id, repo_type="dataset").sha
    assert initial_sha is not None
    gitattributes = hf_hub_download(repo_id, ".gitattributes", repo_type="dataset")
    folder = tmp_path_factory.mktemp("taskset")

    train1 = [
        {"id": "t1", "prompt": "1+1", "answer": "2"},
        {"id": "t2", "prompt": "2+2", "answer": "4"},
    ]
    test1 = [{"id": "e1", "prompt": "3+3", "answer": "6"}]
    scores1 = [{"model": "a", "score": 0.5}, {"model": "b", "score": 0.25}]
    files1 = {
        "README.md": CARD_V1.encode(),
        "data/train.jsonl": _jsonl(train1),
        "data/test.jsonl": _jsonl(test1),
        "scores/scores.parquet": _parquet(scores1),
    }
    _write(folder, files1)
    sha1 = api.upload_folder(folder_path=folder, repo_id=repo_id, repo_type="dataset").oid
    api.create_tag(repo_id, tag="v1", revision=sha1, repo_type="dataset")

    train2 = [*train1, {"id": "t3", "prompt": "5+5", "answer": "10"}]
    validation2 = [{"id": "v1", "prompt": "7+7", "answer": "14"}]
    scores2 = [{"model": "a", "score": 0.75}]
    files2 = {
        "README.md": CARD_V2.encode(),
        "data/train.jsonl": _jsonl(train2),
        "data/validation.jsonl": _jsonl(validation2),
        "scores/scores.parquet": _parquet(scores2),
    }
    (folder / "data/test.jsonl").unlink()
    _write(folder, files2)
    sha2 = api.upload_folder(
        folder_path=folder,
        repo_id=repo_id,
        repo_type="dataset",
        commit_message="Add validation split",
        delete_patterns=["data/test.jsonl"],
    ).oid

    base = {".gitattributes": Path(gitattributes).read_bytes()}
    return Published(
        repo_id,
        initial_sha,
        Revision(sha1, base | files1, {"train": train1, "test": test1}, scores1),
        Revision(sha2, base | files2, {"train": train2, "validation": validation2}, scores2),
    )


def test_create_repo_honours_visibility_and_conflicts(hf_token: str, repo_id: str) -> None:
    api = HfApi(token=hf_token)
    url = api.create_repo(repo_id, repo_type="dataset", private=True)
    assert url.repo_id == repo_id
    assert url.repo_type == "dataset"
    assert api.repo_info(repo_id, repo_type="dataset").private is True
    public_id = f"{repo_id}-public"
    api.create_repo(public_id, repo_type="dataset")
    assert api.repo_info(public_id, repo_type="dataset").private is False

    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_repo(repo_id, repo_type="dataset")
    assert conflict.value.response.status_code == 409
    api.create_repo(repo_id, repo_type="dataset", exist_ok=True)

    with pytest.raises(HfHubHTTPError) as anonymous:
        HfApi(token=False).create_repo(f"{repo_id}-anonymous", repo_type="dataset")
    assert anonymous.value.response.status_code == 401


def test_whoami_with_and_without_a_valid_token(hf_token: str) -> None:
    me = HfApi(token=hf_token).whoami()
    assert me["name"] == "testuser"
    assert me["auth"]["accessToken"]["role"] == "write"
    with pytest.raises(HfHubHTTPError, match="Invalid user token") as bad:
        HfApi(token="hf_not_a_token").whoami()  # the client rewords the server's message
    assert bad.value.response.status_code == 401
    assert bad.value.response.headers["X-Error-Message"] == INVALID_CREDENTIALS


def test_uploads_record_history_refs_and_authors(hf_token: str, published: Published) -> None:
    api = HfApi(token=hf_token)
    commits = api.list_repo_commits(published.repo_id, repo_type="dataset")
    assert [c.commit_id for c in commits] == [
        published.v2.sha,
        published.v1.sha,
        published.initial_sha,
    ]
    assert commits[0].title == "Add validation split"
    assert {author for c in commits for author in c.authors} == {"testuser"}
    assert all(re.fullmatch(r"[0-9a-f]{40}", c.commit_id) for c in commits)

    v1_history = api.list_repo_commits(published.repo_id, repo_type="dataset", revision="v1")
    assert [c.commit_id for c in v1_history] == [published.v1.sha, published.initial_sha]

    refs = api.list_repo_refs(published.repo_id, repo_type="dataset")
    assert [(b.name, b.ref, b.target_commit) for b in refs.branches] == [
        ("main", "refs/heads/main", published.v2.sha)
    ]
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [
        ("v1", "refs/tags/v1", published.v1.sha)
    ]

    info = api.dataset_info(published.repo_id, revision="v1")
    assert info.sha == published.v1.sha
    assert sorted(s.rfilename for s in info.siblings or []) == sorted(published.v1.files)
    assert info.card_data is not None
    assert [s["split"] for s in info.card_data["configs"][0]["data_files"]] == ["train", "test"]


def test_tree_lists_lfs_files_and_rejects_missing_folders(
    hf_token: str, published: Published
) -> None:
    api = HfApi(token=hf_token)
    tree = {
        entry.path: entry
        for entry in api.list_repo_tree(
            published.repo_id, repo_type="dataset", revision=published.v1.sha, recursive=True
        )
    }
    assert set(tree) == set(published.v1.files) | {"data", "scores"}
    parquet = published.v1.files["scores/scores.parquet"]
    lfs = getattr(tree["scores/scores.parquet"], "lfs", None)
    assert lfs is not None
    assert (lfs.sha256, lfs.size) == (hashlib.sha256(parquet).hexdigest(), len(parquet))
    assert getattr(tree["data/train.jsonl"], "lfs", "missing") is None
    assert getattr(tree["data/train.jsonl"], "size", None) == len(
        published.v1.files["data/train.jsonl"]
    )

    top = [e.path for e in api.list_repo_tree(published.repo_id, repo_type="dataset")]
    assert top == [".gitattributes", "README.md", "data", "scores"]
    in_data = api.list_repo_tree(published.repo_id, "data", repo_type="dataset", revision="v1")
    assert sorted(e.path for e in in_data) == ["data/test.jsonl", "data/train.jsonl"]
    assert sorted(api.list_repo_files(published.repo_id, repo_type="dataset")) == sorted(
        published.v2.files
    )

    with pytest.raises(RemoteEntryNotFoundError):
        list(api.list_repo_tree(published.repo_id, "no-such-dir", repo_type="dataset"))

    expanded = api.list_repo_tree(published.repo_id, repo_type="dataset", expand=True)
    last_commits = {e.path: e.last_commit.oid for e in expanded if e.last_commit is not None}
    assert last_commits == {
        ".gitattributes": published.initial_sha,
        "README.md": published.v2.sha,
        "data": published.v2.sha,
        "scores": published.v2.sha,
    }


@pytest.mark.parametrize("revision", ["v1", "v1-sha", "v2-sha", "main"])
def test_snapshot_download_gives_each_revisions_exact_files(
    published: Published, revision: str
) -> None:
    expected = published.v1 if revision.startswith("v1") else published.v2
    pinned = expected.sha if revision.endswith("-sha") else revision
    path = snapshot_download(published.repo_id, repo_type="dataset", revision=pinned)
    assert Path(path).name == expected.sha
    assert _read_tree(path) == expected.files


@pytest.mark.parametrize("name", ["v1", "v2"])
def test_load_dataset_by_sha_gives_each_revisions_rows(published: Published, name: str) -> None:
    import datasets

    revision: Revision = getattr(published, name)
    loaded = datasets.load_dataset(published.repo_id, revision=revision.sha)
    assert {split: _rows(loaded[split]) for split in loaded} == revision.splits


def test_load_dataset_from_a_snapshot_folder(published: Published) -> None:
    import datasets

    path = snapshot_download(published.repo_id, repo_type="dataset", revision="v1")
    loaded = datasets.load_dataset(path)
    assert {split: _rows(loaded[split]) for split in loaded} == published.v1.splits
    assert pq.read_table(Path(path, "scores/scores.parquet")).to_pylist() == published.v1.scores


def test_push_to_hub_then_load_each_push(hf_token: str, repo_id: str) -> None:
    import datasets

    first = [{"id": "a", "prompt": "p1"}, {"id": "b", "prompt": "p2"}]
    second = [{"id": "c", "prompt": "p3"}]
    datasets.Dataset.from_list(first).push_to_hub(repo_id, token=hf_token)
    first_sha = HfApi(token=hf_token).repo_info(repo_id, repo_type="dataset").sha
    datasets.Dataset.from_list(second).push_to_hub(repo_id, token=hf_token, split="test")
    datasets.Dataset.from_list(second).push_to_hub(repo_id, token=hf_token, revision="dev")

    latest = datasets.load_dataset(repo_id, token=hf_token)
    assert {split: _rows(latest[split]) for split in latest} == {"train": first, "test": second}
    pinned = datasets.load_dataset(repo_id, revision=first_sha, token=hf_token)
    assert {split: _rows(pinned[split]) for split in pinned} == {"train": first}
    # The branch was created from main, so it starts with main's `test` split.
    dev = datasets.load_dataset(repo_id, revision="dev", token=hf_token)
    assert {split: _rows(dev[split]) for split in dev} == {"train": second, "test": second}


def test_range_reads_are_served_partially(hub_server: HubServer, published: Published) -> None:
    content = published.v1.files["data/train.jsonl"]
    fs = HfFileSystem()
    path = f"datasets/{published.repo_id}@{published.v1.sha}/data/train.jsonl"
    assert fs.cat_file(path, start=5, end=25) == content[5:25]
    with fs.open(path, "rb", block_size=8) as handle:
        handle.seek(10)
        assert handle.read(6) == content[10:16]
    partial = [r for r in hub_server.requests if r.status == 206 and r.path.endswith("train.jsonl")]
    assert partial, "the client never sent a Range request"

    url = f"{hub_server.url}/datasets/{published.repo_id}/resolve/v1/data/train.jsonl"
    size = len(content)
    with httpx.Client() as client:
        head = client.head(url)
        assert head.status_code == 200
        assert head.headers["X-Repo-Commit"] == published.v1.sha
        assert head.headers["Content-Length"] == str(size)
        assert "X-Xet-Hash" not in head.headers
        for header, status, body, content_range in [
            ("bytes=0-4", 206, content[:5], f"bytes 0-4/{size}"),
            ("bytes=3-", 206, content[3:], f"bytes 3-{size - 1}/{size}"),
            ("bytes=-5", 206, content[-5:], f"bytes {size - 5}-{size - 1}/{size}"),
            (f"bytes={size}-", 416, None, f"bytes */{size}"),
        ]:
            response = client.get(url, headers={"Range": header})
            assert (response.status_code, response.headers["Content-Range"]) == (
                status,
                content_range,
            )
            if body is not None:
                assert response.content == body


def test_hf_hub_download_by_tag_sha_and_for_lfs_files(published: Published) -> None:
    by_tag = hf_hub_download(
        published.repo_id, "data/train.jsonl", repo_type="dataset", revision="v1"
    )
    assert Path(by_tag).read_bytes() == published.v1.files["data/train.jsonl"]
    parquet = hf_hub_download(
        published.repo_id, "scores/scores.parquet", repo_type="dataset", revision=published.v2.sha
    )
    assert Path(parquet).read_bytes() == published.v2.files["scores/scores.parquet"]


def test_private_repo_needs_a_valid_token(hf_token: str, repo_id: str) -> None:
    import datasets

    api = HfApi(token=hf_token)
    api.create_repo(repo_id, repo_type="dataset", private=True)
    rows = [{"id": "secret", "prompt": "p"}]
    api.upload_file(
        path_or_fileobj=_jsonl(rows),
        path_in_repo="data/train.jsonl",
        repo_id=repo_id,
        repo_type="dataset",
    )

    with pytest.raises(RepositoryNotFoundError, match="Repository Not Found") as anonymous:
        hf_hub_download(repo_id, "data/train.jsonl", repo_type="dataset", token=False)
    assert anonymous.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError):
        HfApi(token=False).dataset_info(repo_id)
    with pytest.raises(datasets.exceptions.DatasetNotFoundError, match=re.escape(repo_id)):
        datasets.load_dataset(repo_id, token=False)

    with pytest.raises(HfHubHTTPError, match=re.escape(INVALID_CREDENTIALS)) as bad:
        hf_hub_download(repo_id, "data/train.jsonl", repo_type="dataset", token="hf_bad")
    assert not isinstance(bad.value, RepositoryNotFoundError)
    assert bad.value.response.status_code == 401

    path = hf_hub_download(repo_id, "data/train.jsonl", repo_type="dataset", token=hf_token)
    assert Path(path).read_bytes() == _jsonl(rows)
    assert _rows(datasets.load_dataset(repo_id, token=hf_token)["train"]) == rows


def test_bad_token_is_reported_as_invalid_credentials(published: Published) -> None:
    with pytest.raises(HfHubHTTPError, match=re.escape(INVALID_CREDENTIALS)) as caught:
        HfApi(token="hf_not_a_token").dataset_info(published.repo_id)
    assert not isinstance(caught.value, RepositoryNotFoundError)
    assert caught.value.response.status_code == 401


def test_missing_repo_revision_and_file_raise_specific_errors(published: Published) -> None:
    import datasets

    api = HfApi()
    with pytest.raises(RepositoryNotFoundError):
        api.dataset_info("testorg/no-such-dataset")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("testorg/no-such-dataset", "README.md", repo_type="dataset")
    with pytest.raises(RevisionNotFoundError):
        api.dataset_info(published.repo_id, revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        api.dataset_info(published.repo_id, revision="0" * 40)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(published.repo_id, "README.md", repo_type="dataset", revision="nope")
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(published.repo_id, "no/such/file.txt", repo_type="dataset")
    with pytest.raises(datasets.exceptions.DatasetNotFoundError):
        datasets.load_dataset("testorg/no-such-dataset")


def test_commit_with_stale_parent_is_rejected(hf_token: str, published: Published) -> None:
    api = HfApi(token=hf_token)
    with pytest.raises(HfHubHTTPError) as stale:
        api.create_commit(
            published.repo_id,
            [CommitOperationAdd("notes.txt", b"late")],
            commit_message="stale",
            repo_type="dataset",
            parent_commit=published.v1.sha,
        )
    assert stale.value.response.status_code == 412
    assert api.repo_info(published.repo_id, repo_type="dataset").sha == published.v2.sha


def test_branches_tags_and_deletions(hf_token: str, repo_id: str) -> None:
    api = HfApi(token=hf_token)
    api.create_repo(repo_id, repo_type="dataset")
    base = api.create_commit(
        repo_id,
        [
            CommitOperationAdd("data/a.jsonl", b'{"x": 1}\n'),
            CommitOperationAdd("data/b.jsonl", b'{"x": 2}\n'),
            CommitOperationAdd("docs/notes.md", b"notes\n"),
        ],
        commit_message="base",
        repo_type="dataset",
    ).oid

    api.create_branch(repo_id, branch="dev", revision=base, repo_type="dataset")
    with pytest.raises(HfHubHTTPError) as branch_conflict:
        api.create_branch(repo_id, branch="dev", repo_type="dataset")
    assert branch_conflict.value.response.status_code == 409
    api.create_branch(repo_id, branch="dev", repo_type="dataset", exist_ok=True)
    api.upload_file(
        path_or_fileobj=b"dev only\n",
        path_in_repo="dev.txt",
        repo_id=repo_id,
        repo_type="dataset",
        revision="dev",
    )
    assert "dev.txt" in api.list_repo_files(repo_id, repo_type="dataset", revision="dev")
    assert "dev.txt" not in api.list_repo_files(repo_id, repo_type="dataset")

    # Branch names with a slash travel URL-quoted as one path segment.
    api.create_branch(repo_id, branch="feature/x", repo_type="dataset")
    api.upload_file(
        path_or_fileobj=b"feature\n",
        path_in_repo="feature.txt",
        repo_id=repo_id,
        repo_type="dataset",
        revision="feature/x",
    )
    downloaded = hf_hub_download(repo_id, "feature.txt", repo_type="dataset", revision="feature/x")
    assert Path(downloaded).read_bytes() == b"feature\n"

    api.create_tag(repo_id, tag="base", revision=base, repo_type="dataset")
    with pytest.raises(HfHubHTTPError) as tag_conflict:
        api.create_tag(repo_id, tag="base", repo_type="dataset")
    assert tag_conflict.value.response.status_code == 409

    api.delete_file("data/a.jsonl", repo_id, repo_type="dataset")
    api.delete_folder("docs", repo_id, repo_type="dataset")
    assert sorted(api.list_repo_files(repo_id, repo_type="dataset")) == [
        ".gitattributes",
        "data/b.jsonl",
    ]
    assert "docs/notes.md" in api.list_repo_files(repo_id, repo_type="dataset", revision="base")
    with pytest.raises(RemoteEntryNotFoundError):
        api.delete_file("data/a.jsonl", repo_id, repo_type="dataset")

    api.delete_branch(repo_id, branch="dev", repo_type="dataset")
    api.delete_tag(repo_id, tag="base", repo_type="dataset")
    refs = api.list_repo_refs(repo_id, repo_type="dataset")
    assert ([b.name for b in refs.branches], refs.tags) == (["feature/x", "main"], [])
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_files(repo_id, repo_type="dataset", revision="dev")


def test_model_repos_round_trip(hf_token: str, make_repo_id: Callable[[], str]) -> None:
    api = HfApi(token=hf_token)
    repo_id = make_repo_id().replace("ds-", "model-")
    api.create_repo(repo_id)
    api.upload_file(path_or_fileobj=b'{"layers": 2}', path_in_repo="config.json", repo_id=repo_id)
    weights = bytes(range(256)) * 4  # binary: stored in LFS
    api.upload_file(path_or_fileobj=weights, path_in_repo="weights.bin", repo_id=repo_id)
    assert Path(hf_hub_download(repo_id, "config.json")).read_bytes() == b'{"layers": 2}'
    assert Path(hf_hub_download(repo_id, "weights.bin")).read_bytes() == weights
    [config, stored] = api.get_paths_info(repo_id, ["config.json", "weights.bin"])
    assert (getattr(config, "lfs", "?"), getattr(stored, "lfs", None) is not None) == (None, True)
    assert api.model_info(repo_id).sha == api.list_repo_commits(repo_id)[0].commit_id


def test_connection_is_reusable_after_an_early_error(hub_server: HubServer) -> None:
    host, port = hub_server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    lfs_object = b"chunked upload body" * 100
    lfs_url = f"/lfs-upload/{hashlib.sha256(lfs_object).hexdigest()}"
    try:
        # Answered without looking at the body: an unknown route, an unauthenticated write.
        for method, path in [("POST", "/api/nowhere"), ("POST", "/api/repos/create")]:
            connection.request(method, path, body=b'{"name": "x", "type": "dataset"}' * 50)
            response = connection.getresponse()
            assert (response.status, response.read()) != (200, b"")
        socket_before = connection.sock
        # A chunked body (no Content-Length) must be drained too.
        chunks = iter([lfs_object[:700], lfs_object[700:]])
        connection.request("PUT", lfs_url, body=chunks, encode_chunked=True)
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b"")
        connection.request(
            "GET", "/api/whoami-v2", headers={"Authorization": "Bearer hf_test_token"}
        )
        response = connection.getresponse()
        assert (response.status, json.loads(response.read())["name"]) == (200, "testuser")
        assert connection.sock is socket_before  # still the same keep-alive connection
    finally:
        connection.close()


def test_server_stops_promptly_with_open_keep_alive_connections() -> None:
    threads_before = set(threading.enumerate())
    with httpx.Client() as client:
        server = HubServer(tokens={"t": "u"}).start()
        url = f"{server.url}/api/whoami-v2"
        assert client.get(url, headers={"Authorization": "Bearer t"}).json()["name"] == "u"
        assert set(threading.enumerate()) - threads_before  # serving, and one connection thread

        started = time.monotonic()
        server.stop()  # the client still holds its keep-alive connection open
        assert time.monotonic() - started < 5
        assert set(threading.enumerate()) - threads_before == set()
        with pytest.raises(httpx.TransportError):
            client.get(url)
