"""Serve the every_option_wins env: ``python -m uvicorn server.app:app`` from the env folder."""

from __future__ import annotations

from server.quiz_environment import QuizEnv, create_app

app = create_app(QuizEnv, name="every_option_wins")
