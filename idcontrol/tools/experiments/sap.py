"""``idcontrol experiment sap``: SAP's own checks (Castro, Permenter and Han) reproduced with Drake.

A 1 kg particle on the ground at Δt = 1 ms, stepped by Drake's SAP solver (:func:`idcontrol.sim.drake.
sap_plant_config`): a 1 mm sphere with a rotational inertia of 1 kg·m², so its contact's rotational mobility
(r² / I = 1e−6 /kg) is negligible beside 1/m, on a rigid half-space, stiffness 1e12 N/m (far beyond what the
step resolves: SAP's near-rigid regime) and no dissipation (τ_d = 0). Two checks:

* **resting penetration**: the particle settles at a penetration that SAP's near-rigid regularization sets,
  Rₙ = β² w / (4π²) with w = ‖W‖_F / 3 = 1 / (√3 m): δ = β² g Δt² / (4π² √3). The paper's estimate
  β² g Δt² / (4π²) leaves out the √3 of the block norm;
* **stiction slip**: pushed sideways at its contact point with a fraction of μ m g, the particle "sticks" but
  creeps at the velocity of SAP's regularized friction, Rₜ γₜ with Rₜ = σ w, σ = 1e−3: v = σ f g Δt / √3 for
  f = F / (m g); the paper bounds it by μ σ g Δt.

Measured against the figures of the seed digest (``related_seeds.md``, 002: a numpy SAP and Drake agreed on
them); a check passes within 20 %.
"""

from __future__ import annotations

import math
import platform
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from idcontrol.contacts.world import GRAVITY

G = -float(GRAVITY[2])
#: The digest's figures (seed 002), Δt = 1 ms, μ = 1, β = 1, σ = 1e−3.
DIGEST_REST_PENETRATION_M = 1.4347e-7
DIGEST_SLIP_M_S = {0.5: 2.83e-6, 0.99: 5.6e-6}
#: The paper's stiction bound μ σ g Δt and its resting-penetration estimate β² g Δt² / (4π²), at Δt = 1 ms.
SIGMA = 1e-3
TOLERANCE = 0.2

PARTICLE_MASS = 1.0  # kg
PARTICLE_RADIUS = 1e-3  # m
PARTICLE_UNIT_INERTIA = 1.0  # m², so I = 1 kg·m²
RIGID_STIFFNESS = 1e12  # N/m per contact pair: near-rigid at 1 ms


@dataclass(frozen=True)
class SapCheck:
    """One check: what was measured, the digest's figure, the SAP model's formula and the verdict."""

    name: str
    unit: str
    measured: float
    expected: float  # the digest's figure
    model: float  # SAP's regularization, evaluated (see the module docstring)
    paper: float  # the paper's estimate or bound
    paper_is_bound: bool

    @property
    def ratio(self) -> float:
        return self.measured / self.expected

    @property
    def ok(self) -> bool:
        within = abs(self.ratio - 1.0) <= TOLERANCE
        return within and (self.measured < self.paper if self.paper_is_bound else True)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "ok": self.ok, "tolerance": TOLERANCE}


class Particle:
    """A particle resting on the ground in Drake (SAP), optionally pushed sideways at its contact point.

    push_fraction : horizontal force along +x as a fraction of m g, applied at the sphere's lowest point.
    """

    def __init__(self, dt: float = 1e-3, mu: float = 1.0, push_fraction: float = 0.0) -> None:
        from idcontrol.sim.drake import contact_properties, quiet_half_space_warning, require_drake, sap_plant_config

        require_drake()
        from pydrake.geometry import HalfSpace, Sphere
        from pydrake.math import RigidTransform
        from pydrake.multibody.math import SpatialForce
        from pydrake.multibody.plant import AddMultibodyPlant, ExternallyAppliedSpatialForce
        from pydrake.multibody.tree import SpatialInertia, UnitInertia
        from pydrake.systems.analysis import Simulator
        from pydrake.systems.framework import DiagramBuilder

        self.dt = dt
        builder = DiagramBuilder()
        plant, _ = AddMultibodyPlant(sap_plant_config(dt), builder)
        plant.mutable_gravity_field().set_gravity_vector(GRAVITY)
        unit = PARTICLE_UNIT_INERTIA
        body = plant.AddRigidBody("particle", SpatialInertia(PARTICLE_MASS, np.zeros(3), UnitInertia(unit, unit, unit)))
        material = contact_properties(2.0 * RIGID_STIFFNESS, 0.0, mu)  # two in series: RIGID_STIFFNESS, τ_d = 0
        plant.RegisterCollisionGeometry(plant.world_body(), RigidTransform(), HalfSpace(), "ground", material)
        plant.RegisterCollisionGeometry(body, RigidTransform(), Sphere(PARTICLE_RADIUS), "particle", material)
        plant.Finalize()
        self.plant = plant
        with quiet_half_space_warning():
            self.simulator = Simulator(builder.Build())
        self.context = plant.GetMyMutableContextFromRoot(self.simulator.get_mutable_context())
        plant.SetFreeBodyPose(self.context, body, RigidTransform([0.0, 0.0, PARTICLE_RADIUS]))  # touching: φ = 0
        push = ExternallyAppliedSpatialForce()
        push.body_index = body.index()
        push.p_BoBq_B = np.array([0.0, 0.0, -PARTICLE_RADIUS])  # at the contact point: no moment about it
        push.F_Bq_W = SpatialForce(np.zeros(3), np.array([push_fraction * PARTICLE_MASS * G, 0.0, 0.0]))
        plant.get_applied_spatial_force_input_port().FixValue(self.context, [push])
        self.simulator.Initialize()
        self.steps = 0

    def run(self, seconds: float) -> tuple[np.ndarray, np.ndarray]:
        """Step ``seconds``; (penetration m, sideways velocity m/s) after each step, each (steps,)."""
        n = int(round(seconds / self.dt))
        penetration, velocity = np.empty(n), np.empty(n)
        for i in range(n):
            self.steps += 1
            self.simulator.AdvanceTo(self.steps * self.dt)
            q, v = self.plant.GetPositions(self.context), self.plant.GetVelocities(self.context)
            penetration[i] = PARTICLE_RADIUS - q[6]  # free body: q = [quaternion w x y z, x y z]
            velocity[i] = v[3]  # v = [ω_W, v_W]
        return penetration, velocity


def settled(values: np.ndarray, seconds: float, dt: float) -> float:
    """The mean over the last quarter of the run (the particle settles within a few steps)."""
    tail = max(1, int(round(0.25 * seconds / dt)))
    return float(np.mean(values[-tail:]))


def run_checks(seconds: float = 1.0, dt: float = 1e-3, mu: float = 1.0) -> list[SapCheck]:
    """Run the particle ``seconds`` at rest, then pushed at 0.5 and 0.99 of the friction limit."""
    beta = 1.0
    w = 1.0 / (math.sqrt(3.0) * PARTICLE_MASS)  # ‖W‖_F / 3 for W = I₃ / m
    penetration, _ = Particle(dt, mu).run(seconds)
    checks = [
        SapCheck(
            "resting penetration",
            "m",
            settled(penetration, seconds, dt),
            DIGEST_REST_PENETRATION_M,
            beta**2 * w * PARTICLE_MASS * G * dt**2 / (4 * math.pi**2),
            beta**2 * G * dt**2 / (4 * math.pi**2),
            paper_is_bound=False,
        )
    ]
    for fraction, digest in DIGEST_SLIP_M_S.items():
        _, velocity = Particle(dt, mu, fraction * mu).run(seconds)
        checks.append(
            SapCheck(
                f"stiction slip, push {fraction:g} μ m g",
                "m/s",
                settled(velocity, seconds, dt),
                digest,
                SIGMA * w * fraction * mu * PARTICLE_MASS * G * dt,
                mu * SIGMA * G * dt,
                paper_is_bound=True,
            )
        )
    return checks


def format_checks(checks: list[SapCheck], dt: float) -> str:
    """The checks as a table: measured against the digest's figure, the SAP model and the paper's figure."""
    head = f"{'check':<38} {'measured':>10} {'expected':>10} {'ratio':>6} {'SAP model':>10} {'paper':>11}  ok"
    lines = [
        f"SAP checks with Drake (particle of {PARTICLE_MASS:g} kg on the ground, Δt = {dt * 1e3:g} ms, μ = 1, "
        f"near-rigid k = {RIGID_STIFFNESS:.0e} N/m, τ_d = 0)",
        head,
    ]
    for c in checks:
        paper = f"{'< ' if c.paper_is_bound else '≈ '}{c.paper:.3g}"
        lines.append(
            f"{c.name + ' (' + c.unit + ')':<38} {c.measured:>10.4g} {c.expected:>10.4g} {c.ratio:>6.3f} "
            f"{c.model:>10.4g} {paper:>11}  {'yes' if c.ok else 'NO'}"
        )
    lines.append(
        "expected: the seed digest's figures (a numpy SAP agreed with Drake); ok: within "
        f"{TOLERANCE:.0%} of it (and under the paper's bound for the slip). The SAP model uses "
        "w = ‖W‖_F/3 = 1/(√3 m); the paper's penetration estimate omits the √3."
    )
    return "\n".join(lines)


def report(checks: list[SapCheck], dt: float, seconds: float) -> dict[str, Any]:
    """The JSON object of ``idcontrol experiment sap``: the checks and what they ran on."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        drake_version = version("drake")
    except PackageNotFoundError:
        drake_version = "?"
    return {
        "checks": [c.as_dict() for c in checks],
        "all_ok": all(c.ok for c in checks),
        "dt_s": dt,
        "seconds": seconds,
        "particle": {
            "mass_kg": PARTICLE_MASS,
            "radius_m": PARTICLE_RADIUS,
            "unit_inertia_m2": PARTICLE_UNIT_INERTIA,
            "stiffness_N_m": RIGID_STIFFNESS,
            "relaxation_time_s": 0.0,
        },
        "drake": drake_version,
        "python": platform.python_version(),
    }
