"""A reward worker process: ``main(conn, parent_pid, preload)``, run by the pool's bootstrap.

The pool starts ``python -P -c BOOTSTRAP FD PARENT_PID [MODULE...]``; the bootstrap imports this
module (or reports why it cannot) and calls ``main``.

It reads batches of pickled ``(fn, args)`` jobs from the socket ``FD`` and answers each job as
soon as it is done with ``(job_id, ok, result or "TypeName: message")``. See ``_pool``.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

#: The job id of the message a worker sends once it is ready for jobs.
READY = -1


def _watch_parent(parent_pid: int) -> None:
    """Exit the worker when the process that owns it is gone (even mid-computation)."""
    while True:
        time.sleep(0.5)
        # the owner is our parent: once it exits we are reparented (a pid probe would still
        # see it while it is an unreaped zombie)
        if os.getppid() != parent_pid:
            os._exit(0)


def main(conn: Connection, parent_pid: int, preload: Sequence[str]) -> None:
    """Run jobs from ``conn`` one at a time, answering each as soon as it is done."""
    # Ctrl-C in a terminal reaches the whole process group; the owner decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    for module in preload:
        try:
            __import__(module)
        except Exception:  # a job that needs the module reports the error
            pass
    # imports done: from now on a job's deadline measures the job
    conn.send((READY, True, None))
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return
        if batch is None:
            return
        for job_id, payload in batch:
            try:
                fn, args = pickle.loads(payload)
                reply: tuple[int, bool, Any] = (job_id, True, fn(*args))
            except Exception as exc:
                reply = (job_id, False, f"{type(exc).__name__}: {exc}")
            try:
                conn.send(reply)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                conn.send((job_id, False, f"the result could not be sent back: {exc}"))


if __name__ == "__main__":
    main(Connection(int(sys.argv[1])), int(sys.argv[2]), sys.argv[3:])
