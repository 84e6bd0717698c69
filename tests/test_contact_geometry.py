"""Closest-feature contact geometry: half-space, height map, oriented box, tangent frames."""

from __future__ import annotations

import math

import numpy as np
import pytest

from idcontrol.contacts.geometry import (
    BoxShape,
    ContactGeometry,
    HalfSpace,
    HeightMap,
    tangent_bases,
    tangent_basis,
)
from idcontrol.errors import ConfigError, InputError, NonFiniteError, ShapeError

COS20 = math.cos(math.radians(20.0))
COS40 = math.cos(math.radians(40.0))


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def fd_gradient(phi_of, c: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central-difference gradient of a scalar function of a (3,) point."""
    return np.array([(phi_of(c + h * e) - phi_of(c - h * e)) / (2 * h) for e in np.eye(3)])


def assert_frame(n: np.ndarray, s: np.ndarray, t: np.ndarray, tol: float = 1e-12) -> None:
    """(s, t, n) rows are orthonormal and right-handed (s × t = n)."""
    frame = np.stack([s, t, n], axis=-2)  # (..., 3, 3)
    eye = np.broadcast_to(np.eye(3), frame.shape)
    np.testing.assert_allclose(frame @ np.swapaxes(frame, -1, -2), eye, atol=tol)
    np.testing.assert_allclose(np.cross(s, t), n, atol=tol)


# ---------------------------------------------------------------------------------------------------------------------
# half-space


def test_halfspace_exact_for_random_tilted_planes():
    """Half-space phi, normal and closest-point midpoint equal the closed-form plane result, tilted planes too."""
    rng = np.random.default_rng(1)
    for _ in range(50):
        raw = rng.standard_normal(3) * rng.uniform(0.1, 5.0)
        offset = rng.uniform(-1, 1)
        plane = HalfSpace(normal=raw, offset=offset, name="p")
        n = unit(raw)
        off = offset / np.linalg.norm(raw)  # same set {x : raw·x >= offset}
        c = rng.uniform(-1, 1, 3)
        r = rng.uniform(0.0, 0.1)
        g = plane.sphere_contact(c, r)
        d = n @ c - off
        assert isinstance(g, ContactGeometry)
        assert g.phi == pytest.approx(d - r, abs=1e-14)
        np.testing.assert_allclose(g.normal_in_world, n, atol=1e-15)
        on_plane = c - d * n
        assert n @ on_plane == pytest.approx(off, abs=1e-14)
        np.testing.assert_allclose(g.point_in_world, 0.5 * (on_plane + c - r * n), atol=1e-14)


def test_halfspace_vectorized_matches_scalar():
    """HalfSpace.sphere_contacts equals sphere_contact row by row."""
    rng = np.random.default_rng(2)
    plane = HalfSpace(normal=np.array([0.3, -0.2, 1.0]), offset=0.05)
    centers = rng.uniform(-0.5, 0.5, (7, 3))
    radii = rng.uniform(0.0, 0.05, 7)
    phi, points, normals = plane.sphere_contacts(centers, radii)
    assert phi.shape == (7,) and points.shape == (7, 3) and normals.shape == (7, 3)
    for k in range(7):
        g = plane.sphere_contact(centers[k], radii[k])
        assert phi[k] == pytest.approx(g.phi, abs=1e-15)
        np.testing.assert_allclose(points[k], g.point_in_world, atol=1e-15)
        np.testing.assert_allclose(normals[k], g.normal_in_world, atol=0)
    empty = plane.sphere_contacts(np.zeros((0, 3)), np.zeros(0))
    assert [a.shape for a in empty] == [(0,), (0, 3), (0, 3)]


def test_ground_contact_frame_is_world_axes():
    """Ground z >= 0 gives n = +z, phi = z − r, midpoint (x, y, (z − r)/2), and tangents s = +x, t = +y exactly."""
    ground = HalfSpace(normal=np.array([0.0, 0.0, 1.0]))
    g = ground.sphere_contact(np.array([0.3, -0.2, 0.05]), 0.02)
    assert g.phi == pytest.approx(0.03, abs=1e-15)
    np.testing.assert_array_equal(g.normal_in_world, [0.0, 0.0, 1.0])
    np.testing.assert_allclose(g.point_in_world, [0.3, -0.2, 0.015], atol=1e-15)
    s, t = tangent_basis(g.normal_in_world)
    np.testing.assert_array_equal(s, [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(t, [0.0, 1.0, 0.0])
    s2, t2 = g.tangents_in_world
    np.testing.assert_array_equal(s2, s)
    np.testing.assert_array_equal(t2, t)


# ---------------------------------------------------------------------------------------------------------------------
# tangent frames


def _awkward_normals(rng: np.random.Generator) -> np.ndarray:
    axes = np.vstack([np.eye(3), -np.eye(3)])
    near_axes = unit(axes + 1e-9 * rng.standard_normal(axes.shape))
    band = unit(np.column_stack([np.full(20, COS40 + 0.05), rng.standard_normal((20, 2)) * 0.3]))
    return np.vstack([axes, near_axes, band, unit(rng.standard_normal((500, 3)))])


def test_tangent_frame_orthonormal_right_handed():
    """(s, t, n) is orthonormal and right-handed for random normals, the axes and the fallback band."""
    normals = _awkward_normals(np.random.default_rng(3))
    s, t = tangent_bases(normals)
    assert s.shape == t.shape == normals.shape
    assert_frame(normals, s, t)


def test_tangent_rule_projected_x_then_projected_y():
    """s is the normalized projection of world x beyond 40° from ±x; t is that of world y within 20° of ±x."""
    normals = _awkward_normals(np.random.default_rng(4))
    s, t = tangent_bases(normals)
    far = np.abs(normals[:, 0]) <= COS40
    near = np.abs(normals[:, 0]) >= COS20
    assert far.sum() > 100 and near.sum() >= 4
    x_proj = np.array([1.0, 0.0, 0.0]) - normals[far, :1] * normals[far]
    np.testing.assert_allclose(s[far], unit(x_proj), atol=1e-12)
    y_proj = np.array([0.0, 1.0, 0.0]) - normals[near, 1:2] * normals[near]
    np.testing.assert_allclose(t[near], unit(y_proj), atol=1e-12)


def test_tangent_basis_deterministic_and_scale_invariant():
    """tangent_basis is deterministic, matches tangent_bases row by row and ignores the normal's length."""
    normals = _awkward_normals(np.random.default_rng(5))
    s, t = tangent_bases(normals)
    s_again, t_again = tangent_bases(normals.copy())
    np.testing.assert_array_equal(s, s_again)
    np.testing.assert_array_equal(t, t_again)
    for k in range(0, len(normals), 37):
        sk, tk = tangent_basis(normals[k])
        np.testing.assert_allclose(sk, s[k], atol=1e-15)
        np.testing.assert_allclose(tk, t[k], atol=1e-15)
        sk3, tk3 = tangent_basis(3.7 * normals[k])
        np.testing.assert_allclose(sk3, s[k], atol=1e-14)
        np.testing.assert_allclose(tk3, t[k], atol=1e-14)


def test_tangent_basis_is_lipschitz_away_from_the_documented_cut():
    """A small change of n changes (s, t) proportionally: ≤ 8 |Δn| for n_z >= 0, ≤ 16 |Δn| elsewhere off the cut."""
    rng = np.random.default_rng(6)
    normals = unit(rng.standard_normal((20000, 3)))
    # the cut: n_y = 0, n_z < 0 with |n_x| in the blend band; stay 0.01 away from it
    ax = np.abs(normals[:, 0])
    near_cut = (normals[:, 2] < 0.01) & (np.abs(normals[:, 1]) < 0.01) & (ax > COS40 - 0.01) & (ax < COS20 + 0.01)
    normals = normals[~near_cut]
    perturbed = unit(normals + 1e-6 * rng.standard_normal(normals.shape))
    dn = np.linalg.norm(perturbed - normals, axis=1)
    s0, t0 = tangent_bases(normals)
    s1, t1 = tangent_bases(perturbed)
    ratio = np.maximum(np.linalg.norm(s1 - s0, axis=1), np.linalg.norm(t1 - t0, axis=1)) / dn
    upper = normals[:, 2] >= 0.0
    assert ratio[upper].max() < 8.0
    assert ratio.max() < 16.0


def test_tangent_basis_smooth_across_the_blend_band():
    """Walking n from 50° to 10° off +x in small steps never jumps (s, t) (upper hemisphere)."""
    angles = np.radians(np.linspace(50.0, 10.0, 4001))
    for azimuth in np.radians([10.0, 45.0, 90.0, 135.0, 170.0]):  # around the x axis; 0 and 180 deg are n_z = 0
        normals = np.column_stack([np.cos(angles), np.sin(angles) * np.cos(azimuth), np.sin(angles) * np.sin(azimuth)])
        s, t = tangent_bases(normals)
        step_n = np.linalg.norm(np.diff(normals, axis=0), axis=1)
        assert (np.linalg.norm(np.diff(s, axis=0), axis=1) / step_n).max() < 8.0
        assert (np.linalg.norm(np.diff(t, axis=0), axis=1) / step_n).max() < 8.0


# ---------------------------------------------------------------------------------------------------------------------
# height map


def _plane_map(a: float, b: float, c0: float) -> HeightMap:
    spacing = 0.01
    xs = -0.5 + spacing * np.arange(101)
    X, Y = np.meshgrid(xs, xs, indexing="ij")
    return HeightMap(origin_xy=np.array([-0.5, -0.5]), spacing=spacing, heights=a * X + b * Y + c0)


def test_heightmap_interpolates_nodes_and_holds_border():
    """Heights equal the grid at nodes, are bilinear inside, and hold the border value (zero slope) outside."""
    heights = np.array([[0.0, 1.0, 2.0], [3.0, 5.0, 4.0]])
    hm = HeightMap(origin_xy=np.array([1.0, 2.0]), spacing=0.5, heights=heights)
    for i in range(2):
        for j in range(3):
            assert hm.height(1.0 + 0.5 * i, 2.0 + 0.5 * j) == pytest.approx(heights[i, j], abs=1e-15)
    assert hm.height(1.25, 2.25) == pytest.approx(np.mean([0.0, 1.0, 3.0, 5.0]), abs=1e-15)
    assert hm.height(-7.0, 2.25) == pytest.approx(0.5, abs=1e-15)
    assert hm.gradient(-7.0, 2.25) == pytest.approx((0.0, 2.0), abs=1e-14)
    assert hm.height(9.0, 99.0) == pytest.approx(4.0, abs=1e-15)
    assert hm.gradient(9.0, 99.0) == (0.0, 0.0)
    assert hm.gradient(1.25, 2.25) == pytest.approx(((8.0 - 1.0) / 2 / 0.5, (6.0 - 3.0) / 2 / 0.5), abs=1e-14)
    np.testing.assert_allclose(hm.heights_at(np.array([1.25, 9.0]), np.array([2.25, 99.0])), [2.25, 4.0])


def test_flat_heightmap_equals_halfspace():
    """A flat height map at z = 0.1 gives the same contact as the half-space z >= 0.1."""
    rng = np.random.default_rng(7)
    hm = HeightMap(origin_xy=np.array([-1.0, -1.0]), spacing=0.1, heights=np.full((21, 21), 0.1))
    plane = HalfSpace(normal=np.array([0.0, 0.0, 1.0]), offset=0.1)
    for _ in range(20):
        c = np.array([*rng.uniform(-1.5, 1.5, 2), rng.uniform(0.05, 0.2)])
        g, e = hm.sphere_contact(c, 0.03), plane.sphere_contact(c, 0.03)
        assert g.phi == pytest.approx(e.phi, abs=1e-14)
        np.testing.assert_allclose(g.normal_in_world, e.normal_in_world, atol=1e-14)
        np.testing.assert_allclose(g.point_in_world, e.point_in_world, atol=1e-14)


def test_tilted_plane_heightmap_equals_exact_plane():
    """On a linear height map, phi, normal and point equal the exact tilted-plane result to 1e-9, inside or not."""
    rng = np.random.default_rng(8)
    a, b, c0 = 0.3, -0.15, 0.02
    hm = _plane_map(a, b, c0)
    plane = HalfSpace(normal=np.array([-a, -b, 1.0]), offset=c0)
    for _ in range(30):
        xy = rng.uniform(-0.3, 0.3, 2)
        c = np.array([*xy, a * xy[0] + b * xy[1] + c0 + rng.uniform(-0.03, 0.08)])
        r = rng.uniform(0.01, 0.03)
        g, e = hm.sphere_contact(c, r), plane.sphere_contact(c, r)
        assert g.phi == pytest.approx(e.phi, abs=1e-9)
        np.testing.assert_allclose(g.normal_in_world, e.normal_in_world, atol=1e-9)
        np.testing.assert_allclose(g.point_in_world, e.point_in_world, atol=1e-9)


def _brute_force_phi(hm: HeightMap, c: np.ndarray, r: float, step: float = 5e-4) -> float:
    """Signed min distance from c to densely sampled terrain points (refined around the best sample), minus r."""
    vertical = abs(c[2] - hm.height(c[0], c[1]))
    half = vertical + 2 * step
    axis = np.arange(-half, half + step, step)
    X, Y = np.meshgrid(c[0] + axis, c[1] + axis, indexing="ij")
    dist = np.sqrt((X - c[0]) ** 2 + (Y - c[1]) ** 2 + (hm.heights_at(X, Y) - c[2]) ** 2)
    k = np.argmin(dist)
    fine = np.linspace(-2 * step, 2 * step, 201)
    X, Y = np.meshgrid(X.flat[k] + fine, Y.flat[k] + fine, indexing="ij")
    dist = np.sqrt((X - c[0]) ** 2 + (Y - c[1]) ** 2 + (hm.heights_at(X, Y) - c[2]) ** 2).min()
    return (dist if c[2] >= hm.height(c[0], c[1]) else -dist) - r


@pytest.fixture(scope="module")
def bumps() -> HeightMap:
    return HeightMap.bumps(size_m=0.8, spacing=0.005, max_height=0.03, n_bumps=15, seed=11)


def test_bumps_are_bounded_smooth_and_seeded(bumps):
    """bumps() is deterministic per seed, 0 <= h <= max_height with the maximum reached, centred on the origin."""
    assert bumps.heights.min() >= 0.0
    assert bumps.heights.max() <= 0.03 + 1e-15
    assert bumps.heights.max() > 0.015
    again = HeightMap.bumps(size_m=0.8, spacing=0.005, max_height=0.03, n_bumps=15, seed=11)
    np.testing.assert_array_equal(again.heights, bumps.heights)
    other = HeightMap.bumps(size_m=0.8, spacing=0.005, max_height=0.03, n_bumps=15, seed=12)
    assert not np.array_equal(other.heights, bumps.heights)
    np.testing.assert_allclose(bumps.origin_xy, [-0.4, -0.4])
    assert bumps.heights.shape == (161, 161)
    # smooth: the slope between neighbouring nodes stays moderate
    assert np.abs(np.diff(bumps.heights, axis=0)).max() / 0.005 < 1.0


def test_bumps_phi_matches_brute_force_and_normal_is_perpendicular(bumps):
    """On bumps, phi matches dense brute-force sampling to 1e-4 m and n is perpendicular to the surface tangents."""
    rng = np.random.default_rng(12)
    r = 0.02
    perpendicular_checked = 0
    for _ in range(25):
        xy = rng.uniform(-0.3, 0.3, 2)
        c = np.array([*xy, bumps.height(*xy) + rng.uniform(-0.005, 0.04)])
        g = bumps.sphere_contact(c, r)
        assert abs(g.phi - _brute_force_phi(bumps, c, r)) < 1e-4
        np.testing.assert_allclose(np.linalg.norm(g.normal_in_world), 1.0, atol=1e-14)
        assert g.normal_in_world[2] > 0.0
        # terrain point from the midpoint; it lies on the surface
        p = 2.0 * g.point_in_world - (c - r * g.normal_in_world)
        assert p[2] == pytest.approx(bumps.height(p[0], p[1]), abs=1e-12)
        u = (p[:2] - bumps.origin_xy) / bumps.spacing
        frac = u - np.floor(u)
        if np.all(np.minimum(frac, 1 - frac) > 1e-6):  # interior of a cell: tangents are defined
            hx, hy = bumps.gradient(p[0], p[1])
            assert abs(g.normal_in_world @ np.array([1.0, 0.0, hx])) < 1e-7
            assert abs(g.normal_in_world @ np.array([0.0, 1.0, hy])) < 1e-7
            perpendicular_checked += 1
    assert perpendicular_checked >= 10


def test_heightmap_ridge_and_valley_creases_are_exact():
    """On a roof (ridge) the closest point may sit on the crease: phi and n match the exact wedge result."""
    spacing = 0.01
    xs = -0.5 + spacing * np.arange(101)  # x = 0 is a grid line
    X, _ = np.meshgrid(xs, xs, indexing="ij")
    roof = HeightMap(origin_xy=np.array([-0.5, -0.5]), spacing=spacing, heights=0.1 - 0.5 * np.abs(X))
    r = 0.02
    # above the ridge, inside the wedge |x| <= 0.5 (z − 0.1): closest point on the crease (0, y, 0.1)
    for c in (np.array([0.01, 0.03, 0.15]), np.array([-0.02, -0.1, 0.2]), np.array([0.0, 0.0, 0.12])):
        g = roof.sphere_contact(c, r)
        offset = c - np.array([0.0, c[1], 0.1])
        assert g.phi == pytest.approx(np.linalg.norm(offset) - r, abs=1e-12)
        np.testing.assert_allclose(g.normal_in_world, unit(offset), atol=1e-12)
        grad = fd_gradient(lambda x: roof.sphere_contact(x, r).phi, c)
        np.testing.assert_allclose(grad, g.normal_in_world, atol=1e-6)
    # outside the wedge: closest point on the face z = 0.1 − 0.5 x
    c = np.array([0.05, 0.03, 0.15])
    face = HalfSpace(normal=np.array([0.5, 0.0, 1.0]), offset=0.1).sphere_contact(c, r)
    g = roof.sphere_contact(c, r)
    assert g.phi == pytest.approx(face.phi, abs=1e-12)
    np.testing.assert_allclose(g.normal_in_world, face.normal_in_world, atol=1e-12)
    # valley h = 0.5 |x|: the nearer face wins
    valley = HeightMap(origin_xy=np.array([-0.5, -0.5]), spacing=spacing, heights=0.5 * np.abs(X))
    c = np.array([0.01, 0.0, 0.1])
    face = HalfSpace(normal=np.array([-0.5, 0.0, 1.0]), offset=0.0).sphere_contact(c, r)
    g = valley.sphere_contact(c, r)
    assert g.phi == pytest.approx(face.phi, abs=1e-12)
    np.testing.assert_allclose(g.normal_in_world, face.normal_in_world, atol=1e-12)


def test_heightmap_vectorized_matches_scalar(bumps):
    """HeightMap.sphere_contacts equals sphere_contact row by row."""
    rng = np.random.default_rng(13)
    centers = np.column_stack([rng.uniform(-0.2, 0.2, (5, 2)), rng.uniform(0.0, 0.05, 5)])
    radii = np.full(5, 0.02)
    phi, points, normals = bumps.sphere_contacts(centers, radii)
    for k in range(5):
        g = bumps.sphere_contact(centers[k], radii[k])
        assert phi[k] == g.phi
        np.testing.assert_array_equal(points[k], g.point_in_world)
        np.testing.assert_array_equal(normals[k], g.normal_in_world)


# ---------------------------------------------------------------------------------------------------------------------
# box

HALF = np.array([0.1, 0.06, 0.04])


def _box_distance(p_in_box: np.ndarray, half: np.ndarray) -> float:
    """Exact distance from an outside point to an axis-aligned box: ‖max(|p| − h, 0)‖."""
    return float(np.linalg.norm(np.maximum(np.abs(p_in_box) - half, 0.0)))


def _box_surface_samples(half: np.ndarray, step: float = 1e-3) -> np.ndarray:
    """Dense samples of an axis-aligned box surface, edges and corners included."""
    grids = [np.linspace(-h, h, int(round(2 * h / step)) + 1) for h in half]
    out = []
    for axis in range(3):
        a, b = [k for k in range(3) if k != axis]
        A, B = np.meshgrid(grids[a], grids[b], indexing="ij")
        for side in (-1.0, 1.0):
            pts = np.zeros((A.size, 3))
            pts[:, a], pts[:, b], pts[:, axis] = A.ravel(), B.ravel(), side * half[axis]
            out.append(pts)
    return np.vstack(out)


@pytest.mark.parametrize("region", ["face", "edge", "corner"])
def test_box_outside_matches_exact_distance_and_sampling(region):
    """Outside a box (face, edge, corner regions) phi is the exact and sampled distance minus r; n points to c."""
    rng = np.random.default_rng({"face": 21, "edge": 22, "corner": 23}[region])
    box = BoxShape(half_extents=HALF)
    samples = _box_surface_samples(HALF)
    r = 0.015
    outside_axes = {"face": 1, "edge": 2, "corner": 3}[region]
    for _ in range(8):
        axes = rng.choice(3, outside_axes, replace=False)
        c = rng.uniform(-1, 1, 3) * HALF * 0.9
        c[axes] = np.sign(rng.standard_normal(outside_axes)) * (HALF[axes] + rng.uniform(0.01, 0.05, outside_axes))
        g = box.sphere_contact(c, r, np.eye(3), np.zeros(3))
        exact = _box_distance(c, HALF)
        sampled = np.linalg.norm(samples - c, axis=1).min()
        assert g.phi == pytest.approx(exact - r, abs=1e-14)
        assert g.phi == pytest.approx(sampled - r, abs=1e-4)
        to_center = c - g.point_in_world
        assert g.normal_in_world @ to_center > 0.0
        np.testing.assert_allclose(np.cross(g.normal_in_world, to_center), 0.0, atol=1e-14)
        q = 2.0 * g.point_in_world - (c - r * g.normal_in_world)  # box point from the midpoint
        assert np.max(np.abs(q) / HALF) == pytest.approx(1.0, abs=1e-12)
        assert np.linalg.norm(c - q) == pytest.approx(exact, abs=1e-14)


def test_box_inside_gives_least_penetration_face():
    """A centre inside the box gives phi = −(least depth) − r and that face's outward normal."""
    box = BoxShape(half_extents=np.array([0.1, 0.2, 0.3]))
    g = box.sphere_contact(np.array([0.08, 0.0, 0.0]), 0.01, np.eye(3), np.zeros(3))
    assert g.phi == pytest.approx(-0.02 - 0.01, abs=1e-15)
    np.testing.assert_array_equal(g.normal_in_world, [1.0, 0.0, 0.0])
    np.testing.assert_allclose(g.point_in_world, [0.5 * (0.1 + 0.07), 0.0, 0.0], atol=1e-15)
    g = box.sphere_contact(np.array([0.0, -0.05, -0.29]), 0.01, np.eye(3), np.zeros(3))
    assert g.phi == pytest.approx(-0.01 - 0.01, abs=1e-15)
    np.testing.assert_array_equal(g.normal_in_world, [0.0, 0.0, -1.0])
    rng = np.random.default_rng(24)
    for _ in range(30):
        c = rng.uniform(-1, 1, 3) * HALF
        g = BoxShape(HALF).sphere_contact(c, 0.01, np.eye(3), np.zeros(3))
        depth = HALF - np.abs(c)
        k = int(np.argmin(depth))
        assert g.phi == pytest.approx(-depth[k] - 0.01, abs=1e-15)
        np.testing.assert_array_equal(g.normal_in_world, np.sign(c[k]) * np.eye(3)[k])


def test_box_rotated_agrees_with_axis_aligned():
    """A rotated, translated box gives the axis-aligned result transformed into world."""
    rng = np.random.default_rng(25)
    box = BoxShape(half_extents=HALF)
    for _ in range(40):
        R, pos = random_rotation(rng), rng.uniform(-1, 1, 3)
        c_box = rng.uniform(-2, 2, 3) * HALF
        local = box.sphere_contact(c_box, 0.02, np.eye(3), np.zeros(3))
        world = box.sphere_contact(R @ c_box + pos, 0.02, R, pos)
        assert world.phi == pytest.approx(local.phi, abs=1e-13)
        np.testing.assert_allclose(world.normal_in_world, R @ local.normal_in_world, atol=1e-13)
        np.testing.assert_allclose(world.point_in_world, R @ local.point_in_world + pos, atol=1e-13)


def test_box_vectorized_matches_scalar():
    """BoxShape.sphere_contacts equals sphere_contact row by row, inside and outside."""
    rng = np.random.default_rng(26)
    box = BoxShape(half_extents=HALF)
    R, pos = random_rotation(rng), rng.uniform(-1, 1, 3)
    centers = (rng.uniform(-2, 2, (60, 3)) * HALF) @ R.T + pos
    radii = rng.uniform(0.0, 0.03, 60)
    phi, points, normals = box.sphere_contacts(centers, radii, R, pos)
    for k in range(60):
        g = box.sphere_contact(centers[k], radii[k], R, pos)
        assert phi[k] == pytest.approx(g.phi, abs=1e-14)
        np.testing.assert_allclose(points[k], g.point_in_world, atol=1e-14)
        np.testing.assert_allclose(normals[k], g.normal_in_world, atol=1e-14)


# ---------------------------------------------------------------------------------------------------------------------
# d(phi)/d(centre) = n


def test_phi_gradient_is_normal_for_halfspace():
    """d(phi)/d(centre) equals the normal for tilted half-spaces (finite differences, 1e-6)."""
    rng = np.random.default_rng(31)
    for _ in range(5):
        plane = HalfSpace(normal=rng.standard_normal(3), offset=rng.uniform(-0.1, 0.1))
        c = rng.uniform(-0.2, 0.2, 3)
        grad = fd_gradient(lambda x, plane=plane: plane.sphere_contact(x, 0.02).phi, c)
        np.testing.assert_allclose(grad, plane.sphere_contact(c, 0.02).normal_in_world, atol=1e-6)


def test_phi_gradient_is_normal_for_heightmap(bumps):
    """d(phi)/d(centre) equals the normal on a tilted-plane and a bumpy height map (finite differences, 1e-6)."""
    rng = np.random.default_rng(32)
    tilted = _plane_map(0.3, -0.15, 0.02)
    for hm in (tilted, bumps):
        for _ in range(6):
            xy = rng.uniform(-0.25, 0.25, 2)
            c = np.array([*xy, hm.height(*xy) + rng.uniform(0.01, 0.04)])
            grad = fd_gradient(lambda x, hm=hm: hm.sphere_contact(x, 0.02).phi, c)
            np.testing.assert_allclose(grad, hm.sphere_contact(c, 0.02).normal_in_world, atol=1e-6)


def test_phi_gradient_is_normal_for_box_outside():
    """d(phi)/d(centre) equals the normal outside a rotated box, face, edge and corner regions (1e-6)."""
    rng = np.random.default_rng(33)
    box = BoxShape(half_extents=HALF)
    R, pos = random_rotation(rng), rng.uniform(-1, 1, 3)
    for c_box in ([0.13, 0.01, -0.02], [0.12, 0.08, 0.0], [-0.12, 0.07, 0.06]):
        c = R @ np.array(c_box) + pos
        grad = fd_gradient(lambda x: box.sphere_contact(x, 0.02, R, pos).phi, c)
        np.testing.assert_allclose(grad, box.sphere_contact(c, 0.02, R, pos).normal_in_world, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# bad inputs


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: HalfSpace(normal=np.zeros(3)), ConfigError),
        (lambda: HalfSpace(normal=np.array([0.0, 1.0])), ShapeError),
        (lambda: HalfSpace(normal=np.array([0.0, np.nan, 1.0])), NonFiniteError),
        (lambda: HalfSpace(normal=np.array([0.0, 0.0, 1.0]), offset=np.inf), NonFiniteError),
        (lambda: HeightMap(origin_xy=np.zeros(2), spacing=0.0, heights=np.zeros((3, 3))), ConfigError),
        (lambda: HeightMap(origin_xy=np.zeros(2), spacing=-0.1, heights=np.zeros((3, 3))), ConfigError),
        (lambda: HeightMap(origin_xy=np.zeros(2), spacing=0.1, heights=np.zeros(9)), ShapeError),
        (lambda: HeightMap(origin_xy=np.zeros(2), spacing=0.1, heights=np.zeros((1, 9))), ConfigError),
        (lambda: HeightMap(origin_xy=np.zeros(3), spacing=0.1, heights=np.zeros((3, 3))), ShapeError),
        (lambda: HeightMap(origin_xy=np.zeros(2), spacing=0.1, heights=np.full((3, 3), np.nan)), NonFiniteError),
        (lambda: HeightMap.bumps(size_m=1.0, spacing=0.0, max_height=0.03, n_bumps=3, seed=0), ConfigError),
        (lambda: BoxShape(half_extents=np.array([0.1, 0.0, 0.1])), ConfigError),
        (lambda: BoxShape(half_extents=np.array([0.1, -0.2, 0.1])), ConfigError),
        (lambda: BoxShape(half_extents=np.array([0.1, 0.1])), ShapeError),
        (lambda: BoxShape(half_extents=np.array([0.1, np.inf, 0.1])), NonFiniteError),
    ],
)
def test_bad_construction_raises(make, error):
    """Invalid shape parameters raise the package's ConfigError / ShapeError / NonFiniteError."""
    with pytest.raises(error):
        make()


def test_bad_query_inputs_raise():
    """Malformed centres, radii, rotations and normals raise ShapeError / NonFiniteError / InputError."""
    ground = HalfSpace(normal=np.array([0.0, 0.0, 1.0]))
    box = BoxShape(half_extents=HALF)
    hm = HeightMap(origin_xy=np.zeros(2), spacing=0.1, heights=np.zeros((3, 3)))
    with pytest.raises(ShapeError, match="center_in_world"):
        ground.sphere_contact(np.zeros(2), 0.01)
    with pytest.raises(NonFiniteError):
        hm.sphere_contact(np.array([0.0, np.nan, 0.0]), 0.01)
    with pytest.raises(InputError, match="radius"):
        box.sphere_contact(np.zeros(3), -0.01, np.eye(3), np.zeros(3))
    with pytest.raises(InputError, match="rotation"):
        box.sphere_contact(np.zeros(3), 0.01, 2.0 * np.eye(3), np.zeros(3))
    with pytest.raises(InputError, match="rotation"):
        box.sphere_contact(np.zeros(3), 0.01, -np.eye(3), np.zeros(3))
    with pytest.raises(ShapeError):
        box.sphere_contacts(np.zeros((2, 3)), np.zeros(3), np.eye(3), np.zeros(3))
    with pytest.raises(ShapeError):
        ground.sphere_contacts(np.zeros((2, 4)), np.zeros(2))
    with pytest.raises(InputError, match="radii"):
        ground.sphere_contacts(np.zeros((2, 3)), np.array([0.01, -0.01]))
    with pytest.raises(InputError, match="non-zero"):
        tangent_basis(np.zeros(3))
    with pytest.raises(ShapeError):
        tangent_bases(np.zeros(3))
    with pytest.raises(NonFiniteError):
        tangent_bases(np.array([[0.0, 0.0, np.inf]]))


# ---------------------------------------------------------------------------------------------------------------------
# the compiled kernels against independent computations


def _tangents_by_the_rule(normals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tangent rule of tangent_bases' docstring, written out in numpy: ŝ = projected x̂, the fallback
    ŝ = ŷ × n̂ / |ŷ × n̂|, and in the band ŝ turned about n̂ toward the fallback by smoothstep of |n̂ₓ|."""
    n = unit(normals)
    with np.errstate(invalid="ignore", divide="ignore"):  # x_proj is undefined at ±x̂ (w = 1), fallback at ±ŷ (w = 0)
        x_proj = unit(np.array([1.0, 0.0, 0.0]) - n[:, :1] * n)
        fallback = unit(np.cross(np.array([0.0, 1.0, 0.0]), n))
        u = np.clip((np.abs(n[:, 0]) - COS40) / (COS20 - COS40), 0.0, 1.0)
        w = u * u * (3.0 - 2.0 * u)
        sine, cosine = np.einsum("ij,ij->i", np.cross(x_proj, fallback), n), np.einsum("ij,ij->i", x_proj, fallback)
        angle = np.arctan2(sine, cosine)
        a = (w * angle)[:, None]
        blended = np.cos(a) * x_proj + np.sin(a) * np.cross(n, x_proj)
    s = np.where((w >= 1.0)[:, None], fallback, np.where((w > 0.0)[:, None], blended, x_proj))
    return s, np.cross(n, s)


def test_tangent_frames_equal_the_rule_written_out():
    """tangent_bases equals an independent numpy statement of its rule (to 1e-12) on random normals, the axes,
    near the axes and across the blend band, and (s, t, n) is orthonormal and right-handed there."""
    rng = np.random.default_rng(41)
    band = np.radians(rng.uniform(15.0, 45.0, 3000))  # angle from ±x, through the blend band
    azimuth = rng.uniform(0.05, np.pi - 0.05, 3000)  # n_z > 0: off the documented cut
    side = np.where(rng.uniform(size=3000) < 0.5, -1.0, 1.0)
    in_band = np.column_stack([side * np.cos(band), np.sin(band) * np.cos(azimuth), np.sin(band) * np.sin(azimuth)])
    normals = np.vstack([_awkward_normals(rng), in_band, 3.0 * unit(rng.standard_normal((3000, 3)))])
    s, t = tangent_bases(normals)
    s_rule, t_rule = _tangents_by_the_rule(normals)
    np.testing.assert_allclose(s, s_rule, atol=1e-12)
    np.testing.assert_allclose(t, t_rule, atol=1e-12)
    assert_frame(unit(normals), s, t)


def _random_rotation_and_position(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return random_rotation(rng), rng.uniform(-1.0, 1.0, 3)


def test_box_random_poses_match_brute_force_closest_point():
    """Random boxes, poses and centres (outside and inside): outside, the box point is the closest of dense surface
    samples (to the sampling step) and the clamped centre, phi is its distance minus r (1e-3 m from the samples,
    1e-12 from the clamp) and n points from it to the centre; inside, phi = −(least face depth) − r with that
    face's outward normal."""
    rng = np.random.default_rng(42)
    for _ in range(12):
        half = rng.uniform(0.01, 0.08, 3)
        box = BoxShape(half_extents=half)
        samples = _box_surface_samples(half, step=2e-3)
        R, pos = _random_rotation_and_position(rng)
        c_box = rng.uniform(-2.0, 2.0, (40, 3)) * half
        radii = rng.uniform(0.0, 0.02, 40)
        phi, points, normals = box.sphere_contacts(c_box @ R.T + pos, radii, R, pos)
        for k in range(40):
            p, r = c_box[k], radii[k]
            normal_in_box = R.T @ normals[k]
            box_point = 2.0 * R.T @ (points[k] - pos) - (p - r * normal_in_box)  # closest box point, box frame
            if np.any(np.abs(p) > half):
                distances = np.linalg.norm(samples - p, axis=1)
                closest = samples[np.argmin(distances)]
                assert phi[k] == pytest.approx(_box_distance(p, half) - r, abs=1e-12)
                assert phi[k] == pytest.approx(distances.min() - r, abs=1e-3)
                np.testing.assert_allclose(box_point, np.clip(p, -half, half), atol=1e-12)
                assert np.linalg.norm(closest - box_point) <= 3 * 2e-3  # the sampled closest point is next to it
                np.testing.assert_allclose(normal_in_box, unit(p - box_point), atol=1e-9)
            else:
                depth = half - np.abs(p)
                axis = int(np.argmin(depth))
                assert phi[k] == pytest.approx(-depth[axis] - r, abs=1e-12)
                np.testing.assert_allclose(normal_in_box, np.sign(p[axis]) * np.eye(3)[axis], atol=1e-12)
            assert np.linalg.norm(normals[k]) == pytest.approx(1.0, abs=1e-12)


def test_box_ties_pick_the_lowest_axis_then_the_positive_side():
    """A centre equally deep below several faces (the box centre, a diagonal) gets the lowest such axis, +side."""
    box = BoxShape(half_extents=np.array([0.05, 0.05, 0.05]))
    for c, expected in (
        ([0.0, 0.0, 0.0], [1.0, 0.0, 0.0]),
        ([0.0, 0.01, 0.01], [0.0, 1.0, 0.0]),
        ([-0.01, -0.01, 0.0], [-1.0, 0.0, 0.0]),
        ([0.0, 0.0, -0.02], [0.0, 0.0, -1.0]),
    ):
        g = box.sphere_contact(np.array(c), 0.01, np.eye(3), np.zeros(3))
        np.testing.assert_array_equal(g.normal_in_world, expected)


def test_heightmap_random_centres_match_dense_sampling(bumps):
    """Centres above, below and beside the bumps, and beyond the grid (held border): phi matches dense sampling
    to 1e-4 m, the terrain point lies on the surface, and no sampled terrain point near it is closer."""
    rng = np.random.default_rng(43)
    r = 0.015
    xy = np.vstack([rng.uniform(-0.3, 0.3, (20, 2)), rng.uniform(0.38, 0.45, (5, 2)) * rng.choice([-1, 1], (5, 2))])
    z = bumps.heights_at(xy[:, 0], xy[:, 1]) + rng.uniform(-0.01, 0.04, len(xy))
    centers = np.column_stack([xy, z])
    phi, points, normals = bumps.sphere_contacts(centers, np.full(len(xy), r))
    for k, c in enumerate(centers):
        assert abs(phi[k] - _brute_force_phi(bumps, c, r)) < 1e-4
        p = 2.0 * points[k] - (c - r * normals[k])  # the terrain point
        assert p[2] == pytest.approx(bumps.height(p[0], p[1]), abs=1e-12)
        around = p[:2] + rng.uniform(-0.01, 0.01, (400, 2))
        nearby = np.column_stack([around, bumps.heights_at(around[:, 0], around[:, 1])])
        assert np.linalg.norm(nearby - c, axis=1).min() >= np.linalg.norm(c - p) - 1e-9
        assert np.linalg.norm(normals[k]) == pytest.approx(1.0, abs=1e-14)
