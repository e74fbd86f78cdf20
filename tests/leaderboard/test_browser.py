"""End to end in headless Chromium: the site from file://, sorting, the episode browser, no network.

Needs Debian's `chromium` and the `playwright` package (its bundled driver; no browser download).
Locally the test is skipped when they are missing; with TASKHUB_REQUIRE_BROWSER=1 (set by
.ci/run) it fails instead. Screenshots of the home page and of a trajectory are saved to
TASKHUB_TEST_ARTIFACTS (default build/test-artifacts/leaderboard/).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from taskhub.leaderboard import build_site

from taskhub import read_results

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(
    os.environ.get("TASKHUB_TEST_ARTIFACTS") or ROOT / "build" / "test-artifacts" / "leaderboard"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [
        what
        for what, ok in (
            ("Debian's chromium (apt-get install chromium)", Path(CHROMIUM).is_file()),
            ("playwright (pip install playwright)", importlib.util.find_spec("playwright")),
        )
        if not ok
    ]
    if missing:
        message = "the browser test needs " + " and ".join(missing)
        if os.environ.get("TASKHUB_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def site(real_run: Path, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("browser") / "site"
    build_site([real_run, corpus], out, page_size=4, chunk_size=5)  # several lazy files
    return out


class Watch:
    """Every request a page makes, and every dialog it opens."""

    def __init__(self, page: Any) -> None:
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("pageerror", lambda error: self.errors.append(str(error)))

        def dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", dialog)

    def check(self) -> None:
        assert self.requests, "no request seen at all"
        remote = [u for u in self.requests if not u.startswith(("file://", "data:"))]
        assert remote == []
        assert self.dialogs == [] and self.errors == []


def test_home_sorts_and_filters(browser: Any, site: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    watch = Watch(page)
    page.goto((site / "index.html").as_uri())
    rows = page.locator("#matrix tbody tr")
    labels = lambda: page.locator("#matrix tbody tr th").all_inner_texts()  # noqa: E731
    assert labels()[0] == "scripted/alpha"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "home.png"), full_page=True)
    grid = page.locator("#matrix thead th", has_text="1234567890ab").first
    grid.click(position={"x": 5, "y": 30})
    assert grid.get_attribute("aria-sort") == "descending"
    assert labels()[:2] == ["scripted/gamma (temperature=0.0)", "scripted/gamma (temperature=0.7)"]
    grid.click(position={"x": 5, "y": 30})
    assert grid.get_attribute("aria-sort") == "ascending"
    assert labels()[:2] == ["scripted/gamma (temperature=0.0)", "scripted/gamma (temperature=0.7)"]
    page.fill("input[data-filter=matrix]", "beta")
    visible = [r for r in rows.all() if r.is_visible()]
    assert len(visible) == 1
    assert "openai/beta<script>alert('xss')</script>" in visible[0].inner_text()
    watch.check()
    page.close()


def test_episode_browser_filters_and_opens_a_trajectory(
    browser: Any, site: Path, real_run: Path
) -> None:
    records = read_results(real_run)
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    watch = Watch(page)
    (run_page,) = (site / "runs").glob("*-gridworld-scripted-random-*.html")
    page.goto(run_page.as_uri())
    status = page.locator("#ep-status")
    status.filter(has_text=f"of {len(records)} matching.").wait_for()
    assert page.locator("#ep-list tbody tr").count() == len(records)
    task = records[0].task_id
    page.fill("#ep-task", task)
    status.filter(has_text="of 3 matching").wait_for()
    assert set(page.locator("#ep-list tbody tr td:nth-child(2)").all_inner_texts()) == {task}
    page.fill("#ep-task", "")
    page.fill("#ep-min", "1")
    rewarded = sum(1 for r in records if r.reward is not None and r.reward >= 1)
    status.filter(has_text=f"of {rewarded} matching" if rewarded else "No episode").wait_for()
    page.fill("#ep-min", "")
    page.select_option("#ep-outcome", "infra_error")
    status.filter(has_text="No episode matches").wait_for()
    page.select_option("#ep-outcome", "")
    status.filter(has_text=f"of {len(records)} matching").wait_for()

    # open the longest episode: its record comes from a lazily loaded page file
    index = max(range(len(records)), key=lambda i: records[i].num_steps)
    record = records[index]
    page.locator(f"#ep-list tbody tr[data-index='{index}'] td").nth(2).click()
    view = page.locator("#trajectory")
    view.locator("h2").wait_for()
    assert f"{record.task_id} (sample {record.sample})" in view.locator("h2").inner_text()
    assert view.locator("h3", has_text=f"Steps ({record.num_steps})").count() == 1
    assert view.locator(".step").count() == record.num_steps
    first = view.locator(".step").first.inner_text()
    assert str(record.steps[0].action["move"]) in first
    assert f"reward\n{record.reward:.3f}\n" in view.inner_text()
    assert page.evaluate("location.hash") == f"#episode={index}"
    loaded = [u for u in watch.requests if "/page-" in u]
    assert loaded == [run_page.with_suffix("").as_uri() + f"/page-{index // 4:05d}.js"]
    view.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "trajectory.png"))
    watch.check()
    page.close()


def test_markup_in_records_is_shown_as_text(browser: Any, site: Path) -> None:
    page = browser.new_page()
    watch = Watch(page)
    (run_page,) = (site / "runs").glob("run-beta-arith-0-*.html")
    page.goto(run_page.as_uri() + "#episode=0")
    view = page.locator("#trajectory")
    view.locator(".step").first.wait_for()
    text = view.inner_text()
    assert "</script><script>alert(1)</script>" in text
    page.goto(run_page.as_uri() + "#episode=1")
    page.reload()
    view.locator(".step").first.wait_for()
    assert '"><img src=x onerror=alert(1)>' in view.inner_text()
    assert view.locator("img").count() == 0
    page.goto(run_page.as_uri() + "#episode=2")
    page.reload()
    view.locator("h2", has_text="add-4").wait_for()
    assert "no action in <script>alert('xss')</script>" in view.inner_text()
    watch.check()
    page.close()
