"""Launch settings of the drake bridge, and the error without the extra (none of it needs Drake)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from idcontrol.errors import ConfigError
from idcontrol.settings import load_launch
from tests.conftest import REPO

STAND = REPO / "launch" / "quadruped_stand.toml"


def test_bridge_override_selects_drake_and_keeps_the_rest() -> None:
    """--bridge drake replaces bridge.kind only; an unknown kind fails naming the valid ones."""
    config = load_launch(STAND)
    drake = config.with_overrides(bridge="drake")
    assert drake.bridge.kind == "drake" and config.bridge.kind == "mujoco"
    assert drake.bridge.mu == config.bridge.mu and drake.controller == config.controller
    with pytest.raises(ConfigError, match="not one of"):
        config.with_overrides(bridge="gazebo")


def test_contact_keys_belong_to_the_drake_bridge(tmp_path) -> None:
    """[bridge] contact_stiffness / contact_relaxation_time are read for kind = "drake" only, and checked."""
    text = STAND.read_text()
    drake = tmp_path / "drake.toml"
    drake.write_text(
        text.replace('kind = "mujoco"', 'kind = "drake"\ncontact_stiffness = 2e5\ncontact_relaxation_time = 0.002')
    )
    b = load_launch(drake).bridge
    assert (b.kind, b.contact_stiffness, b.contact_relaxation_time) == ("drake", 2e5, 0.002)
    wrong_kind = tmp_path / "mujoco.toml"
    wrong_kind.write_text(text.replace('kind = "mujoco"', 'kind = "mujoco"\ncontact_stiffness = 2e5'))
    with pytest.raises(ConfigError, match="needs bridge.kind = 'drake'"):
        load_launch(wrong_kind)
    with pytest.raises(ConfigError, match="needs bridge.kind = 'drake'"):
        load_launch(drake).with_overrides(bridge="mujoco")
    for bad in (
        "contact_stiffness = 0.0",
        "contact_stiffness = inf",
        'contact_relaxation_time = "1 ms"',
        "contact_relaxation_time = -0.001",
    ):
        path = tmp_path / "bad.toml"
        path.write_text(text.replace('kind = "mujoco"', f'kind = "drake"\n{bad}'))
        with pytest.raises(ConfigError, match=bad.split(" ")[0]):
            load_launch(path)


def test_missing_extra_names_it() -> None:
    """Without Drake, asking for the drake bridge fails with an error that names the extra to install."""
    code = (
        "import sys; sys.modules['pydrake'] = None\n"  # as if the package were not installed
        "from idcontrol.tools.cli import main\n"
        "sys.exit(main(['bridge', 'launch/quadruped_stand.toml', '--bridge', 'drake']))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "pip install 'idcontrol[drake]'" in out.stderr


def test_the_shipped_drake_launch_file_loads() -> None:
    """launch/quadruped_stand_drake.toml selects Drake with the documented contact defaults, lock-step."""
    config = load_launch(REPO / "launch" / "quadruped_stand_drake.toml")
    b = config.bridge
    assert (b.kind, b.mode, b.contact_stiffness, b.contact_relaxation_time) == ("drake", "lockstep", 1e6, 1e-3)
    assert config.controller.consistent_contact_velocity and config.reference.name == "hold"
