"""Render the board as a static site: HTML pages, assets, episode files, downloads.

Layout of a site::

    index.html              models x tasksets
    envs.html               environment board;  envs/<env>.html  report cards
    tasksets/<taskset>.html ranking, reward distributions, task difficulty
    models/<model>.html     tasksets and runs with provenance
    runs/<run>.html         summary, provenance, episode browser;  runs/<run>/*.js  its episodes
    downloads.html          data/**.csv|json (every table), model-index/<model>/<taskset>.yaml
    assets/                 style.css, table.js, episodes.js

Every link is relative, so the folder works from ``file://`` and from any static host. The same
inputs give the same bytes: everything is sorted and nothing depends on the clock unless a
timestamp is given.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from taskhub import OUTCOMES, ConfigError, __version__, redact_url

from ._board import (
    VERDICT_ORDER,
    Board,
    Cell,
    EnvRow,
    ModelRow,
    RunEntry,
    TasksetColumn,
    assemble,
)
from ._episodes import CHUNK_SIZE, EpisodeFiles, EpisodeWriter
from ._exports import PART_BYTES, TableFiles, model_index, write_table
from ._inputs import Inputs, Resolver, resolve_inputs
from ._plots import Distribution, distribution_plot, histogram_plot

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
#: A file that marks a folder as a site this module built (and may therefore replace).
MARKER = ".taskhub-leaderboard"
#: Nothing may be loaded but the site's own scripts and styles: no network, no inline script.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)
#: Rows of a table written into a page; the downloads hold every row.
MAX_TABLE_ROWS = 1000
#: Per-model columns in a taskset's task table (the download has one per model).
MAX_MODEL_COLUMNS = 8


@dataclass(frozen=True)
class SiteInfo:
    """What ``build_site`` wrote."""

    path: Path
    """The site folder."""
    pages: int
    """HTML pages."""
    runs: int
    """Runs shown."""
    episodes: int
    """Episodes shown."""
    reports: int
    """Validation reports shown."""


def build_site(
    sources: Iterable[str | Path] | Inputs,
    out: Path,
    *,
    title: str = "taskhub leaderboard",
    timestamp: str | None = None,
    validate: bool = False,
    resolvers: Sequence[Resolver] = (),
    page_size: int | None = None,
    chunk_size: int = CHUNK_SIZE,
    part_bytes: int = PART_BYTES,
    group_by: str | None = None,
) -> SiteInfo:
    """Build the static leaderboard site of ``sources`` into ``out``.

    Args:
        sources: Run directories, results files, validation reports or folders holding them
            (see ``resolve_inputs``), or inputs already resolved.
        out: The site folder. An existing one is replaced only if it is a site built here.
        title: Site title.
        timestamp: Text shown as the build time (none by default: the same inputs give the
            same bytes).
        validate: Validate every episode record in full (slow for large runs).
        resolvers: Extra input kinds (see ``resolve_inputs``).
        page_size: Episodes per trajectory file of the episode browser (by default, as many
            as make about half a megabyte).
        chunk_size: Episodes per index file of the episode browser.
        part_bytes: Bytes of JSON a data table's file holds at most (larger tables are
            written in parts).
        group_by: A task field (``metadata.family``, ``difficulty``...) to break every
            (model, taskset) cell down by, with per-group intervals.

    Returns:
        What was written.

    Raises:
        ConfigError: ``out`` holds something else, or an input cannot be read.
        ResultsError: A run or report is malformed.
    """
    if (page_size is not None and page_size < 1) or chunk_size < 1 or part_bytes < 1:
        raise ValueError("page_size, chunk_size and part_bytes must be positive")
    inputs = (
        sources if isinstance(sources, Inputs) else resolve_inputs(sources, resolvers=resolvers)
    )
    out = Path(out)
    _prepare(out)
    writers: dict[str, EpisodeWriter] = {}
    # Pages are compressed on two threads while the next records are read.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="taskhub-pages") as executor:

        def run_episodes(run: RunEntry) -> EpisodeWriter:
            writer = EpisodeWriter(
                out / "runs" / run.slug,
                page_size=page_size,
                chunk_size=chunk_size,
                executor=executor,
            )
            writers[run.slug] = writer
            return writer

        board = assemble(inputs, validate=validate, episodes=run_episodes, group_by=group_by)
        files = {slug: writer.close() for slug, writer in writers.items()}
    assets = out / "assets"
    assets.mkdir()
    for name in ("style.css", "table.js", "episodes.js"):
        shutil.copyfile(HERE / "static" / name, assets / name)
    renderer = _Renderer(
        out, board, title=title, timestamp=timestamp, files=files, part_bytes=part_bytes
    )
    pages = renderer.render()
    (out / MARKER).write_text("A static site built by taskhub leaderboard build.\n")
    return SiteInfo(
        path=out,
        pages=pages,
        runs=len(board.runs),
        episodes=sum(r.stats.summary.n_episodes for r in board.runs),
        reports=len(inputs.reports),
    )


def _prepare(out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise ConfigError(f"{out} exists and is not a folder")
        if any(out.iterdir()):
            if not (out / MARKER).is_file():
                raise ConfigError(
                    f"{out} is not empty and is not a site built by taskhub: not replacing it"
                )
            shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


# --- formatting, as template filters ---


def _num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _dv(value: float | None) -> str:
    """A sort key for a ``data-v`` attribute ('' sorts last)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return repr(float(value))


def _date(value: datetime | None) -> str:
    return "–" if value is None else value.strftime("%Y-%m-%d %H:%M UTC")


def _json_text(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=False)


def _selection(run: RunEntry) -> str:
    config = run.manifest.config
    parts = []
    if config.limit:
        parts.append(f"first {config.limit} tasks")
    if config.shard:
        parts.append(f"shard {config.shard[0]}/{config.shard[1]}")
    parts.append(f"{config.samples} sample{'s' if config.samples != 1 else ''} per task")
    parts.append(f"seed {config.seed}")
    if config.max_steps:
        parts.append(f"max {config.max_steps} steps")
    return ", ".join(parts)


def _verdict_order(verdict: str | None) -> int:
    return VERDICT_ORDER.index(verdict) if verdict else len(VERDICT_ORDER)


class _Renderer:
    """Writes every page and download of one board."""

    def __init__(
        self,
        out: Path,
        board: Board,
        *,
        title: str,
        timestamp: str | None,
        files: dict[str, EpisodeFiles],
        part_bytes: int = PART_BYTES,
    ) -> None:
        self.out = out
        self.part_bytes = part_bytes
        self.board = board
        self.files = files
        self.tables: list[tuple[str, TableFiles]] = []
        self.model_cards: list[tuple[ModelRow, TasksetColumn, str]] = []
        self.pages = 0
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        self.env.filters.update(
            num=_num, pct=_pct, dv=_dv, date=_date, tojson_text=_json_text, selection=_selection
        )
        self.env.globals.update(
            site_title=title,
            timestamp=timestamp,
            version=__version__,
            csp=CSP,
            verdict_order=_verdict_order,
        )

    def render(self) -> int:
        board = self.board
        self._model_cards()
        matrix = self._table(
            "Models × tasksets (one row per cell)",
            "leaderboard",
            [_cell_row(c) for col in board.columns for c in col.cells],
        )
        n_episodes = sum(r.stats.summary.n_episodes for r in board.runs)
        for column in board.columns:
            self._taskset(column)
        for model in board.models:
            self._model(model)
        for run in board.runs:
            self._run(run)
        envs_path = self._table("Environment board", "envs", [_env_row(e) for e in board.envs])
        for env in board.envs:
            self._env(env)
        self._page(
            "index.html",
            "home.html",
            section="home",
            page_title="Models × tasksets",
            board=board,
            matrix_path=matrix,
            n_episodes=n_episodes,
        )
        self._page(
            "envs.html",
            "envs.html",
            section="envs",
            page_title="Environments",
            board=board,
            envs_path=envs_path,
        )
        self._page(
            "downloads.html",
            "downloads.html",
            section="downloads",
            page_title="Downloads",
            tables=self.tables,
            model_cards=self.model_cards,
        )
        return self.pages

    def _page(self, name: str, template: str, **context: Any) -> None:
        depth = name.count("/")
        html = self.env.get_template(template).render(root="../" * depth, **context)
        path = self.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
        self.pages += 1

    def _table(
        self,
        title: str,
        name: str,
        rows: list[dict[str, Any]] | pd.DataFrame,
        columns: list[str] | None = None,
    ) -> TableFiles:
        if columns is None:
            columns = list(rows.columns) if isinstance(rows, pd.DataFrame) else _columns(rows)
        path = write_table(self.out, name, rows, columns, part_bytes=self.part_bytes)
        self.tables.append((title, path))
        return path

    def _model_cards(self) -> None:
        for model in self.board.models:
            for column in self.board.columns:
                cell = model.cells.get(column.key)
                if cell is None:
                    continue
                path = f"model-index/{model.slug}/{column.slug}.yaml"
                target = self.out / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(model_index(cell), encoding="utf-8")
                self.model_cards.append((model, column, path))

    def _taskset(self, column: TasksetColumn) -> None:
        ranking = self._table(
            f"Ranking: {column.label}",
            f"tasksets/{column.slug}.ranking",
            [_cell_row(c) for c in column.cells],
        )
        passk_names = sorted(
            {k for c in column.cells for k in c.stats.summary.pass_at_k},
            key=lambda k: int(k.split("@")[1]),
        )
        distribution = distribution_plot(
            [
                Distribution(
                    label=cell.model.label,
                    rewards=_rewards(cell),
                    mean=cell.stats.summary.mean_reward,
                    low=cell.stats.summary.ci95[0] if cell.stats.summary.ci95 else None,
                    high=cell.stats.summary.ci95[1] if cell.stats.summary.ci95 else None,
                )
                for cell in column.cells
            ]
        )
        pairs_path = self._table(
            f"Paired comparisons: {column.label}",
            f"tasksets/{column.slug}.pairs",
            [
                {
                    "first": first.model.label,
                    "second": second.model.label,
                    "difference": pair.difference,
                    "ci95_low": pair.ci95[0] if pair.ci95 else None,
                    "ci95_high": pair.ci95[1] if pair.ci95 else None,
                    "shared_tasks": pair.tasks,
                    "method": "paired" if pair.paired else "intervals",
                }
                for first, second, pair in column.pairs
            ],
            ["first", "second", "difference", "ci95_low", "ci95_high", "shared_tasks", "method"],
        )
        component_columns = [
            "model", "component", "weight", "gate", "range", "n", "errors", "mean", "stderr",
            "ci95_low", "ci95_high",
        ]  # fmt: skip
        components_path = self._table(
            f"Reward components: {column.label}",
            f"tasksets/{column.slug}.components",
            [
                {
                    "model": cell.model.label,
                    "component": c["name"],
                    **{k: c[k] for k in ("weight", "gate", "range", "n", "errors", "mean")},
                    "stderr": c["stderr"],
                    "ci95_low": c["ci95"][0] if c["ci95"] else None,
                    "ci95_high": c["ci95"][1] if c["ci95"] else None,
                }
                for cell in column.cells
                for c in cell.stats.components
            ],
            component_columns,
        )
        groups = [
            {
                "model": cell.model.label,
                "group": g.value,
                "n_tasks": g.n_tasks,
                "n_episodes": g.n_episodes,
                "mean_reward": g.mean_reward,
                "ci95_low": g.ci95[0] if g.ci95 else None,
                "ci95_high": g.ci95[1] if g.ci95 else None,
                "success_rate": g.success_rate,
                "success_ci95_low": g.success_ci95[0] if g.success_ci95 else None,
                "success_ci95_high": g.success_ci95[1] if g.success_ci95 else None,
            }
            for cell in column.cells
            for g in cell.groups
        ]
        groups_path = (
            self._table(
                f"By {self.board.group_by}: {column.label}",
                f"tasksets/{column.slug}.groups",
                groups,
            )
            if self.board.group_by is not None
            else ""
        )
        tasks, rates = _task_difficulty(column)
        wide = tasks.copy()
        for cell in column.cells:
            wide[f"pass_rate[{cell.model.label}]"] = rates[cell.model.key].to_numpy()
        tasks_path = self._table(
            f"Task difficulty: {column.label}", f"tasksets/{column.slug}.tasks", wide
        )
        shown = tasks.head(MAX_TABLE_ROWS)
        task_models = [c.model for c in column.cells][:MAX_MODEL_COLUMNS]
        self._page(
            f"tasksets/{column.slug}.html",
            "taskset.html",
            section="tasksets",
            page_title=column.label,
            column=column,
            passk_names=passk_names,
            ranking_path=ranking,
            distribution=distribution,
            difficulty=histogram_plot(
                [v for v in tasks["pass_rate"].tolist() if v is not None and not math.isnan(v)],
                label="Distribution of task pass rates",
            ),
            tasks_path=tasks_path,
            task_rows=[
                {**row, "per_model": per_model}
                for row, per_model in zip(
                    shown.to_dict("records"), _rates_by_model(rates.head(len(shown))), strict=True
                )
            ],
            tasks_shown=len(shown),
            tasks_total=len(tasks),
            task_models=task_models,
            pairs_path=pairs_path,
            components_path=components_path,
            component_cells=[c for c in column.cells if len(c.stats.components) > 1],
            groups=groups,
            groups_path=groups_path,
            group_field=self.board.group_by,
        )

    def _model(self, model: ModelRow) -> None:
        columns = [c for c in self.board.columns if c.key in model.cells]
        tasksets = self._table(
            f"Tasksets of {model.label}",
            f"models/{model.slug}.tasksets",
            [_cell_row(model.cells[c.key]) for c in columns],
        )
        runs = self._table(
            f"Runs of {model.label}", f"models/{model.slug}.runs", [_run_row(r) for r in model.runs]
        )
        cards = {column.key: path for m, column, path in self.model_cards if m is model}
        self._page(
            f"models/{model.slug}.html",
            "model.html",
            section="models",
            page_title=model.label,
            model=model,
            columns=columns,
            tasksets_path=tasksets,
            runs_path=runs,
            model_cards=cards,
        )

    def _run(self, run: RunEntry) -> None:
        per_task = run.stats.per_task
        tasks_path = self._table(
            f"Per task: run {run.manifest.run_id}", f"runs/{run.slug}.tasks", per_task
        )
        summary_path = f"data/runs/{run.slug}.summary.json"
        (self.out / summary_path).write_text(
            run.stats.summary.model_dump_json(indent=2) + "\n", encoding="utf-8"
        )
        shown = per_task.head(MAX_TABLE_ROWS)
        self._page(
            f"runs/{run.slug}.html",
            "run.html",
            section="runs",
            page_title=f"Run {run.manifest.run_id}",
            run=run,
            files=self.files[run.slug],
            outcomes=OUTCOMES,
            tasks_path=tasks_path,
            summary_path=summary_path,
            task_rows=shown.to_dict("records"),
            tasks_shown=len(shown),
            tasks_total=len(per_task),
        )

    def _env(self, env: EnvRow) -> None:
        checks = self._table(
            f"Checks of {env.name}",
            f"envs/{env.slug}.checks",
            [
                {
                    "id": c.id,
                    "level": c.level,
                    "status": c.status,
                    "severity": c.severity,
                    "summary": c.summary,
                    "measured": c.measured,
                    "remediation": c.remediation,
                    "duration_s": c.duration_s,
                }
                for c in (env.report.checks if env.report else [])
            ],
            [
                "id",
                "level",
                "status",
                "severity",
                "summary",
                "measured",
                "remediation",
                "duration_s",
            ],
        )
        self._page(
            f"envs/{env.slug}.html",
            "env.html",
            section="envs",
            page_title=env.name,
            env=env,
            checks_path=checks,
        )


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def _rewards(cell: Cell) -> Any:
    import numpy as np
    import pyarrow.compute as pc

    parts = [pc.drop_null(r.table["reward"]).to_numpy() for r in cell.runs]
    return np.concatenate(parts) if parts else np.array([])


def _task_difficulty(column: TasksetColumn) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per task: pass rate averaged over models, models that ran it, models that solved it.

    Returns:
        The tasks (``task_id``, ``pass_rate``, ``models``, ``solved_by``, ``mean_reward``),
        hardest first, and beside them (same rows) each model's pass rate, one column per
        model key (NaN where the model did not run the task or judged none of its episodes).
    """
    frames = []
    for cell in column.cells:
        part = cell.stats.per_task[["task_id", "pass_rate", "mean_reward", "successes"]].copy()
        part["model"] = cell.model.key
        frames.append(part)
    if not frames:
        empty = pd.DataFrame(columns=["task_id", "pass_rate", "models", "solved_by", "mean_reward"])
        return empty, pd.DataFrame(index=empty.index)
    both = pd.concat(frames, ignore_index=True)
    both["solved"] = both["successes"] > 0
    grouped = both.groupby("task_id", sort=True)
    table = grouped.agg(
        pass_rate=("pass_rate", "mean"),
        models=("model", "size"),
        solved_by=("solved", "sum"),
        mean_reward=("mean_reward", "mean"),
    ).reset_index()
    # a model's tasks are unique (per_task is grouped by task): one rate per (task, model)
    rates = both.pivot(index="task_id", columns="model", values="pass_rate")
    rates = rates.reindex(index=table["task_id"], columns=[c.model.key for c in column.cells])
    order = table["pass_rate"].fillna(math.inf)
    table["pass_rate"] = table["pass_rate"].astype(object).where(table["pass_rate"].notna(), None)
    table["mean_reward"] = (
        table["mean_reward"].astype(object).where(table["mean_reward"].notna(), None)
    )
    ranked = table.assign(_order=order).sort_values(["_order", "task_id"], kind="stable").index
    return (
        table.loc[ranked].reset_index(drop=True),
        rates.iloc[ranked.to_numpy()].reset_index(drop=True),
    )


def _rates_by_model(rates: pd.DataFrame) -> list[dict[str, float | None]]:
    """Each row of ``_task_difficulty``'s rates as model key -> pass rate (None: none)."""
    keys = list(rates.columns)
    return [
        {k: None if math.isnan(v) else v for k, v in zip(keys, values, strict=True)}
        for values in rates.itertuples(index=False, name=None)
    ]


def _cell_row(cell: Cell) -> dict[str, Any]:
    s = cell.stats.summary
    row: dict[str, Any] = {
        "model": cell.model.label,
        "model_spec": cell.model.spec,
        "sampling": cell.model.sampling,
        "taskset": cell.column.name,
        "split": cell.column.split,
        "revision_kind": cell.column.revision_kind,
        "revision": cell.column.revision,
        "variant": cell.column.variant or None,
        "rewards": [r.spec for r in cell.column.comparability.rewards],
        "reward_range": list(s.reward_range) if s.reward_range else None,
        "fingerprint": cell.fingerprint,
        "rank": cell.rank or None,
        "tied_with": [m.label for m in cell.tied_with],
        "n_episodes": s.n_episodes,
        "n_tasks": s.n_tasks,
        "n_rewarded": s.n_rewarded,
        "mean_reward": s.mean_reward,
        "stderr": s.stderr,
        "ci95_low": s.ci95[0] if s.ci95 else None,
        "ci95_high": s.ci95[1] if s.ci95 else None,
        "success_rate": s.success_rate,
        "success_ci95_low": s.success_ci95[0] if s.success_ci95 else None,
        "success_ci95_high": s.success_ci95[1] if s.success_ci95 else None,
        "interval": s.interval,
        "components": [
            {
                "name": c.name,
                "mean": c.mean,
                "ci95_low": c.ci95[0] if c.ci95 else None,
                "ci95_high": c.ci95[1] if c.ci95 else None,
            }
            for c in s.components
        ],
    }
    for name in ("pass@1", "pass@2", "pass@4", "pass@8", "pass@16", "pass@32"):
        row[name] = s.pass_at_k.get(name)
    for outcome in OUTCOMES[1:]:
        row[f"{outcome}_rate"] = s.error_rates.get(outcome)
    row["runs"] = [r.manifest.run_id for r in cell.runs]
    return row


def _run_row(run: RunEntry) -> dict[str, Any]:
    m = run.manifest
    s = run.stats.summary
    assert run.column is not None
    return {
        "run_id": m.run_id,
        "created_at": m.created_at.isoformat(),
        "status": m.status,
        "model": m.model.spec,
        "provider": m.model.provider,
        "base_url": redact_url(m.model.base_url) if m.model.base_url else None,
        "sampling": m.model.sampling.model_dump(mode="json"),
        "taskset": m.taskset.name,
        "split": m.split,
        "revision_kind": run.column.revision_kind,
        "revision": run.column.revision,
        "fingerprint": run.comparability.fingerprint,
        "env": run.env.name if run.env else None,
        "n_planned": m.n_planned,
        "n_episodes": s.n_episodes,
        "mean_reward": s.mean_reward,
        "ci95_low": s.ci95[0] if s.ci95 else None,
        "ci95_high": s.ci95[1] if s.ci95 else None,
        "taskhub_version": m.taskhub_version,
    }


def _env_row(env: EnvRow) -> dict[str, Any]:
    low, high = env.infra_ci95
    step_p50, step_p99 = env.step_latency_ms
    return {
        "rank": env.rank,
        "env": env.name,
        "verdict": env.verdict,
        "failed": env.failed("fail"),
        "warnings": env.failed("warn"),
        "errored": env.errored,
        "determinism": env.determinism,
        "step_p50_ms": step_p50,
        "step_p99_ms": step_p99,
        "latency_ms": env.latency_ms,
        "infra_error_rate": env.infra_rate,
        "infra_ci95_low": low,
        "infra_ci95_high": high,
        "episodes": env.episodes,
        "runs": len(env.runs),
        "validated_at": env.report.started_at.isoformat() if env.report else None,
    }
