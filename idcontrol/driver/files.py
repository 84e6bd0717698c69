"""Where the C++ driver client and its example live inside the installed package, and the MuJoCo model the
C++ example loads (built from the robot's URDF exactly as the Python bridge builds it)."""

from __future__ import annotations

from pathlib import Path

from idcontrol.errors import ConfigError

HERE = Path(__file__).resolve().parent


def include_dir() -> Path:
    """The folder to add to the include path: it holds ``idcontrol/driver.hpp``."""
    return HERE / "include"


def cmake_dir() -> Path:
    """The folder holding ``idcontrol_driverConfig.cmake`` (``find_package(idcontrol_driver)``)."""
    return HERE / "cmake"


def example_dir() -> Path:
    """The C++ example driver's CMake project (MuJoCo's C API simulating the quadruped)."""
    return HERE / "examples" / "cpp"


def mujoco_dir() -> Path:
    """The ``mujoco`` wheel's folder: ``include/mujoco/mujoco.h`` and ``libmujoco.so.*``."""
    import mujoco

    return Path(mujoco.__file__).resolve().parent


def write_mujoco_model(launch_file: str | Path, out: str | Path) -> Path:
    """Write the launch file's MuJoCo simulation (``[bridge] kind = "mujoco"``) as a binary MuJoCo model (.mjb) for
    a driver written against MuJoCo's C API: the bridge's model with one keyframe, ``initial``, the configuration
    the bridge starts from (``mj_resetDataKeyframe``). (Setting ``qpos0`` instead changes the dynamics: MuJoCo
    computes constants at ``qpos0`` when it compiles.)"""
    import mujoco

    from idcontrol.robot.model import RobotModel
    from idcontrol.settings import load_launch
    from idcontrol.sim.launch import simulator_for
    from idcontrol.sim.mujoco import MujocoSim

    config = load_launch(launch_file)
    if config.bridge.kind != "mujoco":
        raise ConfigError(f"{launch_file}: [bridge] kind is {config.bridge.kind!r}; a MuJoCo model needs 'mujoco'")
    sim = simulator_for(config, RobotModel(config.robot))
    assert isinstance(sim, MujocoSim)
    sim.spec.add_key(name="initial", qpos=sim.data.qpos.copy())
    model = sim.spec.compile()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    mujoco.mj_saveModel(model, str(out), None)
    return out
