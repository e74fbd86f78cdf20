"""Serve the hangs env: ``python -m uvicorn server.app:app`` from the env folder."""

from __future__ import annotations

import time

from server.quiz_environment import QuizEnv, create_app

time.sleep(3600)  # the import never finishes: uvicorn never binds its port
app = create_app(QuizEnv, name="hangs")
