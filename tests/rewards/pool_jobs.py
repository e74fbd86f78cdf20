"""Module-level functions for the reward pool tests (a worker imports them by name)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def echo(value: object) -> object:
    return value


def pid() -> int:
    return os.getpid()


def spin() -> None:
    while True:  # a pathological input: never returns
        pass


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def boom() -> None:
    raise ValueError("the scorer broke")


def crash() -> None:
    os._exit(3)


def unpicklable_result() -> Callable[[], None]:
    return lambda: None
