"""The gridworld reference env in-process: generation, moves, episode lifecycle, state."""

from __future__ import annotations

import random
import re

import pytest

from taskhub._envs.gridworld import GridAction, GridObservation
from taskhub._envs.gridworld.server.gridworld_environment import (
    MAX_SIZE,
    MIN_SIZE,
    MOVES,
    GridworldEnvironment,
    generate_maze,
    shortest_path,
)

STATE_KEYS = {"episode_id", "step_count", "position", "size", "difficulty", "seed", "max_steps"}


def move(env: GridworldEnvironment, direction: str) -> GridObservation:
    return env.step(GridAction(move=direction))


@pytest.mark.parametrize("size", range(MIN_SIZE, MAX_SIZE + 1))
def test_every_maze_is_solvable_within_the_default_budget(size: int) -> None:
    for difficulty in range(1, 6):
        for seed in range(12):
            maze = generate_maze(size, difficulty, seed)
            assert maze.start != maze.goal
            assert maze.start not in maze.walls and maze.goal not in maze.walls
            assert len(maze.solution) <= 4 * size
            assert list(maze.solution) == shortest_path(size, maze.walls, maze.start, maze.goal)
            env = GridworldEnvironment()
            obs = env.reset(size=size, difficulty=difficulty, seed=seed)
            for step in maze.solution:
                assert not obs.done
                obs = move(env, step)
            assert (obs.reward, obs.done, obs.position) == (1.0, True, maze.goal)


def test_grid_text_matches_the_fields() -> None:
    env = GridworldEnvironment()
    obs = env.reset(size=7, difficulty=4, seed=3)
    rows = obs.grid.split("\n")
    assert len(rows) == 7 and all(len(row) == 7 for row in rows)
    assert set(obs.grid) <= set("#.AG\n")
    assert obs.grid.count("A") == 1 and obs.grid.count("G") == 1
    assert rows[obs.position[0]][obs.position[1]] == "A"
    assert rows[obs.goal[0]][obs.goal[1]] == "G"
    assert (obs.size, obs.steps_taken, obs.max_steps, obs.reward, obs.done) == (
        7,
        0,
        28,
        None,
        False,
    )
    for direction, (dr, dc) in MOVES.items():
        r, c = obs.position[0] + dr, obs.position[1] + dc
        free = 0 <= r < 7 and 0 <= c < 7 and rows[r][c] != "#"
        assert (direction in obs.legal_moves) == free


def test_same_seed_same_maze_different_seeds_differ() -> None:
    a = GridworldEnvironment().reset(size=6, difficulty=3, seed=5)
    b = GridworldEnvironment().reset(size=6, difficulty=3, seed=5, episode_id="x")
    assert a == b
    grids = {GridworldEnvironment().reset(size=6, difficulty=3, seed=s).grid for s in range(20)}
    assert len(grids) == 20


def test_episode_is_deterministic_given_seed_and_actions() -> None:
    moves = random.Random(0).choices(list(MOVES), k=40)
    runs = []
    for _ in range(2):
        env = GridworldEnvironment()
        trace = [env.reset(size=8, difficulty=5, seed=11, max_steps=40).model_dump()]
        for direction in moves:
            obs = move(env, direction)
            trace.append(obs.model_dump())
            if obs.done:
                break
        runs.append(trace)
    assert runs[0] == runs[1]


def test_bumping_a_wall_or_the_edge_keeps_the_position_and_uses_a_move() -> None:
    env = GridworldEnvironment()
    for seed in range(50):
        obs = env.reset(size=5, difficulty=5, seed=seed)
        blocked = [m for m in MOVES if m not in obs.legal_moves]
        if blocked:
            break
    start = obs.position
    after = move(env, blocked[0])
    assert after.position == start and after.steps_taken == 1 and after.reward == 0.0
    assert after.message.startswith(f"Blocked: {blocked[0]} runs into")
    assert env.state.step_count == 1 and env.state.position == start


def test_running_out_of_moves_ends_with_zero_and_then_step_raises() -> None:
    env = GridworldEnvironment()
    obs = env.reset(size=6, difficulty=1, seed=2, max_steps=3)
    while not obs.done:
        # The goal is at least size - 1 = 5 moves away: 3 moves cannot reach it.
        obs = move(env, obs.legal_moves[0])
    assert (obs.reward, obs.done, obs.steps_taken, obs.legal_moves) == (0.0, True, 3, [])
    assert "Out of moves (3)" in obs.message
    with pytest.raises(RuntimeError, match=re.escape("episode is over; call reset()")):
        move(env, "up")


def test_step_after_reaching_the_goal_raises() -> None:
    env = GridworldEnvironment()
    env.reset(size=4, difficulty=2, seed=1)
    for step in generate_maze(4, 2, 1).solution:
        obs = move(env, step)
    assert obs.done and obs.reward == 1.0
    with pytest.raises(RuntimeError, match=re.escape("episode is over; call reset()")):
        move(env, "down")


def test_step_before_reset_raises() -> None:
    with pytest.raises(RuntimeError, match=re.escape("call reset() first")):
        move(GridworldEnvironment(), "up")


def test_state_holds_no_solution() -> None:
    env = GridworldEnvironment()
    assert set(env.state.model_dump()) == STATE_KEYS
    env.reset(size=5, difficulty=3, seed=4, episode_id="ep-1")
    move(env, "left")
    state = env.state.model_dump()
    assert set(state) == STATE_KEYS
    assert state["episode_id"] == "ep-1" and state["step_count"] == 1
    assert (state["size"], state["difficulty"], state["seed"], state["max_steps"]) == (5, 3, 4, 20)


def test_defaults_seed_none_and_task_spec() -> None:
    env = GridworldEnvironment()
    obs = env.reset()
    assert (obs.size, obs.max_steps, env.state.difficulty) == (5, 20, 1)
    assert isinstance(env.state.seed, int)
    assert env.reset(seed=env.state.seed).grid == obs.grid
    env.reset(task_spec={"size": 9, "difficulty": 2, "seed": 3, "max_steps": 7}, size=4)
    assert (env.state.size, env.state.difficulty, env.state.seed, env.state.max_steps) == (
        4,
        2,
        3,
        7,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": 2}, "size must be an integer from 3 to 16, got 2"),
        ({"size": 17}, "got 17"),
        ({"size": 5.0}, "got 5.0"),
        ({"difficulty": 9}, "difficulty must be an integer from 1 to 5, got 9"),
        ({"max_steps": 0}, "max_steps must be an integer of at least 1, got 0"),
        ({"seed": 1.5}, "seed must be an integer, got 1.5"),
        ({"task_spec": {"solution": []}}, "task_spec has unknown keys ['solution']"),
    ],
)
def test_invalid_reset_arguments_are_explained(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        GridworldEnvironment().reset(**kwargs)  # type: ignore[arg-type]


def test_metadata_names_the_env() -> None:
    metadata = GridworldEnvironment().get_metadata()
    assert metadata.name == "gridworld"
    assert metadata.readme_content and "# Gridworld environment" in metadata.readme_content
