"""Reading runs ahead of the board: order, errors and early stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from taskhub.leaderboard import build_site
from taskhub.leaderboard._board import _read_ahead

from taskhub import ResultsError

from .corpus import episode, write_run


def test_items_come_in_order_from_another_thread() -> None:
    threads: set[str] = set()

    def items() -> Iterator[int]:
        for i in range(50):
            threads.add(threading.current_thread().name)
            yield i

    assert list(_read_ahead(items(), depth=3)) == list(range(50))
    assert threads == {"taskhub-read-ahead"}


def test_an_error_is_raised_in_place_of_its_item() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise ResultsError("line 2: broken")

    ahead = _read_ahead(items())
    assert next(ahead) == 1
    with pytest.raises(ResultsError, match="line 2: broken"):
        next(ahead)


def test_leaving_early_stops_the_thread_and_closes_the_items() -> None:
    closed = threading.Event()

    def items() -> Iterator[int]:
        try:
            yield from range(1000)
        finally:
            closed.set()

    ahead = _read_ahead(items(), depth=1)
    assert [next(ahead), next(ahead)] == [0, 1]
    ahead.close()
    assert closed.is_set()
    assert not any(t.name == "taskhub-read-ahead" for t in threading.enumerate())


def test_a_broken_run_fails_the_build_and_leaves_no_reader_behind(tmp_path: Path) -> None:
    good = write_run(tmp_path / "runs", "a-good", [episode("a-good", f"t{i}") for i in range(3)])
    bad = write_run(tmp_path / "runs", "b-bad", [episode("b-bad", "t0")])
    (bad / "episodes.index.csv").unlink()
    with (bad / "episodes.jsonl").open("a") as f:
        f.write('{"not": "a record"}\n')
    with pytest.raises(ResultsError, match="line 2"):
        build_site([good, bad], tmp_path / "site")
    assert not any(t.name == "taskhub-read-ahead" for t in threading.enumerate())
