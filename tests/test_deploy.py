"""Dockerfile and docker-compose.yml. No Docker engine runs here, so: the compose file parses and
wires the services as documented, the Dockerfile follows its rules, and the bridge image's own
CMD and HEALTHCHECK commands are run for real in this environment."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kb_bridge.testing.processes import REPO, Service, clean_env, free_port

DOCKERFILE = (REPO / "Dockerfile").read_text()
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())


def stages() -> dict[str, list[tuple[str, str]]]:
    """Dockerfile stages by name: (instruction, argument) pairs, continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    result: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, argument = line.partition(" ")
        if instruction.upper() == "FROM":
            current = []
            result[argument.split(" AS ")[-1].strip() if " AS " in argument else argument] = current
        current.append((instruction.upper(), argument.strip()))
    return result


def exec_form(argument: str) -> list[str]:
    """The JSON array of an exec-form CMD (after any HEALTHCHECK options)."""
    return list(json.loads(argument[argument.index("[") :]))


def image_env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, argument in stage:
        if instruction == "ENV":
            for pair in shlex.split(argument):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def test_compose_runs_engine_and_bridge_with_volumes() -> None:
    services = COMPOSE["services"]
    assert {name for name, service in services.items() if "profiles" not in service} == {"engine", "bridge"}
    bridge, engine = services["bridge"], services["engine"]
    # The bridge reaches the engine over the compose network by service name.
    assert bridge["environment"]["KB_ENGINE_URL"] == "http://engine:8000"
    assert engine["environment"]["KB_ENGINE_ALLOWED_HOSTS"] == "engine"  # else the engine answers 421
    assert bridge["depends_on"]["engine"]["condition"] == "service_healthy"
    assert "KB_MCP_API_KEY" in bridge["environment"] and "KB_API_KEY" in engine["environment"]
    assert any(v.endswith(":/var/lib/kb-engine/data") for v in engine["volumes"])
    assert any(v.endswith(":/var/lib/kb-bridge/uploads") for v in bridge["volumes"])
    assert {"engine-data", "uploads"} <= set(COMPOSE["volumes"])
    assert bridge["ports"] == ["127.0.0.1:8765:8765"] and "ports" not in engine
    assert bridge["build"]["target"] == "bridge" and engine["build"]["target"] == "engine"


def test_the_postgres_profile_runs_two_engine_replicas_on_pgvector_behind_a_bridge() -> None:
    services = {name: s for name, s in COMPOSE["services"].items() if s.get("profiles") == ["postgres"]}
    assert set(services) == {"postgres", "engine-pg", "bridge-pg"}
    database, engine, bridge = services["postgres"], services["engine-pg"], services["bridge-pg"]
    assert database["image"].startswith("pgvector/pgvector:") and "healthcheck" in database
    assert engine["deploy"]["replicas"] == 2
    assert engine["environment"]["KB_ENGINE_DATABASE_URL"].startswith("postgresql://kb:${KB_PG_PASSWORD")
    assert engine["environment"]["KB_ENGINE_DATABASE_URL"].endswith("@postgres:5432/kb")
    assert engine["environment"]["KB_ENGINE_ALLOWED_HOSTS"] == "engine-pg"
    assert engine["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "volumes" not in engine  # everything a replica needs is in the database
    assert bridge["environment"]["KB_ENGINE_URL"] == "http://engine-pg:8000"
    assert bridge["ports"] == ["127.0.0.1:8766:8765"]
    assert "'.[engine,postgres]'" in DOCKERFILE


def test_dockerfile_rules() -> None:
    all_stages = stages()
    assert list(all_stages)[-1] == "bridge"  # the default build target
    for name in ("bridge", "engine"):
        stage = all_stages[name]
        assert stage[0][1].startswith("python:${PYTHON}-slim")
        assert ("USER", "kb") in stage
        assert any(i == "HEALTHCHECK" and "/healthz" in a for i, a in stage)
        assert not any(i == "RUN" and re.search(r"apt-get|gcc|build-essential", a) for i, a in stage)
        cmd = next(a for i, a in stage if i == "CMD")
        assert cmd.startswith("[")  # exec form: the server is PID 1 and gets SIGTERM
    bridge_cmd = exec_form(next(a for i, a in all_stages["bridge"] if i == "CMD"))
    assert bridge_cmd == ["gunicorn", "-c", "gunicorn.conf.py", "kb_bridge.asgi:app"]


def test_the_bridge_image_commands_run(tmp_path: Path) -> None:
    stage = stages()["bridge"]
    env = image_env(stage)
    port = free_port()
    env |= {"KB_BIND": f"127.0.0.1:{port}", "KB_UPLOAD_DIR": str(tmp_path / "uploads"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    cmd = exec_form(next(a for i, a in stage if i == "CMD"))
    healthcheck = exec_form(next(a for i, a in stage if i == "HEALTHCHECK"))
    service = Service("bridge image CMD", cmd, clean_env(env), tmp_path / "cmd.log", f"http://127.0.0.1:{port}").wait_ready()
    try:
        probe = subprocess.run(healthcheck, env=clean_env(env), cwd=REPO, timeout=30, capture_output=True)
        assert probe.returncode == 0, probe.stderr
    finally:
        assert service.stop() == 0


@pytest.mark.parametrize("name", ["engine", "bridge"])
def test_stage_entrypoints_exist(name: str) -> None:
    cmd = exec_form(next(a for i, a in stages()[name] if i == "CMD"))
    help_cmd = [sys.executable, "-m", "gunicorn", "--version"] if cmd[0] == "gunicorn" else [sys.executable, "-m", "kb_bridge", *cmd[1:], "--help"]
    assert subprocess.run(help_cmd, capture_output=True, timeout=60, cwd=REPO).returncode == 0


def test_the_wheel_ships_the_product_and_its_files_but_not_the_test_helpers(tmp_path: Path) -> None:
    # Built from a copy of the tracked files: a checkout's own build/ directory may hold files of older builds.
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "setup.py", "setup.cfg", "README.md", "kb_bridge"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((REPO / name).read_bytes())
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path), str(source)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    import zipfile

    names = zipfile.ZipFile(next(tmp_path.glob("kb_bridge-*.whl"))).namelist()
    assert "kb_bridge/protocol/server.py" in names and "kb_bridge/local_engine/cli.py" in names
    assert any(n.startswith("kb_bridge/web/console/templates/") for n in names)
    assert not [n for n in names if n.startswith("kb_bridge/testing/")]
    # The embedding model ships in the wheel (the `engine` extra installs no model package): every file of it.
    model = "kb_bridge/local_engine/embedding/model/"
    assert {n.removeprefix(model) for n in names if n.startswith(model)} == {
        str(path.relative_to(REPO / model)) for path in (REPO / model).rglob("*") if path.is_file()}
    assert {"model.safetensors", "tokenizer.json", "config.json", "1_Pooling/config.json", "modules.json",
            "LICENSE", "README.md"} <= {n.removeprefix(model) for n in names if n.startswith(model)}
