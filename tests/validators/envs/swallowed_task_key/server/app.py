"""Serve the swallowed_task_key env: ``python -m uvicorn server.app:app`` from the env folder."""

from __future__ import annotations

from server.quiz_environment import QuizEnv, create_app

app = create_app(QuizEnv, name="swallowed_task_key")
