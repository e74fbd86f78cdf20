"""Finding the app an env folder serves, and reading Dockerfiles, from real files on disk."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from taskhub import EnvLaunchError
from taskhub.env import find_app, read_dockerfiles

#: A module that would end any process importing it: finding its app must only parse it.
EXPLODES = "raise SystemExit('imported')\n"


def make(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text))
    return root


def test_the_app_is_found_where_manifests_name_it(tmp_path: Path) -> None:
    def folder(name: str, manifest: str, files: dict[str, str]) -> Path:
        return make(tmp_path / name, {"openenv.yaml": manifest, **files})

    app = {"server/app.py": "app = None\n"}
    assert find_app(folder("plain", "app: server.app:app\n", app)) == ("server.app:app", "")
    found, how = find_app(folder("path", "app: server/app.py\n", app))
    assert found == "server.app:app" and "is a path" in how
    nested = folder("nested", "server:\n  entry_point: pkg.api:app\n", {"pkg/api.py": "app = 1\n"})
    assert find_app(nested)[0] == "pkg.api:app"
    docker = folder(
        "docker",
        "name: x\n",
        {
            "Dockerfile": 'CMD ["sh", "-c", "uvicorn soc.server:app --port 1"]\n',
            "soc/server.py": "",
        },
    )
    assert find_app(docker) == ("soc.server:app", "the app the Dockerfile's uvicorn command serves")
    broken, how = find_app(folder("broken", "tasks:\n  - a\n b: [\n", app))
    assert broken == "server.app:app" and "not valid YAML" in how
    with pytest.raises(EnvLaunchError, match="not valid YAML"):
        find_app(folder("broken-bare", "a: [\n", {}))
    with pytest.raises(EnvLaunchError, match="names no app"):
        find_app(folder("none", "name: x\n", {}))


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
    app, how = find_app(module)
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
    assert find_app(script)[0] == "web.api:app"
    # gunicorn with its options, and a shell form command after `cd`
    gunicorn = make(
        tmp_path / "gunicorn",
        {
            "server/Dockerfile": "CMD cd /app && gunicorn -w 2 -k uvicorn.workers.UvicornWorker"
            " -b 0.0.0.0:8000 service.main:api\n",
            "service/main.py": "api = 1\n",
        },
    )
    assert find_app(gunicorn) == (
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
    assert find_app(scripts) == (
        "x_env.server:app",
        "the app pyproject.toml's script 'serve' serves",
    )
    default = make(tmp_path / "default", {"server/app.py": "from x import app\n"})
    assert find_app(default) == ("server.app:app", "OpenEnv's default app (server/app.py)")
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
    app, how = find_app(scanned)
    assert app == "game.service:api" and "game/service.py" in how and "of 2 found" in how
    (scanned / "README.md").write_text("Run `uvicorn game.web.routes:app --reload`.\n")
    app, how = find_app(scanned)
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
        find_app(library)
    message = str(caught.value)
    assert "has no openenv.yaml and no server to run" in message
    assert "Dockerfile's CMD/ENTRYPOINT" in message and "app = FastAPI(...)" in message


def test_the_scan_is_bounded_in_depth(tmp_path: Path) -> None:
    deep = make(tmp_path / "deep", {"a/b/c/d/e/server.py": "app = FastAPI()\n"})
    with pytest.raises(EnvLaunchError):
        find_app(deep)
    assert find_app(make(tmp_path / "shallow", {"a/b/c/server.py": "app = FastAPI()\n"})) == (
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
    assert dockerfile.start[0].workdir == "/app/env"
    root = folder.resolve()
    assert dockerfile.source_of("/tmp/reqs.txt") == root / "server" / "requirements.txt"
    assert dockerfile.source_of("pyproject.toml", "/app") == root / "pyproject.toml"
    assert dockerfile.source_of(".", "/app") == root  # the folder the files were copied into
    assert dockerfile.source_of("/etc/passwd") is None
