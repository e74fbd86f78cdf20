"""The leaderboard as data: runs grouped into models x taskset revisions, envs with their reports.

``assemble`` reads every run once (``taskhub.iter_results_tables``) and computes every number the
site shows; rendering (``_site``) only formats them. A cell is keyed by (model spec, sampling
parameters, format retries) x (taskset name, resolved commit or content fingerprint, split, and
how episodes were scored: rewards with their versions, success threshold, env and version, step
limit; see ``taskhub.comparability``): two revisions of a taskset, or one taskset scored two
ways, are two columns, and runs are pooled only when all of that matches (shards of one
evaluation, or repeated runs that add samples). Within a column, models that ran the same tasks
are ranked by paired differences (``rank_paired``).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from queue import Full, Queue
from typing import Protocol, TypeVar, cast

import pyarrow as pa

from taskhub import (
    Comparability,
    GroupSummary,
    RunManifest,
    ValidationReport,
    comparability,
    group_summaries,
    iter_results_tables,
    results_schema,
    task_field_column,
    wilson_interval,
)

from ._episodes import EPISODE_COLUMNS
from ._inputs import Inputs, RunInput
from ._stats import STAT_COLUMNS, Pair, Stats, rank_paired, summarize_table, task_means

#: Verdicts from best to worst; envs without a report come after all of them.
VERDICT_ORDER = ("pass", "warn", "fail", "unsupported", "error")
DETERMINISM_CHECK = "runtime.episode_determinism"
LATENCY_CHECK = "runtime.step_latency"
UNKNOWN_ENV = "(unknown env)"
#: Column added to run tables holding each episode's group (``assemble(group_by=...)``).
GROUP_COLUMN = "group"


def slug(text: str, key: str) -> str:
    """A file name for ``text``: readable, lowercase ASCII, unique per ``key``."""
    readable = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48].strip("-")
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{readable}-{digest}" if readable else digest


@dataclass(eq=False)
class RunEntry:
    """One run: its manifest, its episodes and their statistics."""

    manifest: RunManifest
    slug: str
    table: pa.Table
    """The run's rows of ``read_results_table``, in file order."""
    stats: Stats
    comparability: Comparability
    """What the run's scores compare with (``taskhub.comparability``)."""
    model: ModelRow | None = None
    column: TasksetColumn | None = None
    env: EnvRow | None = None


@dataclass(eq=False)
class ModelRow:
    """A model configuration: its spec and sampling parameters (seed aside)."""

    key: str
    spec: str
    sampling: dict[str, object]
    slug: str
    label: str = ""
    runs: list[RunEntry] = field(default_factory=list)
    cells: dict[str, Cell] = field(default_factory=dict)
    """By column key."""

    @property
    def mean_rank(self) -> float:
        """Average rank over the columns the model has a ranked cell in."""
        ranks = [c.rank for c in self.cells.values() if c.rank]
        return sum(ranks) / len(ranks) if ranks else float("inf")


@dataclass(eq=False)
class TasksetColumn:
    """One taskset at one revision and split."""

    key: str
    name: str
    revision: str
    """The resolved commit sha, else the content fingerprint."""
    revision_kind: str
    """``commit`` or ``content``."""
    split: str
    slug: str
    comparability: Comparability
    """How the column's episodes were scored (its first run's; every run's agrees)."""
    runs: list[RunEntry] = field(default_factory=list)
    cells: list[Cell] = field(default_factory=list)
    """Ranked: best mean first."""
    envs: list[EnvRow] = field(default_factory=list)
    variant: str = ""
    """What tells this column from others of the same taskset revision and split (their
    rewards, env, step limit...), empty when there is no other."""
    pairs: list[tuple[Cell, Cell, Pair]] = field(default_factory=list)
    """Every pairwise comparison of the column's cells that ranking used."""

    @property
    def fingerprint(self) -> str:
        """The scoring fingerprint shared by the column's runs."""
        return self.comparability.scoring_fingerprint

    @property
    def label(self) -> str:
        """``name [split] @ revision``, the revision shortened, and the variant if any."""
        text = f"{self.name} [{self.split}] @ {self.short_revision}"
        return f"{text} ({self.variant})" if self.variant else text

    @property
    def short_revision(self) -> str:
        """The first 12 characters of the revision."""
        return self.revision[:12]

    @property
    def repo_id(self) -> str | None:
        """The Hub dataset repo, when the taskset came from the Hub."""
        return self.runs[0].manifest.taskset.repo_id if self.runs else None

    @property
    def has_samples(self) -> bool:
        """Whether any cell has several samples of a task (so pass@k means something)."""
        return any(len(c.stats.summary.pass_at_k) > 1 for c in self.cells)

    @property
    def task_sets_differ(self) -> bool:
        """Whether the models were evaluated on different sets of tasks."""
        sets = {frozenset(c.stats.per_task["task_id"].tolist()) for c in self.cells}
        return len(sets) > 1


@dataclass(eq=False)
class Cell:
    """A model's result on a taskset revision: its runs pooled."""

    model: ModelRow
    column: TasksetColumn
    runs: list[RunEntry]
    stats: Stats
    rank: int = 0
    """1 + the number of models better beyond doubt (paired difference whose 95% interval lies
    above 0 when they share tasks, else an interval entirely above this one's); 0: no mean."""
    tied_with: list[ModelRow] = field(default_factory=list)
    """Models neither better nor worse than this one beyond doubt."""
    groups: list[GroupSummary] = field(default_factory=list)
    """Breakdown by the task field the board was built with (``group_by``)."""

    @property
    def fingerprint(self) -> str:
        """The configuration fingerprint shared by the cell's runs (sampling included)."""
        return self.runs[0].comparability.fingerprint

    @property
    def best_pass_at_k(self) -> tuple[str, float] | None:
        """The reported pass@k with the largest k, when there are several samples."""
        if len(self.stats.summary.pass_at_k) < 2:
            return None
        name = max(self.stats.summary.pass_at_k, key=lambda k: int(k.split("@")[1]))
        return name, self.stats.summary.pass_at_k[name]

    @property
    def planned(self) -> int:
        """Episodes its runs planned (more than it has while a run is unfinished)."""
        return sum(r.manifest.n_planned for r in self.runs)

    @property
    def error_rate(self) -> float:
        """Share of episodes that did not end ``scored``."""
        s = self.stats.summary
        return 1 - s.outcomes.get("scored", 0) / s.n_episodes if s.n_episodes else 0.0


@dataclass(eq=False)
class EnvRow:
    """An environment: its latest validation report and the runs that used it."""

    name: str
    slug: str
    reports: list[ValidationReport] = field(default_factory=list)
    runs: list[RunEntry] = field(default_factory=list)
    rank: int = 0

    @property
    def report(self) -> ValidationReport | None:
        """The latest report."""
        return self.reports[-1] if self.reports else None

    @property
    def verdict(self) -> str | None:
        """The latest report's verdict."""
        return self.report.verdict if self.report else None

    def failed(self, severity: str) -> list[str]:
        """Ids of the latest report's failed checks of ``severity``."""
        if self.report is None:
            return []
        return [c.id for c in self.report.checks if c.status == "fail" and c.severity == severity]

    @property
    def errored(self) -> list[str]:
        """Ids of checks that could not run."""
        return [c.id for c in self.report.checks if c.status == "error"] if self.report else []

    @property
    def determinism(self) -> str | None:
        """Status of the episode-determinism check, if it ran."""
        if self.report is None:
            return None
        return next((c.status for c in self.report.checks if c.id == DETERMINISM_CHECK), None)

    @property
    def episodes(self) -> int:
        """Episodes evaluated on this env."""
        return sum(r.stats.summary.n_episodes for r in self.runs)

    @property
    def infra_errors(self) -> int:
        """Episodes that ended in an infra error."""
        return sum(r.stats.summary.outcomes.get("infra_error", 0) for r in self.runs)

    @property
    def infra_rate(self) -> float | None:
        """Share of episodes that ended in an infra error."""
        return self.infra_errors / self.episodes if self.episodes else None

    @property
    def infra_ci95(self) -> tuple[float | None, float | None]:
        """Wilson interval of the infra error rate."""
        return wilson_interval(self.infra_errors, self.episodes)

    @property
    def step_latency_ms(self) -> tuple[float | None, float | None]:
        """Step latency ``(p50, p99)`` in milliseconds measured by the latest validation."""
        if self.report is None:
            return None, None
        check = next((c for c in self.report.checks if c.id == LATENCY_CHECK), None)
        if check is None or check.status not in ("pass", "fail"):
            return None, None
        p50, p99 = check.measured.get("step_p50_ms"), check.measured.get("step_p99_ms")
        number = (int, float)
        return (
            float(p50) if isinstance(p50, number) else None,
            float(p99) if isinstance(p99, number) else None,
        )

    @property
    def latency_ms(self) -> float | None:
        """Mean env time per request (reset or step) in evaluations, in milliseconds."""
        requests = sum(r.stats.env_requests for r in self.runs)
        seconds = sum(r.stats.env_time_s for r in self.runs)
        return 1000 * seconds / requests if requests else None

    def sort_key(self) -> tuple[object, ...]:
        """Best first: verdict, failed checks by severity, errored checks, infra errors."""
        verdict = VERDICT_ORDER.index(self.verdict) if self.verdict else len(VERDICT_ORDER)
        return (
            verdict,
            len(self.failed("fail")),
            len(self.failed("warn")),
            len(self.errored),
            self.infra_rate or 0.0,
            self.name,
        )


@dataclass
class Board:
    """Everything the site shows."""

    runs: list[RunEntry]
    models: list[ModelRow]
    """Ordered: most tasksets first, then best average rank."""
    columns: list[TasksetColumn]
    """Ordered by taskset name, split, revision."""
    envs: list[EnvRow]
    """Ranked by validation quality."""
    group_by: str | None = None
    """The task field cells are broken down by, if any."""


class EpisodeSink(Protocol):
    """Receives a run's episodes block by block (``_episodes.EpisodeWriter``)."""

    def add(self, table: pa.Table) -> None:
        """Take the next block: rows of ``read_results_table`` with ``EPISODE_COLUMNS``."""

    def close(self) -> object:
        """The run is read."""


def assemble(
    inputs: Inputs,
    *,
    validate: bool = False,
    episodes: Callable[[RunEntry], EpisodeSink] | None = None,
    group_by: str | None = None,
) -> Board:
    """Read every run and compute the leaderboard.

    Each run is read once, a block of records at a time, so that runs of any size fit in
    memory: the statistics keep their few columns, and ``episodes`` gets the full records.

    Args:
        inputs: What ``resolve_inputs`` found.
        validate: Validate every episode record in full (slow; see ``read_results_table``).
        episodes: Called with each run before it is read; what it returns receives the run's
            records (``EPISODE_COLUMNS``) block by block, and is closed after the last.
        group_by: A task field (``metadata.family``; see ``taskhub.task_field``) to break every
            cell down by. It is read from each record's task row (block by block, the rest of
            the record skipped), which costs a pass over the records at scale.

    Returns:
        The board.

    Raises:
        ResultsError: A results file is malformed.
    """
    runs: list[RunEntry] = []
    wanted = [*STAT_COLUMNS, *(EPISODE_COLUMNS if episodes is not None else ())]
    wanted = list(dict.fromkeys(wanted))
    fields = [group_by] if group_by is not None else []
    kept = [*STAT_COLUMNS, *([GROUP_COLUMN] if group_by is not None else [])]
    # Runs are read on a thread a block ahead: reading (file, index, parsing) lets go of the
    # GIL, and overlaps with the statistics and episode files of the block before.
    blocks = _read_ahead(
        _run_blocks(inputs.runs, columns=wanted, validate=validate, task_fields=fields)
    )
    try:
        for source in inputs.runs:
            manifest = source.manifest
            config = comparability(manifest)
            entry = RunEntry(
                manifest=manifest,
                slug=slug(manifest.run_id, manifest.run_id),
                table=pa.table({}),
                stats=summarize_table(results_schema(STAT_COLUMNS).empty_table()),
                comparability=config,
            )
            sink = episodes(entry) if episodes is not None else None
            parts = [_empty_part(group_by)]
            while (table := next(blocks)) is not None:
                if sink is not None:
                    sink.add(table.select(list(EPISODE_COLUMNS)))
                if group_by is not None:
                    table = table.rename_columns(
                        [
                            GROUP_COLUMN if c == task_field_column(group_by) else c
                            for c in table.column_names
                        ]
                    )
                parts.append(table.select(kept))
            if sink is not None:
                sink.close()
            entry.table = pa.concat_tables(parts).combine_chunks()
            entry.stats = summarize_table(
                entry.table.select(list(STAT_COLUMNS)),
                n_planned=manifest.n_planned,
                comparability=config,
            )
            runs.append(entry)
    finally:
        blocks.close()

    models: dict[str, ModelRow] = {}
    columns: dict[str, TasksetColumn] = {}
    for run in runs:
        model = run.manifest.model
        sampling = model.sampling.model_dump(mode="json", exclude={"seed"})
        if run.comparability.format_retries != 1:  # the default stays out of labels
            sampling["format_retries"] = run.comparability.format_retries
        model_key = f"{model.spec}\x00{sorted(sampling.items())}"
        row = models.get(model_key)
        if row is None:
            row = models[model_key] = ModelRow(
                key=model_key, spec=model.spec, sampling=sampling, slug=slug(model.spec, model_key)
            )
        row.runs.append(run)
        run.model = row
        taskset = run.manifest.taskset
        revision = taskset.commit_sha or taskset.fingerprint
        scoring = run.comparability.scoring_fingerprint
        column_key = f"{taskset.name}\x00{revision}\x00{run.manifest.split}\x00{scoring}"
        column = columns.get(column_key)
        if column is None:
            column = columns[column_key] = TasksetColumn(
                key=column_key,
                name=taskset.name,
                revision=revision,
                revision_kind="commit" if taskset.commit_sha else "content",
                split=run.manifest.split,
                slug=slug(f"{taskset.name}-{run.manifest.split}-{revision[:8]}", column_key),
                comparability=run.comparability,
            )
        column.runs.append(run)
        run.column = column
    _label_models(list(models.values()))
    _label_variants(list(columns.values()))

    for column in columns.values():
        by_model: dict[str, list[RunEntry]] = defaultdict(list)
        for run in column.runs:
            assert run.model is not None
            by_model[run.model.key].append(run)
        cells = []
        for model_key, cell_runs in by_model.items():
            if len(cell_runs) == 1:
                stats = cell_runs[0].stats
            else:
                pooled = pa.concat_tables([r.table.select(STAT_COLUMNS) for r in cell_runs])
                stats = summarize_table(pooled, comparability=column.comparability)
            cell = Cell(model=models[model_key], column=column, runs=cell_runs, stats=stats)
            if group_by is not None:
                cell.groups = _groups(cell_runs, column.comparability)
            models[model_key].cells[column.key] = cell
            cells.append(cell)
        column.pairs = _rank(cells)
        column.cells = sorted(cells, key=_cell_order)

    ordered_columns = sorted(
        columns.values(), key=lambda c: (c.name, c.split, c.revision, c.variant, c.key)
    )
    ordered_models = sorted(models.values(), key=lambda m: (-len(m.cells), m.mean_rank, m.label))
    envs = _envs(runs, inputs.reports)
    for column in ordered_columns:
        seen: dict[str, EnvRow] = {}
        for run in column.runs:
            if run.env is not None:
                seen.setdefault(run.env.name, run.env)
        column.envs = sorted(seen.values(), key=lambda e: e.name)
    return Board(
        runs=runs, models=ordered_models, columns=ordered_columns, envs=envs, group_by=group_by
    )


def _run_blocks(
    runs: list[RunInput], *, columns: list[str], validate: bool, task_fields: list[str]
) -> Iterator[pa.Table | None]:
    """Every run's tables (``iter_results_tables``) in turn, each run's followed by None."""
    for source in runs:
        yield from iter_results_tables(
            source.results, columns=columns, validate=validate, task_fields=task_fields
        )
        yield None


_T = TypeVar("_T")


def _read_ahead(items: Iterator[_T], depth: int = 1) -> Generator[_T, None, None]:
    """``items`` as they come, made on a thread at most ``depth`` ahead of the caller.

    An error raised making an item is raised to the caller in its place. Closing the generator
    (or leaving it unfinished) stops the thread and closes ``items`` there.
    """
    queue: Queue[tuple[bool, object]] = Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[bool, object]) -> bool:
        while not stop.is_set():
            try:
                queue.put(entry, timeout=0.05)
                return True
            except Full:
                continue
        return False

    def make() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((True, _END))
        except BaseException as exc:  # handed to the caller, raised there
            put((False, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=make, name="taskhub-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            made, item = queue.get()
            if not made:
                assert isinstance(item, BaseException)
                raise item
            if item is _END:
                return
            yield cast(_T, item)
    finally:
        stop.set()
        thread.join()


#: What ``_read_ahead``'s thread puts after the last item.
_END = object()


def _empty_part(group_by: str | None) -> pa.Table:
    """A run's table before its first block: ``STAT_COLUMNS`` (and the group, if any)."""
    table = results_schema(STAT_COLUMNS).empty_table()
    if group_by is None:
        return table
    return table.append_column(GROUP_COLUMN, pa.array([], pa.string()))


def _groups(runs: list[RunEntry], config: Comparability) -> list[GroupSummary]:
    names = [GROUP_COLUMN, "task_id", "reward", "success"]
    table = pa.concat_tables([r.table.select(names) for r in runs])
    return group_summaries(
        table[GROUP_COLUMN],
        table["task_id"],
        table["reward"],
        table["success"],
        reward_range=config.reward_range,
    )


def _label_models(models: list[ModelRow]) -> None:
    """Label each model by its spec, adding the sampling parameters that tell variants apart."""
    by_spec: dict[str, list[ModelRow]] = defaultdict(list)
    for model in models:
        by_spec[model.spec].append(model)
    for variants in by_spec.values():
        if len(variants) == 1:
            variants[0].label = variants[0].spec
            continue
        differing = sorted(
            {k for m in variants for k, v in m.sampling.items() if v != variants[0].sampling[k]}
        )
        for model in variants:
            extra = ", ".join(f"{k}={model.sampling[k]}" for k in differing)
            model.label = f"{model.spec} ({extra})"


def _label_variants(columns: list[TasksetColumn]) -> None:
    """Name what tells apart columns of one taskset revision and split scored differently."""
    groups: dict[tuple[str, str, str], list[TasksetColumn]] = defaultdict(list)
    for column in columns:
        groups[(column.name, column.revision, column.split)].append(column)
    for variants in groups.values():
        if len(variants) < 2:
            continue
        values: list[dict[str, str]] = []
        for column in variants:
            c = column.comparability
            versions = ", ".join(f"{r.spec} {r.version}" for r in c.rewards if r.version)
            values.append(
                {
                    "rewards": c.reward_label,
                    "versions": versions or "-",
                    "threshold": f"{c.success_threshold:g}" if c.success_threshold else "-",
                    "env": f"{c.env or '-'} {c.env_version or ''}".strip(),
                    "max_steps": str(c.max_steps or "-"),
                }
            )
        differing = [key for key in values[0] if len({v[key] for v in values}) > 1]
        if "rewards" in differing:  # other rewards have other versions: say it once
            differing = [key for key in differing if key != "versions"]
        for column, value in zip(variants, values, strict=True):
            parts = [f"{key} {value[key]}" for key in differing]
            column.variant = "; ".join(parts) or f"config {column.fingerprint[:8]}"


def _rank(cells: list[Cell]) -> list[tuple[Cell, Cell, Pair]]:
    intervals = []
    for cell in cells:
        s = cell.stats.summary
        low, high = s.ci95 if s.ci95 else (None, None)
        intervals.append((s.mean_reward, low, high))
    ranks, tied, pairs = rank_paired([task_means(c.stats.per_task) for c in cells], intervals)
    for cell, rank, others in zip(cells, ranks, tied, strict=True):
        cell.rank = rank
        cell.tied_with = sorted((cells[j].model for j in others), key=lambda m: m.label)
    return [(cells[p.first], cells[p.second], p) for p in pairs]


def _cell_order(cell: Cell) -> tuple[object, ...]:
    mean = cell.stats.summary.mean_reward
    return (mean is None, -(mean or 0.0), cell.model.label)


def _env_name(manifest: RunManifest) -> str:
    env = manifest.env
    if env is None:
        return UNKNOWN_ENV
    name = env.metadata.get("name") if env.metadata else None
    return name if isinstance(name, str) and name else env.spec


def _envs(runs: list[RunEntry], reports: list[ValidationReport]) -> list[EnvRow]:
    rows: dict[str, EnvRow] = {}
    aliases: dict[str, str] = {}
    for report in sorted(reports, key=lambda r: (r.name, r.started_at)):
        row = rows.setdefault(
            report.name, EnvRow(name=report.name, slug=slug(report.name, report.name))
        )
        row.reports.append(report)
        aliases.setdefault(report.target, report.name)
        meta_name = (report.env_metadata or {}).get("name")
        if isinstance(meta_name, str):
            aliases.setdefault(meta_name, report.name)
    for run in runs:
        name = _env_name(run.manifest)
        spec = run.manifest.env.spec if run.manifest.env else name
        name = name if name in rows else aliases.get(name, aliases.get(spec, name))
        row = rows.setdefault(name, EnvRow(name=name, slug=slug(name, name)))
        row.runs.append(run)
        run.env = row
    ranked = sorted(rows.values(), key=EnvRow.sort_key)
    for rank, row in enumerate(ranked, start=1):
        row.rank = rank
    return ranked
