"""Contact detection and rows: the compiled detector against the shapes' own geometry, Pinocchio and numpy."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.contacts.detection import ContactDetector
from idcontrol.contacts.geometry import BoxShape, HalfSpace, HeightMap, tangent_basis
from idcontrol.contacts.world import Environment, MovableBody, ObjectState, Surface
from idcontrol.errors import NonFiniteError, ShapeError
from idcontrol.robot.model import RobotModel


def rotation_about(axis: np.ndarray, angle: float) -> np.ndarray:
    return pin.exp3(np.asarray(axis, dtype=float) / np.linalg.norm(axis) * angle)


def mixed_world() -> Environment:
    """Surfaces of every kind, half-spaces not first: a height map, the ground, a rotated box, a tilted plane."""
    terrain = HeightMap.bumps(size_m=1.2, spacing=0.02, max_height=0.02, n_bumps=12, seed=5, name="terrain")
    step = BoxShape(half_extents=np.array([0.15, 0.05, 0.03]), name="step")
    return Environment(
        [
            Surface(terrain, 0.5),
            Surface(HalfSpace(normal=np.array([0.0, 0.0, 1.0]), offset=-0.004, name="ground"), 0.8),
            Surface(step, 0.4, rotation_about([0.2, 0.1, 1.0], 0.7), np.array([0.15, -0.1, 0.0])),
            Surface(HalfSpace(normal=np.array([0.1, -0.05, 1.0]), offset=0.002, name="tilted"), 0.6),
        ]
    )


def random_state(robot: RobotModel, rng: np.random.Generator, spread: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """A perturbed standing configuration (base dropped by up to 2 cm) and a random velocity."""
    q = robot.standing_configuration()
    if robot.floating_base:
        q[:3] += rng.uniform(-0.02, 0.02, 3) - [0.0, 0.0, 0.01]
        rotation = pin.Quaternion(q[6], *q[3:6]).toRotationMatrix() @ rotation_about(rng.standard_normal(3), 0.1)
        quaternion = pin.Quaternion(rotation)
        q[3:7] = [quaternion.x, quaternion.y, quaternion.z, quaternion.w]
        q[7:] += spread * rng.standard_normal(robot.nq - 7)
    else:
        q += spread * rng.standard_normal(robot.nq)
    return q, rng.standard_normal(robot.nv)


def expected_contacts(detector: ContactDetector, objects: dict[str, ObjectState], allowed: np.ndarray) -> list:
    """(id, sphere, body, mu, phi, point, normal, s, t) per candidate, from each shape's own sphere_contact, in the
    documented order: half-spaces in surface order, the other surfaces, the movable bodies; spheres increasing."""
    robot, env = detector.robot, detector.environment
    centers, radii = robot.sphere_centers_in_world, robot.sphere_radii
    surfaces = [s for s in env.surfaces if isinstance(s.shape, HalfSpace)]
    surfaces += [s for s in env.surfaces if not isinstance(s.shape, HalfSpace)]
    out = []
    for surface in surfaces:
        for k in np.flatnonzero(allowed):
            if isinstance(surface.shape, BoxShape):
                g = surface.shape.sphere_contact(centers[k], radii[k], surface.rotation, surface.position)
            else:
                g = surface.shape.sphere_contact(centers[k], radii[k])
            if g.phi <= detector.margin:
                frame = tangent_basis(g.normal_in_world)
                out.append(((robot.sphere_names[k], surface.name), k, -1, surface.mu, g, *frame))
    for b, body in enumerate(env.objects):
        state = objects.get(body.name)
        for k in np.flatnonzero(allowed) if state is not None else ():
            g = body.shape.sphere_contact(centers[k], radii[k], state.rotation, state.position)
            if g.phi <= detector.margin:
                frame = tangent_basis(g.normal_in_world)
                out.append(((robot.sphere_names[k], body.name), k, b, body.mu, g, *frame))
    return out


def assert_matches(contacts, expected) -> None:
    assert contacts.ids == tuple(e[0] for e in expected)
    np.testing.assert_array_equal(contacts.sphere, [e[1] for e in expected])
    np.testing.assert_array_equal(contacts.body, [e[2] for e in expected])
    np.testing.assert_array_equal(contacts.mu, [e[3] for e in expected])
    if expected:
        np.testing.assert_allclose(contacts.phi, [e[4].phi for e in expected], atol=1e-14)
        np.testing.assert_allclose(contacts.points, [e[4].point_in_world for e in expected], atol=1e-14)
        np.testing.assert_allclose(contacts.normals, [e[4].normal_in_world for e in expected], atol=1e-14)
        np.testing.assert_allclose(contacts.tangents_s, [e[5] for e in expected], atol=1e-14)
        np.testing.assert_allclose(contacts.tangents_t, [e[6] for e in expected], atol=1e-14)


@pytest.mark.parametrize("margin", [0.005, 0.05])
def test_detect_equals_each_shapes_geometry_in_order(quadruped: RobotModel, margin: float) -> None:
    """On a world of a height map, two half-spaces and a rotated box, with random masks, the detector's contacts
    are the shapes' own sphere_contact results within the margin, in the documented order, with their tangents,
    identities, μ and bodies."""
    rng = np.random.default_rng(51)
    detector = ContactDetector(quadruped, mixed_world(), margin=margin)
    seen = set()
    for trial in range(40):
        q, v = random_state(quadruped, rng)
        quadruped.update(q, v)
        allowed = np.ones(4, dtype=bool) if trial % 2 else rng.uniform(size=4) < 0.7
        contacts = detector.detect(None, None if trial % 2 else allowed)
        expected = expected_contacts(detector, {}, allowed)
        assert_matches(contacts, expected)
        seen.update(i[1] for i in contacts.ids)
    assert seen == {"terrain", "ground", "step", "tilted"}


def arm_with_box(arm: RobotModel) -> tuple[ContactDetector, MovableBody]:
    body = MovableBody(arm.config.objects[0])
    environment = Environment.flat_ground(0.9, (body,))
    return ContactDetector(arm, environment, margin=0.02), body


def box_state(body: MovableBody, rng: np.random.Generator) -> ObjectState:
    """The box near its initial pose, turned a little, moving."""
    state = body.initial_state()
    rotation = rotation_about(rng.standard_normal(3), 0.15) @ state.rotation
    quaternion = pin.Quaternion(rotation)
    return ObjectState(
        state.position + rng.uniform(-0.005, 0.005, 3),
        np.array([quaternion.x, quaternion.y, quaternion.z, quaternion.w]),
        rng.standard_normal(3),
        rng.standard_normal(3),
    )


def test_detect_equals_each_shapes_geometry_with_a_movable_body(arm: RobotModel) -> None:
    """The arm's fingers against the ground and its moved, turned box: the contacts are the shapes' own results,
    the box's after the ground's, with body 0 and the box's μ; without the box's pose there are none on it."""
    rng = np.random.default_rng(52)
    detector, body = arm_with_box(arm)
    on_box = 0
    for _ in range(20):
        q, v = random_state(arm, rng, spread=0.01)
        arm.update(q, v)
        objects = {body.name: box_state(body, rng)}
        contacts = detector.detect(objects)
        assert_matches(contacts, expected_contacts(detector, objects, np.ones(len(arm.sphere_radii), dtype=bool)))
        on_box += int((contacts.body == 0).sum())
        assert (detector.detect(None).body == 0).sum() == 0
    assert on_box >= 40


def point_velocity_by_differences(
    robot: RobotModel, q: np.ndarray, v: np.ndarray, sphere: int, point: np.ndarray, h: float = 1e-6
) -> np.ndarray:
    """d/dt of the robot point at ``point`` (fixed in the sphere's frame) along q̇ = v, central differences."""
    model, data = robot.model, robot.model.createData()
    frame = int(robot.sphere_frame_ids[sphere])
    pin.framesForwardKinematics(model, data, q)
    local = data.oMf[frame].actInv(point)
    moved = []
    for sign in (1.0, -1.0):
        pin.framesForwardKinematics(model, data, pin.integrate(model, q, sign * h * v))
        moved.append(data.oMf[frame].act(local))
    return (moved[0] - moved[1]) / (2 * h)


def body_point_velocity_by_differences(state: ObjectState, point: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """d/dt of the body point at ``point`` for the body's [v_com; ω] (world), central differences."""
    arm = point - state.position
    moved = [
        state.position + s * h * state.linear_velocity + pin.exp3(s * h * state.angular_velocity) @ arm
        for s in (1.0, -1.0)
    ]
    return (moved[0] - moved[1]) / (2 * h)


def test_rows_are_relative_point_velocities_by_finite_differences(quadruped: RobotModel, arm: RobotModel) -> None:
    """[N; S; T] v is n̂, ŝ, t̂ · (robot point velocity − the touched body's point velocity), the velocities by
    central differences of Pinocchio's forward kinematics and of the box's rigid motion (1e-6 relative), for
    detect_rows and rows alike."""
    rng = np.random.default_rng(53)
    box_detector, body = arm_with_box(arm)
    cases = [(quadruped, ContactDetector(quadruped, mixed_world(), margin=0.05), None)] * 6
    cases += [(arm, box_detector, body)] * 6
    checked = 0
    for robot, detector, movable in cases:
        q, v = random_state(robot, rng, spread=0.01 if movable else 0.15)
        robot.update(q, v)
        objects = {movable.name: box_state(movable, rng)} if movable else {}
        contacts, N, S, T = detector.detect_rows(objects)
        v_all = np.concatenate([v, *[np.r_[s.linear_velocity, s.angular_velocity] for s in objects.values()]])
        for rows in ((N, S, T), detector.rows(contacts, objects)):
            for i in range(contacts.n):
                velocity = point_velocity_by_differences(robot, q, v, contacts.sphere[i], contacts.points[i])
                if contacts.body[i] >= 0:
                    velocity -= body_point_velocity_by_differences(objects[movable.name], contacts.points[i])
                scale = max(1.0, np.linalg.norm(velocity))
                for d, row in zip((contacts.normals, contacts.tangents_s, contacts.tangents_t), rows, strict=True):
                    assert row[i] @ v_all == pytest.approx(d[i] @ velocity, abs=1e-6 * scale)
                checked += 1
    assert checked >= 60


def test_detect_rows_equals_detect_then_rows_and_keeps_the_predicted_gaps(quadruped: RobotModel, arm: RobotModel):
    """detect_rows gives detect's contacts and rows' N, S, T; with an activation distance it keeps exactly the
    contacts whose φ + Δt N v is within it (computed with numpy from detect and rows), in order, with their ids."""
    rng = np.random.default_rng(54)
    box_detector, body = arm_with_box(arm)
    cases = [(quadruped, ContactDetector(quadruped, mixed_world(), margin=0.05), None)] * 10
    cases += [(arm, box_detector, body)] * 10
    dropped = kept = 0
    for robot, detector, movable in cases:
        q, v = random_state(robot, rng, spread=0.01 if movable else 0.15)
        robot.update(q, v)
        objects = {movable.name: box_state(movable, rng)} if movable else None
        contacts = detector.detect(objects)
        N, S, T = detector.rows(contacts, objects)
        fused, N2, S2, T2 = detector.detect_rows(objects)
        assert fused.ids == contacts.ids
        for name in ("phi", "points", "normals", "tangents_s", "tangents_t", "mu", "sphere", "body"):
            np.testing.assert_array_equal(getattr(fused, name), getattr(contacts, name))
        for a, b in ((N, N2), (S, S2), (T, T2)):
            np.testing.assert_array_equal(a, b)
        v_all = (
            np.concatenate([v, np.r_[objects[movable.name].linear_velocity, objects[movable.name].angular_velocity]])
            if movable
            else v
        )
        dt = 1e-3
        gap = contacts.phi + dt * (N @ v_all)
        activation = float(np.median(gap)) if contacts.n else 0.0
        keep = np.flatnonzero(gap <= activation)
        active, Na, Sa, Ta = detector.detect_rows(objects, velocity=v_all, dt=dt, activation_distance=activation)
        expected = contacts.subset(keep)
        assert active.ids == expected.ids
        np.testing.assert_array_equal(active.sphere, expected.sphere)
        np.testing.assert_array_equal(active.body, expected.body)
        np.testing.assert_allclose(active.phi, expected.phi, atol=0)
        np.testing.assert_allclose(active.points, expected.points, atol=0)
        for a, b in ((Na, N[keep]), (Sa, S[keep]), (Ta, T[keep])):
            np.testing.assert_allclose(a, b, atol=0)
        dropped += contacts.n - keep.size
        kept += keep.size
    assert dropped > 20 and kept > 20


def test_sample_rings_lie_on_the_contact_plane(quadruped: RobotModel) -> None:
    """With samples_per_contact = 6 each closest-point contact becomes 6 with ids (sphere, surface, j), its φ,
    normal and tangents, at sample_radius × r from it along (cos, sin) of 2πj/6 in (ŝ, t̂)."""
    rng = np.random.default_rng(55)
    single = ContactDetector(quadruped, mixed_world(), margin=0.05)
    ring = ContactDetector(quadruped, mixed_world(), margin=0.05, samples_per_contact=6, sample_radius=0.4)
    for _ in range(10):
        quadruped.update(*random_state(quadruped, rng))
        base, N1, _, _ = single.detect_rows()
        many, N6, S6, T6 = ring.detect_rows()
        assert many.n == 6 * base.n
        assert many.ids == tuple((*i, j) for i in base.ids for j in range(6))
        rep = np.repeat(np.arange(base.n), 6)
        for name in ("phi", "normals", "tangents_s", "tangents_t", "mu", "sphere", "body"):
            np.testing.assert_array_equal(getattr(many, name), getattr(base, name)[rep])
        angles = (2 * np.pi * np.tile(np.arange(6), base.n) / 6)[:, None]
        radius = 0.4 * quadruped.sphere_radii[many.sphere][:, None]
        offset = radius * (np.cos(angles) * many.tangents_s + np.sin(angles) * many.tangents_t)
        np.testing.assert_allclose(many.points, base.points[rep] + offset, atol=1e-15)
        np.testing.assert_array_equal(N6, ring.rows(many)[0])


def test_contact_set_arrays_shared_and_fresh(quadruped: RobotModel) -> None:
    """μ and bodies are read-only and shared by ticks with the same contacts; spheres and the geometry are fresh
    writable arrays; a robot far above the ground gets an empty set of the right shapes."""
    detector = ContactDetector(quadruped, Environment.flat_ground(0.7))
    q = quadruped.standing_configuration()
    quadruped.update(q, np.zeros(quadruped.nv))
    first, N, _, _ = detector.detect_rows()
    second = detector.detect()
    assert first.n == 4 and first.mu is second.mu and first.body is second.body
    assert not first.mu.flags.writeable and not first.body.flags.writeable
    assert first.sphere is not second.sphere and first.sphere.flags.writeable and first.points.flags.writeable
    q[2] += 1.0
    quadruped.update(q, np.zeros(quadruped.nv))
    empty, N, S, T = detector.detect_rows()
    assert empty.ids == () and empty.phi.shape == (0,) and empty.points.shape == (0, 3)
    assert empty.sphere.dtype == np.intp and empty.body.dtype == np.intp and N.shape == (0, quadruped.nv)


def test_detect_rejects_bad_masks_poses_and_velocities(arm: RobotModel) -> None:
    """A mask of the wrong length, a non-finite box pose and a velocity of the wrong length raise the package's
    errors; a mask given as a list works."""
    detector, body = arm_with_box(arm)
    arm.update(arm.standing_configuration(), np.zeros(arm.nv))
    state = body.initial_state()
    k = len(arm.sphere_radii)
    with pytest.raises(ShapeError, match="allowed"):
        detector.detect({body.name: state}, np.ones(k + 1, dtype=bool))
    assert detector.detect({body.name: state}, [True] * k).ids == detector.detect({body.name: state}).ids
    bad = ObjectState(np.array([0.0, np.nan, 0.1]), state.orientation_xyzw)
    with pytest.raises(NonFiniteError, match=body.name):
        detector.detect({body.name: bad})
    with pytest.raises(ShapeError, match="velocity"):
        detector.detect_rows({body.name: state}, velocity=np.zeros(3), dt=1e-3, activation_distance=0.0)
