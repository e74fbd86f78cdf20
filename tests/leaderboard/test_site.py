"""The static site: golden files, determinism, escaping, cells, lazy episodes, exports, inputs."""

from __future__ import annotations

import base64
import csv
import gzip
import html as html_lib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from huggingface_hub.repocard_data import model_index_to_eval_results
from taskhub.leaderboard import build_site, resolve_inputs

from taskhub import (
    ConfigError,
    EpisodeRecord,
    ResultsError,
    RewardComponent,
    RewardSpec,
    total_reward,
)

from .corpus import IMG, SCRIPT, episode, report, write_run

GOLDEN = Path(__file__).parent / "golden"
# The assets are copies of leaderboard/static; everything else is compared byte for byte,
# episode pages by the text they hold (a compressor's version may change its bytes).
NOT_GOLDEN = {"assets"}
PAGE = re.compile(rb'TASKHUB\.page\((\d+),"([A-Za-z0-9+/=]*)"\);\n')


def tree(site: Path) -> dict[str, bytes]:
    return {
        p.relative_to(site).as_posix(): p.read_bytes()
        for p in sorted(site.rglob("*"))
        if p.is_file() and p.relative_to(site).parts[0] not in NOT_GOLDEN
    }


def unpacked(name: str, data: bytes) -> bytes:
    """A page file as the text it holds (its number and records); any other file as is."""
    page = PAGE.fullmatch(data) if name.rsplit("/", 1)[-1].startswith("page-") else None
    if page is None:
        return data
    return page.group(1) + b"\n" + gzip.decompress(base64.b64decode(page.group(2)))


@pytest.fixture(scope="module")
def site(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    build_site([corpus], out)
    return out


def test_golden_site(site: Path) -> None:
    """The site of the fixed corpus, file for file (TASKHUB_UPDATE_GOLDEN=1 rewrites it)."""
    built = tree(site)
    if os.environ.get("TASKHUB_UPDATE_GOLDEN") == "1":
        shutil.rmtree(GOLDEN, ignore_errors=True)
        for name, data in built.items():
            (GOLDEN / name).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / name).write_bytes(data)
    golden = tree(GOLDEN)
    assert sorted(built) == sorted(golden)
    differing = [
        name for name in built if unpacked(name, built[name]) != unpacked(name, golden[name])
    ]
    assert differing == [], "rebuild the golden files with TASKHUB_UPDATE_GOLDEN=1 if intended"


def test_same_inputs_give_the_same_bytes(corpus: Path, site: Path, tmp_path: Path) -> None:
    # Inputs named in another order and another way: runs one by one, reports explicitly.
    runs = sorted((corpus / "runs").iterdir(), reverse=True)
    reports = [corpus / "reports" / "gridworld.json", corpus / "reports" / "arith.json"]
    build_site([*runs, *reports, runs[0]], tmp_path / "again")
    assert tree(tmp_path / "again") == tree(site)
    assert not re.search(
        rb"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+", (site / "index.html").read_bytes()
    )


def test_timestamp_appears_only_when_given(corpus: Path, tmp_path: Path) -> None:
    build_site([corpus], tmp_path / "s", timestamp="2026-02-03 10:00 UTC")
    assert "2026-02-03 10:00 UTC" in (tmp_path / "s" / "index.html").read_text()


def html_pages(site: Path) -> dict[str, str]:
    return {p.relative_to(site).as_posix(): p.read_text() for p in site.rglob("*.html")}


def test_strings_from_models_envs_and_tasksets_are_escaped(site: Path) -> None:
    pages = html_pages(site)
    assert len(pages) == 18
    for name, html in pages.items():
        assert "<script>alert" not in html, name
        assert "<img src=x" not in html, name
        assert "onerror=alert(1)>" not in html or "&lt;img" in html, name
        # the only scripts are the site's own, from files
        for tag in re.findall(r"<script[^>]*>", html):
            assert re.fullmatch(r'<script src="(\.\./)?assets/(table|episodes)\.js">', tag), tag
    home = pages["index.html"]
    assert "openai/beta&lt;script&gt;alert(&#39;xss&#39;)&lt;/script&gt;" in home
    assert "grid&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in home
    env = next(html for name, html in pages.items() if name.startswith("envs/arith"))
    assert "Hide the answer &lt;script&gt;" in env


def test_every_page_forbids_network_and_inline_scripts(site: Path) -> None:
    for name, html in html_pages(site).items():
        assert "default-src 'none'; script-src 'self'" in html_lib.unescape(html), name
        assert not re.search(r"(src|href)=\"(https?:)?//", html), name
    for css in (site / "assets").glob("*.css"):
        assert "url(" not in css.read_text() and "@import" not in css.read_text()


def test_cells_keep_revisions_apart_and_pool_shards(site: Path) -> None:
    rows = json.loads((site / "data" / "leaderboard.json").read_text())
    cells = {(r["model"], r["taskset"], r["revision"][:4]): r for r in rows}
    alpha = "scripted/alpha"
    # two revisions of arith: two cells, never merged
    assert cells[(alpha, "arith", "aaaa")]["n_episodes"] == 6
    assert cells[(alpha, "arith", "bbbb")]["n_episodes"] == 3
    # two shards of one evaluation: one cell
    beta = cells[(f"openai/beta{SCRIPT}", "arith", "aaaa")]
    assert beta["runs"] == ["run-beta-arith-0", "run-beta-arith-1"]
    assert (beta["n_episodes"], beta["n_rewarded"]) == (6, 5)
    assert beta["infra_error_rate"] == pytest.approx(1 / 6)
    # two sampling configurations of one model: two rows, labelled by what differs
    grid = f"grid{IMG}"
    assert ("scripted/gamma (temperature=0.0)", grid, "1234") in cells
    assert ("scripted/gamma (temperature=0.7)", grid, "1234") in cells
    assert cells[("scripted/gamma (temperature=0.0)", grid, "1234")]["pass@4"] == 1.0
    assert cells[("scripted/gamma (temperature=0.0)", grid, "1234")]["revision_kind"] == "commit"
    # ties: alpha's and beta's intervals on arith@aaaa overlap
    assert cells[(alpha, "arith", "aaaa")]["tied_with"] == [f"openai/beta{SCRIPT}"]
    assert cells[(alpha, "arith", "aaaa")]["rank"] == 1


def test_home_page_shows_each_revision_and_pass_at_k(site: Path) -> None:
    home = (site / "index.html").read_text()
    assert "test @ aaaaaaaaaaaa" in home and "test @ bbbbbbbbbbbb" in home
    assert "test @ 1234567890ab" in home
    assert "pass@4" in home
    assert "errors 33.3%" in home  # beta: one agent and one infra error in 6


def test_env_board_ranks_by_validation_quality(site: Path) -> None:
    board = json.loads((site / "data" / "envs.json").read_text())
    assert [(e["env"], e["verdict"]) for e in board] == [("arith", "warn"), ("gridworld", "fail")]
    arith, grid = board
    assert arith["warnings"] == ["semantic.no_solution_leakage"] and arith["failed"] == []
    assert grid["failed"] == ["runtime.episode_determinism"]
    assert grid["errored"] == ["runtime.seed_control"]
    assert (arith["determinism"], grid["determinism"]) == ("pass", "fail")
    # 15 arith episodes, one infra error; 8 ms of env time per request (reset + each step)
    assert (arith["episodes"], arith["infra_error_rate"]) == (15, pytest.approx(1 / 15))
    assert arith["latency_ms"] == pytest.approx(8.0)
    assert arith["runs"] == 4


def test_model_index_yaml_is_what_the_hub_reads(site: Path) -> None:
    cards = sorted((site / "model-index").rglob("*.yaml"))
    assert len(cards) == 5  # one per (model, taskset revision) cell
    for card in cards:
        name, results = model_index_to_eval_results(yaml.safe_load(card.read_text())["model-index"])
        assert results and results[0].task_type == "reinforcement-learning"
    grid = next(c for c in cards if "gamma" in c.read_text() and "grid" in c.name)
    (result, *others) = model_index_to_eval_results(
        yaml.safe_load(grid.read_text())["model-index"]
    )[1]
    assert result.dataset_revision == "1234567890abcdef1234567890abcdef12345678"
    assert result.dataset_type == f"org/grid{IMG}"
    assert result.metric_type == "mean_reward" and result.metric_value == pytest.approx(
        1 / 3, abs=1e-4
    )
    assert {r.metric_type for r in others} == {"success_rate", "pass@1", "pass@2", "pass@4"}


def test_every_table_has_csv_and_json(site: Path) -> None:
    downloads = (site / "downloads.html").read_text()
    paths = re.findall(r'href="(data/[^"]+)\.csv"', downloads)
    assert len(paths) >= 15
    for path in paths:
        with (site / f"{path}.csv").open(newline="") as f:
            csv_rows = list(csv.DictReader(f))
        rows = json.loads((site / f"{path}.json").read_text())
        assert len(csv_rows) == len(rows), path
        if rows:
            assert list(csv_rows[0]) == list(rows[0]), path


def test_episodes_load_lazily_in_pages(tmp_path: Path) -> None:
    big = "x" * 2000
    records = [episode("big", f"t-{i:03d}", observation=big) for i in range(250)]
    run = write_run(tmp_path / "runs", "big", records)
    build_site([run], tmp_path / "site", page_size=100, chunk_size=120)
    folder = next((tmp_path / "site" / "runs").glob("big-*/"))
    assert sorted(p.name for p in folder.iterdir()) == [
        "index-0000.js",
        "index-0001.js",
        "index-0002.js",
        "page-00000.js",
        "page-00001.js",
        "page-00002.js",
    ]
    page = (folder / "page-00001.js").read_text()
    assert page.startswith('TASKHUB.page(1,"') and page.endswith('");\n')
    lines = (run / "episodes.jsonl").read_text().splitlines()
    # the records' lines, stored once: gzip-compressed, base64-encoded
    packed = base64.b64decode(page[len('TASKHUB.page(1,"') : -len('");\n')])
    assert gzip.decompress(packed).decode() == "\n".join(lines[100:200])
    assert len(page) < len("\n".join(lines[100:200])) / 10
    index = json.loads((folder / "index-0002.js").read_text()[len("TASKHUB.index(2,") : -3])
    assert index["tasks"][index["t"][0]] == "t-240" and len(index["t"]) == 10
    html = next((tmp_path / "site" / "runs").glob("big-*.html")).read_text()
    assert big not in html and len(html) < 100_000
    # by default a page holds about two megabytes of records, before compression
    build_site([run], tmp_path / "default")
    average = sum(len(line) for line in lines) / len(lines)
    html = next((tmp_path / "default" / "runs").glob("big-*.html")).read_text()
    assert f'data-page-size="{min(4000, round(2 * 1024 * 1024 / average))}"' in html


def test_an_old_site_is_replaced_and_anything_else_is_kept(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    build_site([corpus / "runs" / "run-alpha-arith"], out)
    build_site([corpus / "runs" / "run-alpha-arith-v2"], out)
    assert not list((out / "runs").glob("run-alpha-arith-[0-9a-f]*.html"))
    other = tmp_path / "precious"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not a site built by taskhub"):
        build_site([corpus], other)
    assert (other / "notes.txt").read_text() == "keep me"


def test_inputs_are_found_in_folders_files_and_reports(corpus: Path, tmp_path: Path) -> None:
    found = resolve_inputs([corpus])
    assert [r.manifest.run_id for r in found.runs] == sorted(
        p.name for p in (corpus / "runs").iterdir()
    )
    assert [r.name for r in found.reports] == ["arith", "gridworld"]  # summary.json skipped
    results = corpus / "runs" / "run-alpha-arith" / "episodes.jsonl"
    assert [r.manifest.run_id for r in resolve_inputs([results]).runs] == ["run-alpha-arith"]
    copied = tmp_path / "copy.jsonl"
    shutil.copy(results, copied)
    with pytest.raises(ConfigError, match="needs its run's run.json beside it"):
        resolve_inputs([copied])
    with pytest.raises(ConfigError, match="no such file"):
        resolve_inputs([tmp_path / "missing"])
    with pytest.raises(ConfigError, match="not a validation report"):
        resolve_inputs([corpus / "reports" / "summary.json"])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "env.json").write_text('{"verdict": "maybe", "checks": []}')
    with pytest.raises(ResultsError, match="env.json"):
        resolve_inputs([broken])


def test_resolvers_come_first(corpus: Path) -> None:
    from taskhub.leaderboard import Inputs

    def hub(source: str) -> Inputs | None:
        if not source.startswith("hf://"):
            return None
        return resolve_inputs([corpus / "reports"])

    found = resolve_inputs(["hf://datasets/org/results", corpus / "runs"], resolvers=[hub])
    assert len(found.runs) == 6 and len(found.reports) == 2


def test_a_report_matches_runs_by_target(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs", "r", [episode("r", "t")], env="my-env")
    path = tmp_path / "my-env.json"
    path.write_text(report("submission-7", "pass", [], target="my-env").model_dump_json())
    build_site([run, path], tmp_path / "site")
    board = json.loads((tmp_path / "site" / "data" / "envs.json").read_text())
    assert [(e["env"], e["verdict"], e["runs"]) for e in board] == [("submission-7", "pass", 1)]


def test_an_empty_site_builds(tmp_path: Path) -> None:
    (tmp_path / "nothing").mkdir()
    info = build_site([tmp_path / "nothing"], tmp_path / "site")
    assert (info.runs, info.episodes) == (0, 0)
    assert "No runs were given" in (tmp_path / "site" / "index.html").read_text()


def test_unfinished_runs_are_marked(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs", "r", [episode("r", f"t{i}") for i in range(4)])
    lines = (run / "episodes.jsonl").read_text().splitlines(keepends=True)
    (run / "episodes.jsonl").write_text("".join(lines[:3]))
    build_site([run], tmp_path / "site")
    assert "3 of 4 planned" in (tmp_path / "site" / "index.html").read_text()


def _scored(run_id: str, task: str, parts: dict[str, float]) -> EpisodeRecord:
    """An episode whose total is the weighted sum of ``parts`` (spec -> value)."""
    record = episode(run_id, task, reward=1.0)
    components = [
        RewardComponent(name=spec, value=value, weight=RewardSpec.parse(spec).weight)
        for spec, value in parts.items()
    ]
    total = total_reward(components)
    return record.model_copy(
        update={"reward_components": components, "reward": total, "success": total >= 1.0}
    )


def test_runs_scored_differently_are_separate_cells_within_their_range(tmp_path: Path) -> None:
    """The oracle scored with exact and with exact + fuzzy=0.5: never one number above 1."""
    runs = tmp_path / "runs"
    for rid, rewards in (("plain", ["exact"]), ("fuzzy", ["exact", "fuzzy=0.5"])):
        parts = dict.fromkeys(rewards, 1.0)
        records = [_scored(rid, f"t{i}", parts) for i in range(8)]
        write_run(runs, rid, records, model="scripted/oracle", rewards=rewards)
    out = tmp_path / "site"
    build_site([runs], out)
    rows = json.loads((out / "data" / "leaderboard.json").read_text())
    by_variant = {tuple(r["rewards"]): r for r in rows}
    assert sorted(by_variant) == [("exact",), ("exact", "fuzzy=0.5")]
    plain, fuzzy = by_variant[("exact",)], by_variant[("exact", "fuzzy=0.5")]
    assert (plain["mean_reward"], plain["reward_range"]) == (1.0, [0.0, 1.0])
    assert (fuzzy["mean_reward"], fuzzy["reward_range"]) == (1.5, [0.0, 1.5])
    assert plain["ci95_high"] == 1.0 and fuzzy["ci95_high"] == 1.5  # inside the range
    assert plain["interval"] == fuzzy["interval"] == "bounded"
    assert plain["fingerprint"] != fuzzy["fingerprint"]
    assert [c["name"] for c in fuzzy["components"]] == ["exact", "fuzzy=0.5"]
    assert plain["variant"] == "rewards exact" and fuzzy["variant"] == "rewards exact, fuzzy=0.5"
    # one model-index entry per configuration, each naming it
    cards = sorted((out / "model-index").rglob("*.yaml"))
    assert len(cards) == 2
    configs = {
        yaml.safe_load(c.read_text())["model-index"][0]["results"][0]["dataset"]["args"][
            "taskhub_config"
        ]
        for c in cards
    }
    assert configs == {plain["fingerprint"], fuzzy["fingerprint"]}
    home = (out / "index.html").read_text()
    assert "rewards exact, fuzzy=0.5" in home


def test_models_that_share_tasks_are_ranked_by_paired_differences(tmp_path: Path) -> None:
    """B beats A by 0.05 on every task; their intervals overlap, the paired one does not."""
    runs = tmp_path / "runs"
    base = [0.1 * i for i in range(10)]
    for rid, shift in (("a", 0.0), ("b", 0.05)):
        records = [episode(rid, f"t{i}", reward=v + shift) for i, v in enumerate(base)]
        write_run(runs, rid, records, model=f"scripted/{rid}")
    out = tmp_path / "site"
    build_site([runs], out)
    rows = {r["model"]: r for r in json.loads((out / "data" / "leaderboard.json").read_text())}
    a, b = rows["scripted/a"], rows["scripted/b"]
    assert a["ci95_high"] > b["ci95_low"]  # the intervals overlap...
    assert (b["rank"], a["rank"]) == (1, 2)  # ...but the paired difference is clear
    assert a["tied_with"] == b["tied_with"] == []
    slug = next((out / "data" / "tasksets").glob("*.pairs.json")).name
    pairs = json.loads((out / "data" / "tasksets" / slug).read_text())
    assert len(pairs) == 1 and pairs[0]["method"] == "paired" and pairs[0]["shared_tasks"] == 10
    assert abs(abs(pairs[0]["difference"]) - 0.05) < 1e-9
    page = next((out / "tasksets").glob("*.html")).read_text()
    assert "ranked by paired differences" in page


def test_cells_break_down_by_a_task_field(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_site([corpus], out, group_by="family")
    groups = sorted((out / "data" / "tasksets").glob("*.groups.json"))
    assert groups
    rows = json.loads(groups[0].read_text())
    assert rows and {r["group"] for r in rows} == {"add"}
    assert all(r["n_tasks"] >= 1 for r in rows)
    page = (out / "tasksets" / groups[0].name.replace(".groups.json", ".html")).read_text()
    assert "By family" in page


def test_large_tables_are_written_in_parts(tmp_path: Path) -> None:
    records = [episode("many", f"t-{i:03d}", reward=i % 2) for i in range(300)]
    run = write_run(tmp_path / "runs", "many", records)
    whole = tmp_path / "whole"
    build_site([run], whole)
    build_site([run], tmp_path / "site", part_bytes=4096)
    data = tmp_path / "site" / "data"
    (single,) = (whole / "data" / "runs").glob("many-*.tasks.json")
    rows = json.loads(single.read_text())
    assert len(rows) == 300
    parts = sorted(
        (data / "runs").glob(single.name.replace(".json", "*.json")),
        key=lambda p: int(p.name.split(".")[-2]) if p.name.count(".") > 2 else 1,
    )
    assert len(parts) > 5
    assert [row for part in parts for row in json.loads(part.read_text())] == rows
    assert all(len(part.read_bytes()) <= 4096 + 8 for part in parts)
    csv_rows = [
        row
        for part in parts
        for row in csv.DictReader(part.with_suffix(".csv").read_text().splitlines())
    ]
    assert [r["task_id"] for r in csv_rows] == [r["task_id"] for r in rows]
    downloads = (tmp_path / "site" / "downloads.html").read_text()
    for part in parts:
        assert str(part.relative_to(tmp_path / "site")) in downloads
    assert f"(part 2 of {len(parts)})" in downloads
    run_page = next((tmp_path / "site" / "runs").glob("many-*.html")).read_text()
    assert f"(part 1 of {len(parts)}" in run_page
