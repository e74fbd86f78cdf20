"""The README's Ray commands work as written: on a laptop (``--ray local``) and on a cluster."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from taskhub import read_manifest, read_results
from tests.test_readme import COMMANDS


def test_readme_ray_commands(ray_cluster: Any, tmp_path: Path) -> None:
    commands = [c for c in COMMANDS if "--ray" in c]
    assert [c.split("--ray ")[1] for c in commands] == ["local", '"$RAY_ADDRESS"']
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address}
    for command, address in zip(commands, ["local", ray_cluster.address], strict=True):
        argv = shlex.split(command.replace('"$RAY_ADDRESS"', env["RAY_ADDRESS"]))
        argv[0] = str(Path(sys.executable).parent / "taskhub")
        out = tmp_path / address.replace(":", "-")
        result = subprocess.run(
            [*argv, "-o", str(out), "--json"],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert result.returncode == 0, (command, result.stderr[-3000:])
        run_dir = Path(json.loads(result.stdout)["run_dir"])
        manifest = read_manifest(run_dir)
        assert manifest.executor is not None and manifest.executor.kind == "ray"
        assert manifest.executor.address == (None if address == "local" else address)
        # on the 2-node cluster, a worker up after the 20 episodes were played plays none
        assert manifest.executor.nodes in ({1} if address == "local" else {1, 2})
        assert len(read_results(run_dir)) == 20
