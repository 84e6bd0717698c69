"""The README as a front door: short, its two commands the ones CI runs, and every table and link in it true to
the code and the docs."""

from __future__ import annotations

import re
from pathlib import Path

from idcontrol.formulations import available_formulations
from idcontrol.settings import load_launch
from idcontrol.simulators import available_simulators

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
CI = (REPO / ".ci" / "run").read_text().splitlines()


def commands() -> tuple[str, str]:
    """The README's two indented commands: (run the main job, run the tests)."""
    main_job, tests = re.findall(r"^    (python3 -m venv .*)$", README, flags=re.M)
    return main_job, tests


def test_the_readme_is_short():
    """At most about 150 lines: the details live in docs/."""
    assert len(README.splitlines()) <= 150


def test_the_two_commands_are_the_ones_ci_runs():
    """The README's install is .ci/run's (which adds only -q, --no-compile and the extras the tests need), its test
    command is .ci/run's last line, and the main job launches a shipped launch file that loads."""
    main_job, tests = commands()
    install = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]'"
    assert main_job == f"{install} && .venv/bin/idcontrol launch launch/quadruped_trot.toml"
    assert tests.startswith(f"{install} && ")
    extras = "test,drake,franka,unitree,ros2"
    assert install.replace("pip install -e '.[test]'", f"pip install -q --no-compile -e '.[{extras}]'") in CI
    assert CI[-1] == tests.removeprefix(f"{install} && ")
    load_launch(REPO / "launch" / "quadruped_trot.toml")


def test_links_and_topic_pages_exist():
    """Every relative link of the README names an existing file, and each topic has its page in docs/."""
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links and [link for link in links if not link.startswith("http") and not (REPO / link).exists()] == []
    for topic in (
        "formulations",
        "simulators",
        "safety",
        "logs",
        "benchmarks",
        "experiments",
        "robots",
        "driver",
        "robustness",
    ):
        assert f"(docs/{topic}.md)" in README, topic


def test_the_tables_name_what_exists():
    """The formulations table names every formulation, the launch-files table only shipped files, and the README
    names every simulator kind."""
    table = README[README.index("## Formulations") : README.index("## Launch files")]
    assert set(re.findall(r"^\| `(\w+)` \|", table, flags=re.M)) == set(available_formulations())
    launch = README[README.index("## Launch files") : README.index("## Documentation")]
    files = re.findall(r"`(launch/[\w.]+)`", launch)
    assert len(files) >= 8 and [f for f in files if not (REPO / f).is_file()] == []
    for kind in available_simulators():
        assert f"`{kind}`" in README, kind
