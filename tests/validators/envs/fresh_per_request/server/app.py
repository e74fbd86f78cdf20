"""Defect: HTTP /reset, /step and /state serve a fresh env per request; only /ws has episodes.

Seen in practice on create_app servers: an HTTP client's step acts on a blank env, so an
episode played over HTTP never advances.
"""

from __future__ import annotations

from server.quiz_environment import QuizEnv, create_app

app = create_app(QuizEnv, name="fresh_per_request", http_fresh=True)
