"""Finding the app an env folder serves, and reading Dockerfiles, from real files on disk."""

from __future__ import annotations

import textwrap
from pathlib import Path

import httpx
import pytest

from taskhub import EnvLaunchError
from taskhub.env import ServedApp, find_app, launch_server, read_dockerfiles, wait_healthy

#: A module that would end any process importing it: finding its app must only parse it.
EXPLODES = "raise SystemExit('imported')\n"


def served(folder: Path) -> tuple[str, str]:
    """The app found for ``folder`` and how it was found."""
    found = find_app(folder)
    return found.app, found.how


def make(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text))
    return root


def test_the_app_is_found_where_manifests_name_it(tmp_path: Path) -> None:
    def folder(name: str, manifest: str, files: dict[str, str]) -> Path:
        return make(tmp_path / name, {"openenv.yaml": manifest, **files})

    app = {"server/app.py": "app = None\n"}
    assert served(folder("plain", "app: server.app:app\n", app)) == ("server.app:app", "")
    found, how = served(folder("path", "app: server/app.py\n", app))
    assert found == "server.app:app" and "is a path" in how
    nested = folder("nested", "server:\n  entry_point: pkg.api:app\n", {"pkg/api.py": "app = 1\n"})
    assert find_app(nested).app == "pkg.api:app"
    docker = folder(
        "docker",
        "name: x\n",
        {
            "Dockerfile": 'CMD ["sh", "-c", "uvicorn soc.server:app --port 1"]\n',
            "soc/server.py": "",
        },
    )
    assert served(docker) == ("soc.server:app", "the app the Dockerfile's uvicorn command serves")
    broken, how = served(folder("broken", "tasks:\n  - a\n b: [\n", app))
    assert broken == "server.app:app" and "not valid YAML" in how
    with pytest.raises(EnvLaunchError, match="not valid YAML"):
        find_app(folder("broken-bare", "a: [\n", {}))
    with pytest.raises(EnvLaunchError, match="names no app"):
        served(folder("none", "name: x\n", {}))


def test_without_a_manifest_the_dockerfile_command_names_the_app(tmp_path: Path) -> None:
    # python -m MODULE, where the module runs uvicorn on its own app (and would exit on import)
    module = make(
        tmp_path / "module",
        {
            "Dockerfile": """\
                FROM python:3.11-slim
                WORKDIR /app
                COPY src/ ./src/
                CMD ["python", "-u", "-m", "src.api.main"]
            """,
            "src/__init__.py": "",
            "src/api/__init__.py": "",
            "src/api/main.py": EXPLODES
            + "from fastapi import FastAPI\napp = FastAPI()\n"
            + "if __name__ == '__main__':\n    import uvicorn\n"
            + "    uvicorn.run('src.api.main:app', port=8000)\n",
        },
    )
    app, how = served(module)
    assert app == "src.api.main:app"
    assert how == (
        "the app src.api.main passes to uvicorn.run, started by the Dockerfile's command "
        "(python -u -m src.api.main)"
    )
    # python PATH.py in the image, traced back through COPY; uvicorn.run(app) of an import
    script = make(
        tmp_path / "script",
        {
            "Dockerfile": """\
                FROM python:3.11-slim
                WORKDIR /srv
                COPY . /srv/code
                ENTRYPOINT ["python"]
                CMD ["/srv/code/run_server.py"]
            """,
            "run_server.py": "from uvicorn import run\nfrom web.api import app\nrun(app)\n",
            "web/api.py": EXPLODES + "app = object()\n",
        },
    )
    assert find_app(script).app == "web.api:app"
    # gunicorn with its options, and a shell form command after `cd`
    gunicorn = make(
        tmp_path / "gunicorn",
        {
            "server/Dockerfile": "CMD cd /app && gunicorn -w 2 -k uvicorn.workers.UvicornWorker"
            " -b 0.0.0.0:8000 service.main:api\n",
            "service/main.py": "api = 1\n",
        },
    )
    assert served(gunicorn) == (
        "service.main:api",
        "the app the server/Dockerfile's gunicorn command serves",
    )


def test_without_a_manifest_scripts_the_default_and_a_scan_are_tried(tmp_path: Path) -> None:
    scripts = make(
        tmp_path / "scripts",
        {
            "pyproject.toml": '[project]\nname = "x"\n'
            '[project.scripts]\nserve = "x_env.cli:main"\n',
            "x_env/__init__.py": "",
            "x_env/cli.py": "import uvicorn\nfrom x_env.server import app\n"
            "def main():\n    uvicorn.run(app, port=8000)\n",
            "x_env/server.py": "app = 1\n",
        },
    )
    assert served(scripts) == (
        "x_env.server:app",
        "the app pyproject.toml's script 'serve' serves",
    )
    default = make(tmp_path / "default", {"server/app.py": "from x import app\n"})
    assert served(default) == ("server.app:app", "OpenEnv's default app (server/app.py)")
    # the scan: the shallowest module-level app, unless the README names another
    scanned = make(
        tmp_path / "scanned",
        {
            "game/web/routes.py": "from fastapi import FastAPI\napp = FastAPI(title='deep')\n",
            "game/service.py": EXPLODES + "import fastapi\napi = fastapi.FastAPI()\n",
            "tests/test_app.py": "from fastapi import FastAPI\napp = FastAPI()\n",
            "notes.py": "# app = FastAPI() is only a comment here\n",
        },
    )
    app, how = served(scanned)
    assert app == "game.service:api" and "game/service.py" in how and "of 2 found" in how
    (scanned / "README.md").write_text("Run `uvicorn game.web.routes:app --reload`.\n")
    app, how = served(scanned)
    assert app == "game.web.routes:app" and "the README or Dockerfile names" in how


def test_a_folder_with_no_manifest_and_no_server_is_refused_with_what_was_looked_for(
    tmp_path: Path,
) -> None:
    library = make(
        tmp_path / "library",
        {
            "pyproject.toml": '[project]\nname = "lib"\n[project.scripts]\nlib = "lib.cli:main"\n',
            "lib/__init__.py": "",
            "lib/cli.py": "def main():\n    print('hi')\n",
            "Dockerfile": 'CMD ["python", "-m", "lib.cli"]\n',
            "examples/server.py": "from fastapi import FastAPI\napp = FastAPI()\n",
        },
    )
    with pytest.raises(EnvLaunchError) as caught:
        served(library)
    message = str(caught.value)
    assert "has no openenv.yaml and no server to run" in message
    assert "Dockerfile's CMD/ENTRYPOINT" in message and "app = FastAPI(...)" in message


def test_the_scan_is_bounded_in_depth(tmp_path: Path) -> None:
    deep = make(tmp_path / "deep", {"a/b/c/d/e/server.py": "app = FastAPI()\n"})
    with pytest.raises(EnvLaunchError):
        served(deep)
    assert served(make(tmp_path / "shallow", {"a/b/c/server.py": "app = FastAPI()\n"})) == (
        "a.b.c.server:app",
        "the module-level app app of a/b/c/server.py",
    )


def test_dockerfiles_are_read_as_docker_runs_them(tmp_path: Path) -> None:
    folder = make(
        tmp_path / "env",
        {
            "Dockerfile": """\
                # syntax=docker/dockerfile:1
                FROM python:3.11-slim AS builder
                WORKDIR /app
                COPY server/requirements.txt /tmp/reqs.txt
                COPY pyproject.toml README.md ./
                RUN pip install --upgrade pip && \\
                    # a comment inside the continuation
                    pip install -r /tmp/reqs.txt
                RUN --mount=type=cache,target=/root/.cache \\
                    if [ -f uv.lock ]; then uv sync --frozen; else uv sync; fi
                RUN python - <<'EOF'
                print("CMD ['not', 'an', 'instruction']")
                EOF
                CMD ["echo", "builder"]
                FROM python:3.11-slim
                COPY --from=builder /app /app
                WORKDIR /app/env
                ENV MODE production
                ENV A=1 B="two words"
                CMD ["sh", "-c", "cd /app/env && PORT=1 exec uvicorn server.app:app"]
            """,
            "server/requirements.txt": "fastapi==0.1\n",
            "pyproject.toml": "",
            "README.md": "",
        },
    )
    (dockerfile,) = read_dockerfiles(folder)
    runs = [command.argv for command in dockerfile.runs]
    assert ("pip", "install", "-r", "/tmp/reqs.txt") in runs
    assert ("uv", "sync", "--frozen") in runs and ("uv", "sync") in runs
    assert ("python", "-") in runs and not any("print" in " ".join(r) for r in runs)
    assert [c.argv for c in dockerfile.start] == [
        ("cd", "/app/env"),
        ("uvicorn", "server.app:app"),
    ]
    assert [c.workdir for c in dockerfile.start] == ["/app/env", "/app/env"]
    assert dockerfile.environment == {"MODE": "production", "A": "1", "B": "two words"}
    root = folder.resolve()
    assert dockerfile.source_of("/tmp/reqs.txt") == root / "server" / "requirements.txt"
    assert dockerfile.source_of("pyproject.toml", "/app") == root / "pyproject.toml"
    assert dockerfile.source_of(".", "/app") == root  # the folder the files were copied into
    assert dockerfile.source_of("/etc/passwd") is None


#: A FastAPI app that imports its sibling module as its image runs it (from its own folder).
SUBFOLDER_APP = {
    "backend/models.py": "ANSWER = 'ok'\n",
    "backend/main.py": "from fastapi import FastAPI\nfrom models import ANSWER\napp = FastAPI()\n"
    "@app.get('/health')\ndef health():\n    return {'status': ANSWER}\n",
}


def test_an_app_run_from_a_subfolder_starts_in_the_folder_its_workdir_copies(
    tmp_path: Path,
) -> None:
    def found(name: str, dockerfile: str, files: dict[str, str] | None = None) -> ServedApp:
        folder = make(tmp_path / name, {"Dockerfile": dockerfile, **SUBFOLDER_APP, **(files or {})})
        return find_app(folder)

    how = "the app the Dockerfile's uvicorn command serves (run from backend/, as in its image)"
    whole = found("whole", 'COPY . /app\nWORKDIR /app/backend\nCMD ["uvicorn", "main:app"]\n')
    assert whole == ServedApp("main:app", how, workdir="backend")
    # one folder copied under another name; WORKDIR relative to the previous one
    renamed = "WORKDIR /srv\nCOPY backend ./api\nWORKDIR api\nCMD uvicorn main:app --port 1\n"
    assert found("renamed", renamed).workdir == "backend"
    cd = 'WORKDIR /app\nCOPY . .\nCMD ["sh", "-c", "cd backend && exec uvicorn main:app"]\n'
    assert found("cd", cd) == ServedApp("main:app", how, workdir="backend")
    app_dir = found(
        "app-dir", "COPY . /app\nWORKDIR /app\nCMD uvicorn --app-dir backend main:app\n"
    )
    assert (app_dir.app, app_dir.workdir, app_dir.app_dir) == ("main:app", ".", "backend")
    assert "imported from backend/" in app_dir.how
    script = found(
        "script",
        'COPY . /app\nWORKDIR /app\nCMD ["python", "backend/serve.py"]\n',
        {"backend/serve.py": EXPLODES + "import uvicorn\nfrom main import app\nuvicorn.run(app)\n"},
    )
    assert (script.app, script.workdir, script.app_dir) == ("main:app", ".", "backend")
    # the image's PYTHONPATH, as folders of the env (an entry from elsewhere is left out)
    pythonpath = found(
        "pythonpath",
        "COPY backend /app/backend\nCOPY lib /app/lib\nWORKDIR /app/backend\n"
        "ENV PYTHONPATH=/app/backend:/app/lib:/opt/x:$PYTHONPATH PORT=1\n"
        'CMD ["uvicorn", "main:app"]\n',
        {"lib/util.py": ""},
    )
    assert (
        pythonpath.pythonpath == ("backend", "lib") and "PYTHONPATH backend/:lib/" in pythonpath.how
    )
    # `uvicorn backend.main:app` from the root, as before
    dotted = found("dotted", "COPY . /app\nWORKDIR /app\nCMD uvicorn backend.main:app\n")
    assert (dotted.app, dotted.workdir, dotted.app_dir) == ("backend.main:app", ".", None)
    # a manifest whose app: is found only where the Dockerfile runs it
    manifest = found(
        "manifest",
        "COPY . /app\nWORKDIR /app/backend\nCMD uvicorn main:app\n",
        {"openenv.yaml": "app: main:app\n"},
    )
    assert (manifest.app, manifest.workdir) == ("main:app", "backend")
    # an app: the root serves is used as written, whatever the Dockerfile runs
    rooted = found(
        "rooted",
        "COPY . /app\nWORKDIR /app/backend\nCMD uvicorn main:app\n",
        {"openenv.yaml": "app: backend.main:app\n"},
    )
    assert rooted == ServedApp("backend.main:app")


def test_the_launch_folder_never_leaves_the_env(tmp_path: Path) -> None:
    # folders outside the build context, or named by no COPY, leave the server at the root
    outside = make(
        tmp_path / "outside",
        {
            "Dockerfile": "COPY . /app\nWORKDIR /app/../../etc\nCMD uvicorn main:app\n",
            "main.py": "app = 1\n",
        },
    )
    assert (find_app(outside).app, find_app(outside).workdir) == ("main:app", ".")
    escape = make(
        tmp_path / "escape",
        {
            "Dockerfile": "COPY . /app\nWORKDIR /app\nCMD uvicorn --app-dir ../.. main:app\n",
            "main.py": "from fastapi import FastAPI\napp = FastAPI()\n",
        },
    )
    scanned = find_app(escape)  # the command is passed over: found by the scan, at the root
    assert (scanned.app, scanned.workdir, scanned.app_dir) == ("main:app", ".", None)
    assert "module-level app" in scanned.how
    guessed = make(  # a backend/ folder the image never copies is not guessed from its name
        tmp_path / "guessed",
        {"Dockerfile": "WORKDIR /app/backend\nCMD uvicorn main:app\n", **SUBFOLDER_APP},
    )
    assert find_app(guessed).workdir == "."


@pytest.mark.anyio
async def test_an_env_whose_image_runs_it_from_a_subfolder_starts(tmp_path: Path) -> None:
    folder = make(
        tmp_path / "env",
        {
            "Dockerfile": "COPY backend /app/backend\nWORKDIR /app/backend\n"
            'CMD ["uvicorn", "main:app"]\n',
            **SUBFOLDER_APP,
        },
    )
    server = launch_server(folder, log_dir=tmp_path / "logs")
    try:
        async with httpx.AsyncClient() as http:
            assert await wait_healthy(http, server.url, timeout=60, server=server) == "/health"
            assert (await http.get(server.url + "/health")).json() == {"status": "ok"}
    finally:
        server.stop()
    assert "run from backend/" in server.log_path.read_text()
