"""Shared fixtures: real robot models, random contact problems with fixed seeds, each test's own runtime directory."""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator

# The controller runs single-threaded BLAS (as .ci/run and the daemon's processes do): set it before numpy loads,
# for this process and for the daemon and bridge processes the tests start.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest

from idcontrol.formulations.problem import ContactProblem
from idcontrol.robot.model import RobotModel
from idcontrol.security import RUNTIME_DIR_ENV

REPO = pathlib.Path(__file__).resolve().parents[1]


def private_runtime_dir() -> pathlib.Path:
    """A new private runtime directory, short enough for the socket paths in it (at most 107 bytes on Linux)."""
    return pathlib.Path(tempfile.mkdtemp(prefix="idc-"))


# The daemons a test run starts bind the launch files' private ipc:// endpoints and write their credentials in a
# runtime directory of this test process's own (module fixtures included), never the user's: a daemon the user runs
# meanwhile is not disturbed, and parallel test processes never meet.
_PROCESS_RUNTIME_DIR = private_runtime_dir()
os.environ[RUNTIME_DIR_ENV] = str(_PROCESS_RUNTIME_DIR)
atexit.register(shutil.rmtree, _PROCESS_RUNTIME_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def runtime_dir_of_the_test(monkeypatch) -> Iterator[pathlib.Path]:
    """Each test's own runtime directory (``$IDCONTROL_RUNTIME_DIR``), inherited by the processes it starts: the
    private endpoints of its daemons are its own, and a daemon an earlier test left behind cannot take them."""
    folder = private_runtime_dir()
    monkeypatch.setenv(RUNTIME_DIR_ENV, str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def random_spd(rng: np.random.Generator, m: int, cond: float = 1e3) -> np.ndarray:
    """A random symmetric positive definite matrix with condition number about ``cond``."""
    Q, _ = np.linalg.qr(rng.standard_normal((m, m)))
    return (Q * np.geomspace(1.0, cond, m)) @ Q.T / cond**0.5


def random_problem(
    rng: np.random.Generator,
    *,
    nb: int = 6,
    nu: int = 12,
    n: int = 4,
    mu: float | np.ndarray = 0.7,
    dt: float = 1e-3,
    phi_scale: float = 0.0,
) -> ContactProblem:
    """A floating-base-like problem: nb unactuated DoFs first, random rows, gravity-like load pushing into contacts."""
    m = nb + nu
    M = random_spd(rng, m, 1e2)
    N = rng.standard_normal((n, m))
    S = rng.standard_normal((n, m))
    T = rng.standard_normal((n, m))
    # gravity-like external force that the contacts must resist: push along −Nᵀ·1
    f_ext = -N.T @ np.abs(rng.standard_normal(n)) * 5.0 + 0.1 * rng.standard_normal(m)
    v = 0.01 * rng.standard_normal(m)
    return ContactProblem(
        dt=dt,
        M=M,
        f_ext=f_ext,
        v=v,
        actuated=np.arange(nb, m),
        unactuated=np.arange(nb),
        qd_des=v[nb:] + dt * rng.standard_normal(nu),
        N=N,
        S=S,
        T=T,
        phi=phi_scale * np.abs(rng.standard_normal(n)),
        mu=np.broadcast_to(np.asarray(mu, dtype=float), (n,)).copy(),
        contact_ids=tuple(f"c{i}" for i in range(n)),
    )


def solo12_urdf() -> pathlib.Path | None:
    """solo12.urdf from the example-robot-data package (a test extra), or None."""
    for sp in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]:
        p = pathlib.Path(sp) / "cmeel.prefix/share/example-robot-data/robots/solo_description/robots/solo12.urdf"
        if p.is_file():
            return p
    return None


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)


@pytest.fixture(scope="module")
def quadruped() -> RobotModel:
    """The shipped quadruped (one model per test module: ticks update its data in place)."""
    return RobotModel("quadruped")


@pytest.fixture(scope="module")
def arm() -> RobotModel:
    """The shipped arm with its box."""
    return RobotModel("arm")


def with_urdf(robot: RobotModel, folder: pathlib.Path, urdf: str, name: str = "edited.urdf") -> RobotModel:
    """``robot`` with its URDF replaced by the text ``urdf``: both files written in ``folder`` (its robot file
    otherwise as shipped), and the model loaded from them."""
    (folder / name).write_text(urdf)
    shipped = f'urdf = "{robot.config.urdf_path.name}"'
    (folder / "robot.toml").write_text(robot.config.path.read_text().replace(shipped, f'urdf = "{name}"'))
    return RobotModel(str(folder / "robot.toml"))


@pytest.fixture(scope="session")
def cpp_driver(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """The C++ example driver built with CMake against the installed client (find_package(idcontrol_driver)), and
    the MuJoCo model of launch/quadruped_stand.toml it loads: (binary, model)."""
    from idcontrol.driver import files

    if shutil.which("cmake") is None or not pathlib.Path("/usr/include/zmq.hpp").exists():
        pytest.skip("needs cmake and libzmq3-dev, cppzmq-dev, libmsgpack-cxx-dev (.ci/run installs them)")
    build = tmp_path_factory.mktemp("cpp")
    configure = ["cmake", "-S", str(files.example_dir()), "-B", str(build)]
    configure += [f"-Didcontrol_driver_DIR={files.cmake_dir()}", f"-DMUJOCO_DIR={files.mujoco_dir()}"]
    subprocess.run(configure, check=True, capture_output=True, timeout=300)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True, timeout=600)
    model = build / "quadruped.mjb"
    launch = pathlib.Path(__file__).resolve().parents[1] / "launch" / "quadruped_stand.toml"
    driver_files = [sys.executable, "-m", "idcontrol", "driver", "--mujoco-model", str(launch), str(model)]
    subprocess.run(driver_files, check=True, timeout=120)
    return build / "mujoco_driver", model
