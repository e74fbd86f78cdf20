"""Static checks read folders without running them: both manifest formats, the 0.10 block,
dependency pinning, fake implementations."""

from __future__ import annotations

import ast
import asyncio
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.validators.conftest import ENVS


def manifest_of(folder: Path, text: str):  # type: ignore[no-untyped-def]
    from taskhub.validators._manifest import read_manifest

    (folder / "openenv.yaml").write_text(textwrap.dedent(text))
    return read_manifest(folder)


@pytest.fixture
def env_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "env"
    shutil.copytree(ENVS / "good", folder)
    return folder


def test_served_format_with_the_validation_block(env_folder: Path) -> None:
    manifest = manifest_of(env_folder, (ENVS / "good" / "openenv.yaml").read_text())
    assert manifest.format == "served" and manifest.problems == []
    assert manifest.reward_range == (0.0, 1.0) and manifest.floor_margin == 0.5
    assert manifest.episode_timeout_s == 30.0 and manifest.resource_problems == []


def test_descriptive_format_seen_in_the_wild(env_folder: Path) -> None:
    manifest = manifest_of(
        env_folder,
        """\
        name: connect4_env
        version: "0.1.0"
        description: "Connect4 environment for OpenEnv"
        action: Connect4Action
        observation: Connect4Observation
        """,
    )
    assert manifest.format == "descriptive" and manifest.problems == []
    assert manifest.app == "server.app:app" and manifest.validation is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("name: [unclosed\n", "not valid YAML"),
        ("- a list\n", "must be a mapping"),
        ("spec_version: 1\nname: x\napp: server.main:app\n", "does not resolve"),
        ("spec_version: 1\nname: x\napp: server.app:application\n", "binds no 'application'"),
        ("spec_version: 1\nname: x\napp: nocolon\n", "module:attribute"),
        ("spec_version: 1\napp: server.app:app\n", "`name` must be"),
        (
            "name: x\nvalidation:\n  reward: {range: [1, 0], floor_margin: 0.5}\n",
            "low < high",
        ),
        ("name: x\nvalidation:\n  reward: {range: [0, 1]}\n", "floor_margin is required"),
        ("name: x\nvalidation:\n  rewards: {}\n", "unknown keys ['rewards']"),
        (
            "name: x\nvalidation:\n  capabilities: {verifier: {kind: magic}}\n",
            "verifier.kind",
        ),
    ],
)
def test_manifest_problems_are_named(env_folder: Path, text: str, problem: str) -> None:
    manifest = manifest_of(env_folder, text)
    assert any(problem in p for p in manifest.problems), manifest.problems


@pytest.mark.parametrize(
    ("requirement", "kind"),
    [
        ("openenv==0.10.0", "exact"),
        ("fastapi>=0.116.0", "lower"),
        ("fastapi>=0.116,<1", "bounded"),
        ("numpy~=1.26", "bounded"),
        ("uvicorn", "bare"),
        ("./vendor/lib", "direct"),
        ("pkg @ https://example.org/pkg.whl", "direct"),
        ("openenv==0.10.*", "bounded"),
        ("pkg @ git+https://example.org/pkg.git@v1.2", "vcs_unpinned"),
        ("git+https://example.org/pkg.git", "vcs_unpinned"),
        ("pkg @ git+ssh://git@example.org/pkg.git@" + "f" * 40, "vcs"),
    ],
)
def test_requirement_pin_classes(requirement: str, kind: str) -> None:
    from taskhub.validators._static import classify_requirement

    assert classify_requirement(requirement)[1] == kind


def run_check(check, folder: Path):  # type: ignore[no-untyped-def]
    import httpx
    from taskhub.validators import (
        EnvDescription,
        EnvDriver,
        Subject,
        ValidationConfig,
        load_policy,
    )
    from taskhub.validators._manifest import read_manifest

    async def go():  # type: ignore[no-untyped-def]
        async with httpx.AsyncClient() as http:
            config = ValidationConfig()
            subject = Subject(
                env=EnvDescription(
                    target=str(folder), kind="folder", folder=folder, manifest=read_manifest(folder)
                ),
                driver=EnvDriver(config=config, http=http, folder=folder),
                config=config,
                policy=load_policy(),
            )
            return await check(subject)

    return asyncio.run(go())


def test_dependency_pinning(env_folder: Path) -> None:
    from taskhub.validators._static import check_dependency_pinning

    assert run_check(check_dependency_pinning, env_folder).status == "pass"
    (env_folder / "server" / "requirements.txt").write_text("openenv-core>=0.2\nrequests\n")
    finding = run_check(check_dependency_pinning, env_folder)
    assert finding.status == "fail"
    assert any("unversioned requirement" in str(e) for e in finding.evidence)
    assert any("'openenv-core' is not pinned" in str(e) for e in finding.evidence)
    # a lock the Dockerfile does not install from pins nothing the build uses
    (env_folder / "uv.lock").write_text("version = 1\n")
    finding = run_check(check_dependency_pinning, env_folder)
    assert finding.status == "fail"
    assert "uv.lock is present, but the Dockerfile installs server/requirements.txt" in (
        finding.summary
    )
    assert "uv sync --frozen" in str(finding.remediation)
    dockerfile = env_folder / "server" / "Dockerfile"
    dockerfile.write_text(
        "FROM python:3.11-slim\nWORKDIR /app/env\nCOPY . /app/env\n"
        "RUN pip install uv && uv sync --frozen --no-editable\n"
        'CMD ["uvicorn", "server.app:app"]\n'
    )
    finding = run_check(check_dependency_pinning, env_folder)
    assert finding.status == "pass", finding.evidence
    assert finding.summary == (
        "dependencies are pinned by lock file uv.lock (the Dockerfile installs from it)"
    )
    # without a Dockerfile, a lock in the folder is what an author builds from
    dockerfile.unlink()
    assert run_check(check_dependency_pinning, env_folder).status == "pass"


@pytest.mark.parametrize(
    ("requirement", "status", "words"),
    [
        (
            "openenv-core @ git+https://github.com/meta-pytorch/OpenEnv.git@main",
            "fail",
            "requirements.txt:2: openenv-core @ git+https://github.com/meta-pytorch/OpenEnv.git"
            "@main installs at 'main', a branch or tag that can move: pin it to a commit "
            "(openenv-core @ git+https://github.com/meta-pytorch/OpenEnv.git@<40-hex commit>) "
            "or to a released version (openenv-core==X.Y.Z)",
        ),
        (
            "git+https://github.com/org/tool.git#egg=tool",
            "fail",
            "requirements.txt:2: git+https://github.com/org/tool.git#egg=tool installs at no "
            "commit: pin it to a commit (tool @ git+https://github.com/org/tool.git@<40-hex "
            "commit>) or to a released version (tool==X.Y.Z)",
        ),
        (
            "openenv-core @ git+https://github.com/meta-pytorch/OpenEnv.git@" + "0a1b2c3d" * 5,
            "pass",
            "dependencies are pinned by an exact openenv-core pin and versioned requirements",
        ),
    ],
    ids=["branch", "no-revision", "commit"],
)
def test_vcs_requirements_need_a_full_commit(
    tmp_path: Path, requirement: str, status: str, words: str
) -> None:
    from taskhub.validators._static import check_dependency_pinning

    folder = tmp_path / "env"
    folder.mkdir()
    (folder / "requirements.txt").write_text(f"fastapi==0.115.0\n{requirement}\n")
    (folder / "Dockerfile").write_text(
        "FROM python:3.11-slim\nWORKDIR /app\nCOPY requirements.txt .\n"
        "RUN pip install --no-cache-dir --timeout=120 -r requirements.txt\nCOPY . .\n"
    )
    finding = run_check(check_dependency_pinning, folder)
    assert finding.status == status
    if status == "fail":
        assert words in finding.summary and words in finding.evidence[0]
        assert "Pin every VCS requirement to a full commit" in str(finding.remediation)
    else:
        assert finding.summary == words


def test_dependency_pinning_judges_what_the_dockerfile_installs(tmp_path: Path) -> None:
    from taskhub.validators._static import check_dependency_pinning

    folder = tmp_path / "env"
    (folder / "backend").mkdir(parents=True)
    # the declared files are pinned, but the build installs packages by name and a project
    (folder / "requirements.txt").write_text("fastapi==0.115.0\nopenenv-core==0.2.3\n")
    (folder / "backend" / "pyproject.toml").write_text(
        '[project]\nname = "b"\ndependencies = [\n    "openenv-core>=0.2.1",\n]\n'
    )
    (folder / "Dockerfile").write_text(
        "FROM python:3.11-slim\nWORKDIR /srv\nCOPY backend /srv/backend\n"
        "RUN pip install --upgrade pip setuptools && pip install uvicorn "
        "--index-url https://example.org/simple\n"
        'RUN cd /srv && pip install -e "./backend[extra]"\n'
    )
    finding = run_check(check_dependency_pinning, folder)
    assert finding.status == "fail"
    assert finding.measured["installed_files"] == ["backend/pyproject.toml"]
    assert "unversioned requirement Dockerfile:4: uvicorn" in finding.evidence
    assert any(
        "'openenv-core' is not pinned to one version (==X.Y.Z): openenv-core>=0.2.1" in e
        for e in finding.evidence
    )
    assert "openenv-core==0.2.1" in str(finding.remediation)  # the era the env declares
    # a build that installs nothing of the env's (its base image has it): the declared files
    (folder / "Dockerfile").write_text("FROM openenv-base\nRUN pip install --upgrade pip\n")
    finding = run_check(check_dependency_pinning, folder)
    assert finding.status == "pass" and finding.measured["basis"] == "declared files"


@pytest.mark.parametrize(
    ("dockerfile", "status"),
    [
        ("RUN pip install -c constraints.txt -r requirements.txt\n", "pass"),
        ("RUN pip install --constraint=/app/constraints.txt -r requirements.txt\n", "pass"),
        ("ENV PIP_CONSTRAINT=/app/constraints.txt\nRUN pip install -r requirements.txt\n", "pass"),
        ("RUN UV_CONSTRAINT=constraints.txt uv pip install --system -r requirements.txt\n", "pass"),
        ("RUN cd /app && uv pip install -c constraints.txt -r requirements.txt\n", "pass"),
        # constraints the install does not use pin nothing; uv pip reads no PIP_CONSTRAINT
        ("RUN pip install -r requirements.txt\n", "fail"),
        ("RUN PIP_CONSTRAINT=constraints.txt uv pip install -r requirements.txt\n", "fail"),
        (
            "RUN pip install -c constraints.txt fastapi\nRUN pip install -r requirements.txt\n",
            "fail",
        ),
    ],
    ids=["-c", "--constraint=", "ENV", "uv-inline", "uv-c", "unused", "uv-pip-env", "other-run"],
)
def test_a_constraints_file_the_install_uses_pins_what_it_names(
    tmp_path: Path, dockerfile: str, status: str
) -> None:
    from taskhub.validators._static import check_dependency_pinning

    folder = tmp_path / "env"
    folder.mkdir()
    (folder / "requirements.txt").write_text("fastapi\nopenenv-core\nrequests>=2\n")
    (folder / "constraints.txt").write_text(
        "# pins\nfastapi==0.115.0\nopenenv_core==0.2.3\nRequests==2.32.3\nnumpy==2.1.0\n"
    )
    (folder / "Dockerfile").write_text(
        f"FROM python:3.11-slim\nCOPY . /app\nWORKDIR /app\n{dockerfile}"
    )
    finding = run_check(check_dependency_pinning, folder)
    assert finding.status == status, finding.evidence
    if status == "fail":
        assert "unversioned requirement requirements.txt:1: fastapi" in finding.evidence
        # only the other command's `fastapi` is constrained (by the file that command uses)
        assert finding.measured["pinned_by_constraints"] == ("-c" in dockerfile)
        return
    assert finding.measured["constraint_files"] == ["constraints.txt"]
    assert finding.measured["pinned_by_constraints"] == 3 and finding.measured["exact"] == 3
    assert finding.summary == (
        "dependencies are pinned by an exact openenv-core pin and versioned requirements "
        "(3 of them pinned by the constraints file constraints.txt)"
    )
    assert finding.evidence[0] == (
        "requirements.txt:1: fastapi is pinned by constraints.txt:2: fastapi==0.115.0"
    )


def test_constraints_named_inside_a_requirement_file_pin_too(tmp_path: Path) -> None:
    from taskhub.validators._static import check_dependency_pinning

    folder = tmp_path / "env"
    (folder / "server").mkdir(parents=True)
    (folder / "server" / "requirements.txt").write_text(
        "-c ../pins/constraints.txt\nopenenv-core\nuvicorn\n"
    )
    (folder / "pins").mkdir()
    (folder / "pins" / "constraints.txt").write_text("openenv-core==0.2.3\n")
    finding = run_check(check_dependency_pinning, folder)  # no Dockerfile: the declared files
    assert finding.status == "fail"
    assert finding.measured["constraint_files"] == ["pins/constraints.txt"]
    assert finding.measured["pinned_by_constraints"] == 1
    assert finding.evidence == ["unversioned requirement server/requirements.txt:3: uvicorn"]
    (folder / "pins" / "constraints.txt").write_text("openenv-core==0.2.3\nuvicorn<1\n")
    finding = run_check(check_dependency_pinning, folder)
    assert finding.status == "pass" and finding.measured["pinned_by_constraints"] == 2


def test_layout_flags_a_folder_that_shadows_the_framework(env_folder: Path) -> None:
    from taskhub.validators._static import check_layout

    assert run_check(check_layout, env_folder).status == "pass"
    (env_folder / "openenv").mkdir()
    (env_folder / "openenv" / "__init__.py").write_text("")
    (env_folder / "data.zip").write_bytes(b"PK")
    finding = run_check(check_layout, env_folder)
    assert finding.status == "fail"
    assert "shadows the OpenEnv framework" in finding.summary and "data.zip" in finding.summary


@pytest.mark.parametrize(
    ("source", "trivial"),
    [
        ("def reset(self):\n    return {'status': 'ok'}\n", True),
        ("def step(self, a):\n    '''Doc.'''\n    pass\n", True),
        ("def step(self, a):\n    return JSONResponse({'status': 'ok'})\n", True),
        ("def step(self, a):\n    raise NotImplementedError\n", True),
        ("def step(self, a):\n    return self.env.step(a)\n", False),
        ("def reset(self):\n    self.n = 0\n    return {'n': self.n}\n", False),
    ],
)
def test_trivial_implementations(source: str, trivial: bool) -> None:
    from taskhub.validators._static import is_trivial

    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    assert is_trivial(function) is trivial


def test_reset_parameters_are_read_from_the_environment_class() -> None:
    from taskhub.validators._static import reset_parameters

    assert reset_parameters(ENVS / "good") == ["seed", "episode_id", "op", "digits"]
    assert reset_parameters(ENVS / "ignores_task_params") == ["seed", "episode_id"]
    assert reset_parameters(ENVS / "fake_endpoints") is None


def test_mcp_style_environments_count_as_implementations(tmp_path: Path) -> None:
    from taskhub.validators._static import check_env_implementation

    folder = tmp_path / "mcp_env"
    (folder / "server").mkdir(parents=True)
    (folder / "openenv.yaml").write_text("spec_version: 1\nname: mcp_env\napp: server.app:app\n")
    (folder / "server" / "env.py").write_text(
        "class Tools(MCPEnvironment):\n"
        "    def reset(self, seed=None, episode_id=None, **kwargs):\n"
        "        self.board = new_board(seed)\n"
        "        return self.observe()\n"
        "    def _step_impl(self, action):\n"
        "        return self.apply(action)\n"
    )
    finding = run_check(check_env_implementation, folder)
    assert finding.status == "pass", finding
    (folder / "server" / "app.py").write_text(
        "@app.post('/reset')\ndef reset():\n    return {'status': 'ok'}\n"
    )
    finding = run_check(check_env_implementation, folder)
    assert finding.status == "fail" and "server/app.py:2 route reset" in finding.summary


SHA = "0123456789abcdef0123456789abcdef01234567"
#: The call reads no remote task source at all.
NOT_REMOTE = "not remote"


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ('load_dataset("org/quiz", split="train")', "has no revision"),
        ('load_dataset("gsm8k", "main")', "has no revision"),  # a canonical Hub dataset
        ('load_dataset("org/quiz", revision="main")', "a branch or tag that can move"),
        ('load_dataset("org/quiz", revision="v1.0")', "a branch or tag that can move"),
        ('load_dataset(name, revision=os.environ["REV"])', "cannot be read without running"),
        ('hf_hub_download("org/quiz", "tasks.jsonl", repo_type="dataset")', "has no revision"),
        ('huggingface_hub.snapshot_download(repo_id="org/quiz")', "has no revision"),
        ('requests.get("https://example.org/data/tasks.jsonl")', "no commit in the URL"),
        (
            'pd.read_csv("https://raw.githubusercontent.com/o/r/main/tasks.csv")',
            "no commit in the URL",
        ),
        ('load_dataset("org/quiz", revision="' + SHA + '")', None),
        ('REV = "' + SHA + '"\nload_dataset("org/quiz", revision=REV)', None),
        ('load_dataset("json", data_files="data/tasks.jsonl")', NOT_REMOTE),  # local files
        ('load_dataset("./data")', NOT_REMOTE),
        ('requests.get("https://raw.githubusercontent.com/o/r/' + SHA + '/tasks.csv")', None),
        ('fetch("https://example.org/tasks.jsonl", sha256="ab12")', None),
        ('requests.get("https://api.example.org/v1/score")', NOT_REMOTE),  # not a data file
    ],
)
def test_task_sources_are_pinned_by_commit_or_checksum(
    tmp_path: Path, source: str, problem: str | None
) -> None:
    from taskhub.validators._static import task_sources

    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "tasks.py").write_text(source + "\n")
    found, scanned = task_sources(tmp_path)
    assert scanned == 1
    if problem == NOT_REMOTE:
        assert found == []
        return
    assert len(found) == 1, found
    assert found[0]["where"].startswith("server/tasks.py:")
    if problem is None:
        assert "problem" not in found[0], found[0]
    else:
        assert problem in found[0]["problem"]


def test_task_distribution_pinning_digests_shipped_data(env_folder: Path) -> None:
    from taskhub.validators._static import check_task_distribution_pinning

    (env_folder / "data").mkdir()
    (env_folder / "data" / "tasks.jsonl").write_text('{"q": "1+1", "a": "2"}\n')
    (env_folder / "LICENSE.txt").write_text("MIT\n")  # neither it nor requirements.txt is data
    finding = run_check(check_task_distribution_pinning, env_folder)
    assert finding.status == "pass", finding.summary
    assert finding.measured["shipped_data_files"] == [
        {
            "path": "data/tasks.jsonl",
            "bytes": 23,
            "sha256": "bc688faec0ebf2251bcd21adf89adfedd7ddc486351e8d708f0a9041be8f6ae1",
        }
    ]
    (env_folder / "server" / "extra.py").write_text(
        'from datasets import load_dataset\nROWS = load_dataset("org/quiz", revision="main")\n'
    )
    finding = run_check(check_task_distribution_pinning, env_folder)
    assert finding.status == "fail"
    assert "server/extra.py:2" in finding.summary and finding.remediation


def test_every_check_id_starts_with_its_level_and_lives_in_its_level_module() -> None:
    from taskhub.validators import registered_checks

    for spec in registered_checks():
        if "/" in spec.id:
            continue  # a third-party check
        assert spec.id.split(".")[0] == spec.level, spec.id
        assert spec.fn.__module__.endswith(f"._{spec.level}"), (spec.id, spec.fn.__module__)


def test_checks_run_after_what_they_need() -> None:
    from taskhub.validators import registered_checks

    order = [spec.id for spec in registered_checks()]
    assert order.index("runtime.startup") < order.index("protocol.health")
    assert order.index("protocol.episode") < order.index("runtime.seed_control")
    playing = order.index("semantic.verifier_determinism")
    assert playing < order.index("runtime.reward_well_formed")
    # malformed input waits for the episode checks that find the common defects; the checks
    # that may bring the server down (oversized frames, a restart) come last
    malformed = order.index("protocol.malformed_input")
    assert order.index("runtime.step_after_done") < malformed < order.index("runtime.seed_control")
    assert order[-2:] == ["protocol.frame_limit", "semantic.replayability"]


def test_manifest_tasks_are_read_in_both_styles_seen_in_the_wild(tmp_path: Path) -> None:
    from taskhub.validators._manifest import declared_tasks

    assert declared_tasks({"tasks": ["easy", "hard"]}) == ["easy", "hard"]
    assert declared_tasks({"tasks": [{"id": "t1", "difficulty": "easy"}, {"name": "t2"}]}) == [
        "t1",
        "t2",
    ]
    assert declared_tasks({"environment": {"tasks": [{"task_id": 3}]}}) == ["3"]
    assert declared_tasks({"tasks": "not a list"}) == []


def test_first_actions_come_from_enums_required_fields_and_examples() -> None:
    from taskhub.validators._actions import candidate_actions, inline

    schema = {
        "type": "object",
        "properties": {
            "action_type": {"enum": ["inspect", "restart", "wait"]},
            "service": {"type": "string", "examples": ["cache"]},
            "note": {"type": "string"},
        },
        "required": ["action_type", "service"],
    }
    candidates = candidate_actions(schema)
    assert candidates[0] == {"action_type": "inspect", "service": "cache"}
    assert {"action_type": "restart", "service": "cache"} in candidates
    assert {} in candidates and len(candidates) <= 6
    union = inline(
        {"$defs": {"A": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]}}},
        {"oneOf": [{"$ref": "#/$defs/A"}]},
    )
    assert candidate_actions(union)[0] == {"kind": "a"}
    assert candidate_actions(None) == [{}]


def test_http_dialect_is_learnt_from_openapi_and_replies_read_either_way() -> None:
    from taskhub import EnvProtocolError
    from taskhub.env import learn_http_dialect, parse_http_reply

    spec = {
        "openapi": "3.1.0",
        "paths": {
            "/": {"get": {}},
            "/api/reset": {"post": {"requestBody": _body("#/components/schemas/Reset")}},
            "/api/step": {"post": {"requestBody": _body("#/components/schemas/Move")}},
            "/api/state": {"get": {}},
        },
        "components": {
            "schemas": {
                "Reset": {
                    "properties": {"seed": {"type": "integer"}, "task_name": {"type": "string"}},
                    "additionalProperties": False,
                },
                "Move": {"properties": {"column": {"type": "string"}}, "required": ["column"]},
            }
        },
    }
    learnt = learn_http_dialect(spec)
    assert learnt is not None
    dialect, action = learnt
    assert (dialect.reset_path, dialect.step_path, dialect.state_path) == (
        "/api/reset",
        "/api/step",
        "/api/state",
    )
    assert dialect.wrap_action is False and dialect.reset_keys == ("seed", "task_name")
    assert action is not None and action["required"] == ["column"]
    top = parse_http_reply({"board": [1], "reward": 0.5, "done": False}, "step", step=True)
    assert top.observation == {"board": [1]} and top.reward == 0.5
    nested = parse_http_reply({"observation": {"board": []}, "reward": 1, "done": True}, "x")
    assert nested.done and nested.observation == {"board": []}
    with pytest.raises(EnvProtocolError, match="neither an observation nor a reward"):
        parse_http_reply({"status": "ok"}, "step", step=True)


def _body(ref: str) -> dict:  # type: ignore[type-arg]
    return {"content": {"application/json": {"schema": {"$ref": ref}}}}


def test_field_diff_names_each_changed_field() -> None:
    from taskhub.validators._driver import field_diff, masked

    before = {"episode_id": "a", "board": [1, 2], "msg": "started at t=1"}
    after = {"episode_id": "b", "board": [1, 3], "msg": "started at t=1"}
    assert field_diff(before, after, "state") == [
        "state.board[1]: 2 -> 3",
        'state.episode_id: "a" -> "b"',
    ]
    assert masked({"text": "episode x-1 begins"}, {"x-1"}) == {"text": "episode <id> begins"}
    # two long texts that differ far in are shown from just before where they differ
    intro = "Context: small suppliers wait 60-90 days for buyers to pay them. " * 3
    first, second = intro + "Reset @ 20:23:36.1234", intro + "Reset @ 20:23:37.9876"
    [line] = field_diff({"message": first}, {"message": second})
    shown = '"...s to pay them. Reset @ 20:23:36.1234" -> "...s to pay them. Reset @ 20:23:37.9876"'
    assert line == f"message: {shown}"


def test_measured_durations_are_left_out_of_observation_comparisons() -> None:
    from taskhub.validators._driver import is_duration_field, observation_key

    for name in ("execution_time", "elapsed_s", "latencyMs", "step_duration", "wall_time_seconds"):
        assert is_duration_field(name), name
    for name in ("time", "time_remaining", "steps", "timeout", "turns"):
        assert not is_duration_field(name), name
    first = {"result": {"stdout": "ok", "execution_time": 0.0071}, "metadata": {"t": 1}}
    second = {"result": {"stdout": "ok", "execution_time": 0.0093}, "metadata": {"t": 2}}
    assert observation_key(first) == observation_key(second)
    # only a measured float is masked: a count under such a name, or other text, still differs
    assert observation_key({"execution_time": 3}) != observation_key({"execution_time": 4})
    assert observation_key({"result": {"stdout": "a", "execution_time": 0.1}}) != observation_key(
        {"result": {"stdout": "b", "execution_time": 0.1}}
    )


def test_a_server_that_did_not_start_is_summed_up_by_its_last_printed_line() -> None:
    from taskhub.validators._runtime import _startup_cause

    crashed = (
        "env server x exited with code 1 before becoming healthy. Its output ends with:\n"
        '  File "server/app.py", line 23, in <module>\n'
        "TypeError: env must be a callable (class or factory function)\n"
    )
    assert _startup_cause(crashed) == (
        "env server x exited with code 1 before becoming healthy: "
        "TypeError: env must be a callable (class or factory function)"
    )
    silent = (
        "http://x/health did not answer 200 within 60s (last: ConnectError). "
        "Its output ends with:\n"
    )
    assert (
        _startup_cause(silent)
        == "http://x/health did not answer 200 within 60s (last: ConnectError)."
    )
