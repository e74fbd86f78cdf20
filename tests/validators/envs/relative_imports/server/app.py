"""Serve the relative_imports env as a package: ``relative_imports.server.app:app``."""

from __future__ import annotations

from .quiz_environment import QuizEnv, create_app

app = create_app(QuizEnv, name="relative_imports")
