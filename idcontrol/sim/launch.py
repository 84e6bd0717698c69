"""The simulator a launch file asks for (``[bridge]``: kind, friction, substeps, terrain, objects, impact sampling,
and the compliant simulators' contact)."""

from __future__ import annotations

from idcontrol.contacts.world import Environment
from idcontrol.robot.model import RobotModel
from idcontrol.settings import UNKNOWN_TERRAINS, LaunchConfig
from idcontrol.sim.base import Simulator, make_simulator
from idcontrol.sim.rigid import RigidSim
from idcontrol.sim.sensing import sensed


def simulator_for(config: LaunchConfig, robot: RobotModel, *, ess_engine: str = "auto") -> Simulator:
    """The launch file's simulator (``[bridge]`` kind, friction, substeps, terrain, Drake's contact stiffness and
    relaxation time, the ess contact; its movable bodies if ``objects``), behind its sensor and actuator models
    (``[bridge.sensors]``, ``[bridge.actuators]``: :mod:`idcontrol.sim.sensing`; none when both are ideal).
    ``ess_engine``: the ess simulator's integrator engine (:class:`~idcontrol.sim.ess.backend.EssSim`; "scipy" to
    measure against the compiled one)."""
    b = config.bridge
    sim = _back_end(config, robot, ess_engine)
    return sensed(sim, robot, b.sensors, b.actuators, period=config.controller.dt, substeps=b.substeps)


def _back_end(config: LaunchConfig, robot: RobotModel, ess_engine: str) -> Simulator:
    """The simulator of ``[bridge]`` itself (the truth)."""
    b = config.bridge
    timestep = config.controller.dt / b.substeps
    if b.kind == "rigid":
        # the controller's terrain (idcontrol.control.factory.world_for) with the simulator's friction
        world = Environment.around(robot.floating_base, b.mu, b.terrain, seed=b.terrain_seed,
                                   max_height=b.terrain_height)  # fmt: skip
        return RigidSim(robot, timestep=timestep, with_objects=config.objects, object_mu=b.mu,
                        environment=world, impact_sampling=b.impact_sampling,
                        impact_seed=b.impact_seed)  # fmt: skip
    if b.kind == "drake":
        from idcontrol.sim.drake import DrakeSim  # the optional extra: imported only when asked for

        return DrakeSim(robot, mu=b.mu, timestep=timestep, with_objects=config.objects, object_mu=b.mu,
                        stiffness=b.contact_stiffness, relaxation_time=b.contact_relaxation_time)  # fmt: skip
    if b.kind == "ess":  # its contact parameters, where the launch file gives them (else the back end's defaults)
        from idcontrol.sim.ess.backend import EssSim

        contact = {key: getattr(b, key) for key in b.ESS_KEYS if getattr(b, key) is not None}
        return EssSim(robot, mu=b.mu, timestep=timestep, with_objects=config.objects, object_mu=b.mu,
                      engine=ess_engine, **contact)  # fmt: skip
    if b.kind == "mujoco" and b.terrain in UNKNOWN_TERRAINS:
        from idcontrol.sim.mujoco import MujocoSim, Terrain

        terrain = Terrain(b.terrain, height=b.terrain_height, slope_deg=b.terrain_slope, seed=b.terrain_seed)
        return MujocoSim(robot, mu=b.mu, timestep=timestep, with_objects=config.objects, object_mu=b.mu,
                         terrain=terrain)
    return make_simulator(b.kind, robot, mu=b.mu, timestep=timestep, with_objects=config.objects, object_mu=b.mu)
