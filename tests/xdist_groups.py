"""The default run is parallel (pytest-xdist, ``-n 4 --dist loadgroup``): tests that share a
costly fixture run on one worker, which builds it once.

A module-scoped fixture is built by every worker that runs a test of its module, so the tests of
a module that use one form a group; so do the users of a session fixture in ``SHARED_FIXTURES``.
A test in two groups joins them. Each test gets the ``xdist_group`` mark of its group.

xdist 3.8 passes a group to its scheduler by appending ``@group`` to the test's node id, which
pytest 9.2's structured node ids no longer allow (pytest-xdist issue 1386): the mark alone is
then silently ignored. So the workers also write their groups to a folder the controller gives
them, and the controller's scheduler reads them from there.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

#: Session fixtures too costly to build on several workers: their group's name, and the time
#: limit of a test that uses one (in seconds; the first of them builds the fixture).
SHARED_FIXTURES: dict[str, tuple[str, float]] = {
    # the whole validator corpus validated as one batch: minutes of work
    "corpus_batch": ("corpus-batch", 900),
    # a 2-node Ray cluster (15-22 s, ~1 GB): two at once would crowd a 2-core machine
    "ray_cluster": ("ray", 600),
    # SmolLM2 converted for training (~1 GB); its GRPO steps take ~3.7 GiB each
    "smollm2_dir": ("smollm2", 900),
}

GROUPS_DIR = pytest.StashKey[Path]()
WORKER_INPUT_KEY = "taskhub_xdist_groups"


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller, or a run without workers
        config.stash[GROUPS_DIR] = Path(tempfile.mkdtemp(prefix="taskhub-xdist-groups-"))


def pytest_unconfigure(config: pytest.Config) -> None:
    if GROUPS_DIR in config.stash:
        shutil.rmtree(config.stash[GROUPS_DIR], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell a worker where to write its groups."""
    node.workerinput[WORKER_INPUT_KEY] = str(node.config.stash[GROUPS_DIR])


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    parent: dict[str, str] = {}

    def root(group: str) -> str:
        while parent.setdefault(group, group) != group:
            group = parent[group]
        return group

    wanted: dict[pytest.Item, str] = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        groups = []
        for name in getattr(item, "fixturenames", ()):
            if name in SHARED_FIXTURES:
                group, timeout_s = SHARED_FIXTURES[name]
                groups.append(group)
                if item.get_closest_marker("timeout") is None:
                    item.add_marker(pytest.mark.timeout(timeout_s))
            elif info and any(d.scope == "module" for d in info.name2fixturedefs.get(name, ())):
                groups.append(item.nodeid.split("::", 1)[0])
        for group in groups[1:]:
            parent[root(group)] = root(groups[0])
        if groups:
            wanted[item] = groups[0]
    by_test = {}
    for item, group in wanted.items():
        item.add_marker(pytest.mark.xdist_group(root(group)))
        by_test[item.nodeid] = root(group)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and WORKER_INPUT_KEY in workerinput:
        # every worker collects the same tests: the controller reads any one file
        folder = Path(workerinput[WORKER_INPUT_KEY])
        partial = folder / f"{workerinput['workerid']}.partial"
        partial.write_text(json.dumps(by_test))
        os.replace(partial, partial.with_suffix(".json"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``, a scheduler that reads the groups the workers wrote."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    folder = config.stash[GROUPS_DIR]

    class FixtureGroupScheduling(LoadGroupScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            # called once every worker has collected, and so written its file
            if self.groups is None:
                written = sorted(folder.glob("*.json"))
                self.groups = json.loads(written[0].read_text()) if written else {}
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

    return FixtureGroupScheduling(config, log)
