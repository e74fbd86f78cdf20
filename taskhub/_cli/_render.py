"""Terminal output shared by commands: the progress bar and the summary tables."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from taskhub._comparability import comparability
from taskhub._results import GroupSummary, RunSummary
from taskhub._schema import EpisodeRecord, RunManifest

if TYPE_CHECKING:
    from taskhub._compare import RunComparison


class BarProgress:
    """A live progress bar: episodes done/total, rate, errors, ETA; what it waits for first."""

    def __init__(self, console: Console) -> None:
        """Draw on ``console`` (stderr)."""
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("[red]{task.fields[errors]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None
        self._waiting: TaskID | None = None
        self._errors = 0
        self._done = 0
        self._started = 0.0

    def status(self, text: str) -> None:
        """Show what the run waits for before its first episode (the env, the model)."""
        if self._waiting is None:
            self._progress.start()
            self._waiting = self._progress.add_task(escape(text), total=None, rate="", errors="")
        else:
            self._progress.update(self._waiting, description=escape(text))

    def start(self, total: int, completed: int) -> None:
        """Show the bar."""
        import time

        self._started = time.perf_counter()
        if self._waiting is not None:
            self._progress.remove_task(self._waiting)
            self._waiting = None
        self._progress.start()
        self._task = self._progress.add_task(
            "episodes", total=total, completed=completed, rate="", errors=""
        )

    def update(self, record: EpisodeRecord) -> None:
        """Advance by one episode."""
        import time

        self._done += 1
        if record.outcome != "scored":
            self._errors += 1
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        assert self._task is not None
        self._progress.update(
            self._task,
            advance=1,
            rate=f"{self._done / elapsed:.2f} ep/s",
            errors=f"{self._errors} errors" if self._errors else "",
        )

    def complete(self) -> None:
        """Stop drawing."""
        self._progress.stop()


#: Seconds between two progress lines at most (a line is also written every tenth of the run).
LINE_INTERVAL_S = 30.0


class LineProgress:
    """Progress as plain lines, for output that is not a terminal (logs, CI, pipes)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        """Write each line with ``write`` (stderr)."""
        self._write = write
        self._total = 0
        self._done = 0
        self._errors = 0
        self._first = 0
        self._started = 0.0
        self._last = 0.0
        self._next_step = 0

    def status(self, text: str) -> None:
        """Say what the run waits for before its first episode."""
        self._write(f"taskhub: {text}...")

    def start(self, total: int, completed: int) -> None:
        """Write the first line."""
        import time

        self._started = self._last = time.monotonic()
        self._total, self._done, self._first = total, completed, completed
        self._next_step = self._done + max(1, total // 10)
        self._write(f"episodes {completed}/{total}")

    def update(self, record: EpisodeRecord) -> None:
        """Count one episode; write a line every tenth of the run or every 30 seconds."""
        import time

        self._done += 1
        if record.outcome != "scored":
            self._errors += 1
        now = time.monotonic()
        if self._done >= self._next_step or now - self._last >= LINE_INTERVAL_S:
            self._next_step = self._done + max(1, self._total // 10)
            self._last = now
            self._write(self._line(now))

    def complete(self) -> None:
        """Write the last line."""
        import time

        if self._started:
            self._write(self._line(time.monotonic()) + ", finished")

    def _line(self, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        errors = f", {self._errors} not scored" if self._errors else ""
        ran = self._done - self._first
        return (
            f"episodes {self._done}/{self._total} ({self._done / max(self._total, 1):.0%}), "
            f"{elapsed:.0f}s, {ran / elapsed:.2f} ep/s{errors}"
        )


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary_table(summary: RunSummary, manifest: RunManifest, run_dir: Path) -> Table:
    """The headline numbers of a run."""
    # Every string here can come from a model, an env or a taskset: escape rich markup.
    table = Table(title=escape(f"run {manifest.run_id}"), show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    taskset = manifest.taskset
    pinned = taskset.commit_sha[:12] if taskset.commit_sha else taskset.fingerprint[:12]
    table.add_row("model", escape(manifest.model.spec))
    table.add_row("taskset", escape(f"{taskset.name} [{manifest.split}] @ {pinned}"))
    if manifest.env is not None:
        table.add_row(
            "env",
            escape(
                f"{manifest.env.spec} ({manifest.env.transport}, "
                f"{len(manifest.env.urls)} server(s))"
            ),
        )
    config = comparability(manifest)
    table.add_row("rewards", escape(f"{config.reward_label}  range {config.range_label}"))
    table.add_row("config", f"{config.fingerprint} (runs pool only with the same)")
    table.add_row("status", manifest.status)
    planned = f" of {summary.n_planned}" if summary.n_planned else ""
    table.add_row("episodes", f"{summary.n_episodes}{planned} ({summary.n_tasks} tasks)")
    if summary.mean_reward is not None:
        ci = f"  95% CI [{_num(summary.ci95[0])}, {_num(summary.ci95[1])}]" if summary.ci95 else ""
        se = f" ± {_num(summary.stderr)} (s.e.)" if summary.stderr is not None else ""
        method = " (bounded)" if summary.interval == "bounded" else ""
        table.add_row(
            "mean reward",
            f"{_num(summary.mean_reward)}{se}{ci}{method}  n={summary.n_rewarded}",
        )
    if summary.success_rate is not None:
        sci = (
            f"  95% CI [{_num(summary.success_ci95[0])}, {_num(summary.success_ci95[1])}]"
            if summary.success_ci95
            else ""
        )
        table.add_row("success rate", f"{_num(summary.success_rate)}{sci}")
    for name, value in summary.pass_at_k.items():
        table.add_row(name, _num(value))
    counts = ", ".join(
        f"{name} {count}/{summary.n_episodes} ({count / summary.n_episodes:.1%})"
        for name, count in summary.outcomes.items()
        if count and summary.n_episodes
    )
    table.add_row("outcomes", counts or "-")
    if summary.mean_steps is not None:
        table.add_row("mean steps", f"{summary.mean_steps:.2f}")
    if summary.tokens.get("calls"):
        table.add_row(
            "tokens",
            f"{summary.tokens['prompt']} prompt + {summary.tokens['completion']} completion "
            f"in {summary.tokens['calls']} calls",
        )
    if summary.tokens_per_s is not None:
        speed = f"{summary.tokens_per_s:.1f} completion tokens/s of model time"
        if summary.queue_time_s > 0:
            speed += f" (calls also queued {summary.queue_time_s:.1f}s for the model)"
        table.add_row("model speed", speed)
    if summary.model_cache:
        cache = summary.model_cache
        table.add_row(
            "model cache", f"{cache.get('hits', 0)} hits, {cache.get('misses', 0)} misses"
        )
    table.add_row("run dir", escape(str(run_dir)))
    return table


def component_table(summary: RunSummary) -> Table:
    """Each reward component's mean and interval, beside the total's."""
    table = Table(title="reward components", title_justify="left")
    for column in ("component", "weight", "range", "n", "mean", "95% CI", "errors"):
        table.add_column(column, justify="left" if column in ("component", "range") else "right")
    for c in summary.components:
        ci = f"[{_num(c.ci95[0])}, {_num(c.ci95[1])}]" if c.ci95 else "-"
        bounds = f"[{c.range[0]:g}, {c.range[1]:g}]" if c.range else "-"
        table.add_row(
            escape(c.name),
            "gate" if c.gate else f"{c.weight:g}",
            bounds,
            str(c.n),
            _num(c.mean),
            ci,
            str(c.errors),
        )
    return table


def _with_ci(value: float | None, ci: tuple[float, float] | None) -> str:
    return f"{_num(value)} [{_num(ci[0])}, {_num(ci[1])}]" if ci else _num(value)


def group_table(field: str, groups: list[GroupSummary]) -> Table:
    """A breakdown by a task field: each group's mean reward and success rate, with intervals."""
    table = Table(title=escape(f"by {field}"), title_justify="left")
    columns = (field, "tasks", "episodes", "mean reward [95% CI]", "success [95% CI]")
    for column in columns:
        table.add_column(escape(column), justify="left" if column == field else "right")
    for g in groups:
        table.add_row(
            escape(g.value),
            str(g.n_tasks),
            str(g.n_episodes),
            _with_ci(g.mean_reward, g.ci95),
            _with_ci(g.success_rate, g.success_ci95),
        )
    return table


def task_table(summary: RunSummary, limit: int | None = None) -> Table:
    """Per-task numbers of a run."""
    table = Table(title="per task", title_justify="left")
    for column in ("task_id", "n", "scored", "mean reward", "successes", "pass rate"):
        table.add_column(column, justify="left" if column == "task_id" else "right")
    rows = summary.per_task if limit is None else summary.per_task[:limit]
    for task in rows:
        table.add_row(
            escape(task.task_id),
            str(task.n),
            str(task.scored),
            _num(task.mean_reward),
            str(task.successes),
            _num(task.pass_rate),
        )
    return table


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def comparison_table(comparison: RunComparison) -> Table:
    """The headline of a paired comparison of two runs."""
    c = comparison
    table = Table(title=escape(f"{c.run_b} vs {c.run_a}"), show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("A", escape(f"{c.model_a} ({c.run_a})"))
    table.add_row("B", escape(f"{c.model_b} ({c.run_b})"))
    table.add_row("taskset", escape(f"{c.taskset[:20]} [{c.split}]"))
    if c.differences:
        table.add_row("differs", escape("; ".join(c.differences)))
    table.add_row(
        "tasks",
        f"{c.shared_tasks} shared: {c.counts.get('fixed', 0)} fixed, "
        f"{c.counts.get('regressed', 0)} regressed, {c.counts.get('unchanged', 0)} unchanged",
    )
    if c.only_a or c.only_b:
        table.add_row("unpaired", f"{len(c.only_a)} only in A, {len(c.only_b)} only in B")
    for name, estimate in (("reward B - A", c.reward), ("success B - A", c.success)):
        ci = (
            f"  95% CI [{_signed(estimate.ci95[0])}, {_signed(estimate.ci95[1])}]"
            if estimate.ci95
            else ""
        )
        table.add_row(name, f"{_signed(estimate.difference)}{ci}  ({estimate.tasks} tasks)")
    m = c.mcnemar
    table.add_row(
        "McNemar",
        f"p = {m.p_value:.4g}  ({m.only_b} pairs succeed only in B, {m.only_a} only in A, "
        f"of {m.pairs})",
    )
    for name, values in c.pass_at_k.items():
        table.add_row(
            name, f"{_num(values['a'])} -> {_num(values['b'])} ({_signed(values['delta'])})"
        )
    return table


def change_table(comparison: RunComparison, limit: int) -> Table:
    """The regressed and fixed tasks of a comparison (regressions first)."""
    table = Table(title="changed tasks", title_justify="left")
    for column in ("task_id", "change", "A pass", "B pass", "A reward", "B reward"):
        table.add_column(column, justify="left" if column in ("task_id", "change") else "right")
    changed = [t for t in comparison.tasks if t.change != "unchanged"][:limit]
    for t in changed:
        table.add_row(
            escape(t.task_id),
            t.change,
            _num(t.a_pass_rate),
            _num(t.b_pass_rate),
            _num(t.a_mean),
            _num(t.b_mean),
        )
    return table
