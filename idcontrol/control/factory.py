"""Build the control core from launch settings: robot, world, controller, reference, safety."""

from __future__ import annotations

from dataclasses import replace

from idcontrol.contacts.stance import StanceSettings
from idcontrol.contacts.world import Environment, MovableBody
from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.core import ControlCore
from idcontrol.errors import ConfigError
from idcontrol.reference import make_reference
from idcontrol.robot.model import RobotModel
from idcontrol.settings import UNKNOWN_TERRAINS, LaunchConfig


def world_for(robot: RobotModel, config: LaunchConfig, mu: float) -> Environment:
    """The bridge's terrain (flat ground or its height map) under a floating base (:meth:`Environment.around`),
    plus, when the launch file asks, the robot file's movable bodies; all with friction ``mu``. A terrain the
    controller is not told of (bumps, a slope, a step: :data:`~idcontrol.settings.UNKNOWN_TERRAINS`) is flat
    ground to it."""
    objects = tuple(MovableBody(replace(o, mu=mu)) for o in robot.config.objects) if config.objects else ()
    b = config.bridge
    # estimated contacts find the ground themselves: the controller is told a flat floor, which they move
    unknown = b.terrain in UNKNOWN_TERRAINS or config.controller.contacts == "estimated"
    terrain = "flat" if unknown else b.terrain
    return Environment.around(
        robot.floating_base, mu, terrain, seed=b.terrain_seed, max_height=b.terrain_height, objects=objects
    )


def build_core(config: LaunchConfig, robot: RobotModel | None = None, *, quiet: bool = False) -> ControlCore:
    """The control core of ``config`` on ``robot`` (default: loaded from ``config.robot``); ``quiet``: see
    :class:`ControlCore`."""
    robot = robot or RobotModel(config.robot)
    if robot.nu == 0:  # a body the simulators can drop (a block) is a robot file, but nothing to control
        raise ConfigError(
            f"robot {robot.name!r} has no actuated joint (its URDF has no movable joint, or its robot "
            "file lists none): there is nothing for a joint-torque controller to drive"
        )
    c = config.controller
    controller = InverseDynamicsController(
        robot,
        world_for(robot, config, c.mu),
        c.formulation,
        dt=c.dt,
        formulation_options=config.formulation_options(c.formulation),
        penetration_tolerance=float(c.penetration_tolerance),
        activation_distance=c.activation_distance,
        consistent_contact_velocity=c.consistent_contact_velocity,
        contacts=c.contacts,
        stance=StanceSettings.from_table(c.stance, str(config.path)),
    )
    reference = make_reference(config.reference.name, robot, **config.reference.options)
    estimator = None
    settings = config.estimator.settings()
    if settings is not None:
        if not robot.floating_base:
            raise ConfigError(
                f"estimator.kind = {config.estimator.kind!r}: robot {robot.name!r} has no floating base to estimate"
            )
        from idcontrol.estimation import BaseEstimator

        estimator = BaseEstimator(robot, settings)
    core = ControlCore(
        controller, reference, config.safety, formulation_options=config.formulations, quiet=quiet, estimator=estimator
    )
    if c.gains:
        core.set_gains(**c.gains)  # ConfigError for a negative or non-finite gain
    return core
