"""Dormand–Prince 5(4) with dense output and a terminal event, compiled: scipy's
``solve_ivp(fun, (t0, t_bound), y0, method="RK45", events=[event])`` step for step, for a system whose field is
compiled (:mod:`idcontrol.sim.ess.system`).

Why compiled: scipy's driver runs each step in Python and numpy (the tableau's products, the error norm, the
step control, the event's Python call, brentq's callbacks). On the ESS integrator's plate that cost dozens of
times the compiled field itself, and it set the integrator's whole cost (docs/ess.md, "Measurements"). Here the
same algorithm runs in one compiled call.

What is reproduced from scipy (``scipy/integrate/_ivp``: ``rk.py``, ``common.py``, ``ivp.py``; and the C
``brentq``), so that both give the same steps on the same system (tests/test_ess_dopri.py checks it):

* the RK45 tableau (Dormand & Prince, "A family of embedded Runge-Kutta formulae", 1980; the 5th-order solution
  is propagated, FSAL), the error estimate Σ E_i K_i h and its RMS norm scaled by atol + rtol max(|y|, |y_new|);
* the step control: h ← h · min(10, 0.9 err^(−1/5)) after an accepted step (no growth right after a rejection),
  h ← h · max(0.2, 0.9 err^(−1/5)) after a rejected one; a step below 10 ulp(t) fails; max_step caps it; the
  last step is cut at t_bound. One departure: a NaN step size (a field that is NaN from the start makes the
  initial step NaN) fails here, where scipy's loop never ends;
* the initial step of Hairer, Nørsett & Wanner (Sec. II.4) as ``select_initial_step`` computes it, one extra
  field evaluation; or ``first_step`` when given;
* the dense output: the quartic y_old + h Σ_j Q_j x^(j+1), Q = Kᵀ P, x = (t − t_old) / h;
* the event: one function g(t, y) that rises through zero (``direction = +1``, terminal): active in a step when
  g ≤ 0 at its start and g ≥ 0 at its end; the time is the root of g on the dense output by Brent's method with
  xtol = rtol = 4 eps (scipy's ``solve_event_equation``), the state the dense output there.

The event function is the ESS integrator's: g(y) = max_i s_i (h_{k_i}(y) − l_i) over a list of (guard k_i, sign
s_i, level l_i); an empty list integrates to t_bound without events.

Arithmetic is the same but not its order (numpy's BLAS products sum differently), so the two agree to
round-off, and step for step unless a step's error norm sits within round-off of 1.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from idcontrol.sim.ess import system as ess_system

# the RK45 tableau (scipy.integrate.RK45's coefficients)
C = np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0])
A = np.array(
    [
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [1 / 5, 0.0, 0.0, 0.0, 0.0],
        [3 / 40, 9 / 40, 0.0, 0.0, 0.0],
        [44 / 45, -56 / 15, 32 / 9, 0.0, 0.0],
        [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729, 0.0],
        [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
    ]
)
B = np.array([35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84])
E = np.array([-71 / 57600, 0.0, 71 / 16695, -71 / 1920, 17253 / 339200, -22 / 525, 1 / 40])
P = np.array(
    [
        [1.0, -8048581381 / 2820520608, 8663915743 / 2820520608, -12715105075 / 11282082432],
        [0.0, 0.0, 0.0, 0.0],
        [0.0, 131558114200 / 32700410799, -68118460800 / 10900136933, 87487479700 / 32700410799],
        [0.0, -1754552775 / 470086768, 14199869525 / 1410260304, -10690763975 / 1880347072],
        [0.0, 127303824393 / 49829197408, -318862633887 / 49829197408, 701980252875 / 199316789632],
        [0.0, -282668133 / 205662961, 2019193451 / 616988883, -1453857185 / 822651844],
        [0.0, 40617522 / 29380423, -110615467 / 29380423, 69997945 / 29380423],
    ]
)
SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 10.0
ERROR_EXPONENT = -1.0 / 5.0  # −1 / (error estimator order + 1)
EPS = float(np.finfo(float).eps)
BRENT_ITERATIONS = 100  # scipy.optimize.brentq's default maxiter

#: :func:`integrate`'s status: reached t_bound, stopped at the event, or failed (a step below 10 ulp of t)
FINISHED, EVENT, FAILED = 0, 1, -1


@njit(cache=True)
def _rms_scaled(v, scale):  # pragma: no cover - compiled
    """‖v / scale‖₂ / sqrt(n) (scipy's ``norm`` of the scaled vector)."""
    total = 0.0
    for i in range(v.shape[0]):
        r = v[i] / scale[i]
        total += r * r
    return math.sqrt(total / v.shape[0])


@njit(cache=True)
def event_value(system, y, k, s, l, h):  # pragma: no cover - compiled
    """g(y) = max_i s_i (h_{k_i}(y) − l_i); ``h`` (m,) is workspace."""
    ess_system.guards(system, y, h)
    g = -np.inf
    for i in range(k.shape[0]):
        v = s[i] * (h[k[i]] - l[i])
        if v > g:
            g = v
    return g


@njit(cache=True)
def initial_step(system, side, t0, y0, f0, t_bound, max_step, rtol, atol, work):  # pragma: no cover - compiled
    """scipy's ``select_initial_step`` for an order-4 error estimate (one field evaluation); ``work`` (2, n)."""
    n = y0.shape[0]
    interval = abs(t_bound - t0)
    if interval == 0.0:
        return 0.0
    scale, y1 = work[0], work[1]
    d0 = d1 = 0.0
    for i in range(n):
        scale[i] = atol[i] + abs(y0[i]) * rtol
        d0 += (y0[i] / scale[i]) ** 2
        d1 += (f0[i] / scale[i]) ** 2
    d0, d1 = math.sqrt(d0 / n), math.sqrt(d1 / n)
    h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
    h0 = min(h0, interval)
    for i in range(n):
        y1[i] = y0[i] + h0 * f0[i]
    f1 = np.empty(n)
    ess_system.field(system, y1, side, f1)
    d2 = 0.0
    for i in range(n):
        d2 += ((f1[i] - f0[i]) / scale[i]) ** 2
    d2 = math.sqrt(d2 / n) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / 5.0)
    return min(100.0 * h0, h1, interval, max_step)


@njit(cache=True)
def step(system, side, t, y, f, h_abs, t_bound, max_step, rtol, atol, K, y_new, stage):  # pragma: no cover
    """One accepted step from (t, y) with ẏ(t) = f, as scipy's ``RungeKutta._step_impl``.

    K (7, n) receives the stages (K[6] = ẏ at the step's end); y_new (n,) the new state; ``stage`` (2, n) is
    workspace (row 0 used). Returns (accepted, t_new, the next step's h_abs, field evaluations).
    """
    n = y.shape[0]
    min_step = 10.0 * abs(np.nextafter(t, np.inf) - t)
    if h_abs > max_step:
        h_abs = max_step
    elif h_abs < min_step:
        h_abs = min_step
    rejected = False
    evaluations = 0
    ys = stage[0]
    while True:
        if not h_abs >= min_step:  # NaN too (a NaN field from the start: scipy's loop never ends there)
            return False, t, h_abs, evaluations
        t_new = t + h_abs
        if t_new - t_bound > 0.0:
            t_new = t_bound
        h = t_new - t
        h_abs = abs(h)
        for i in range(n):
            K[0, i] = f[i]
        for s_ in range(1, 6):
            for i in range(n):
                dy = 0.0
                for j in range(s_):
                    dy += K[j, i] * A[s_, j]
                ys[i] = y[i] + dy * h
            ess_system.field(system, ys, side, K[s_])
        for i in range(n):
            acc = 0.0
            for j in range(6):
                acc += K[j, i] * B[j]
            y_new[i] = y[i] + h * acc
        ess_system.field(system, y_new, side, K[6])
        evaluations += 6
        error = 0.0
        for i in range(n):
            scale_i = atol[i] + max(abs(y[i]), abs(y_new[i])) * rtol
            acc = 0.0
            for j in range(7):
                acc += K[j, i] * E[j]
            r = acc * h / scale_i
            error += r * r
        error = math.sqrt(error / n)
        if error < 1.0:
            if error == 0.0:
                factor = MAX_FACTOR
            else:
                factor = min(MAX_FACTOR, SAFETY * error**ERROR_EXPONENT)
            if rejected:
                factor = min(1.0, factor)
            return True, t_new, h_abs * factor, evaluations
        # a NaN error lands here too: shrink until the step is too small (scipy does the same)
        h_abs *= max(MIN_FACTOR, SAFETY * error**ERROR_EXPONENT)
        rejected = True


@njit(cache=True)
def dense(t_old, h, y_old, Q, t, out):  # pragma: no cover - compiled
    """The step's quartic interpolant at t into ``out``: y_old + h Q [x, x², x³, x⁴], x = (t − t_old) / h."""
    x = (t - t_old) / h
    x2 = x * x
    x3 = x2 * x
    x4 = x3 * x
    for i in range(y_old.shape[0]):
        out[i] = h * (Q[i, 0] * x + Q[i, 1] * x2 + Q[i, 2] * x3 + Q[i, 3] * x4) + y_old[i]


@njit(cache=True)
def _interpolant(K, Q):  # pragma: no cover - compiled
    """Q = Kᵀ P (n, 4)."""
    for i in range(Q.shape[0]):
        for c in range(4):
            acc = 0.0
            for j in range(7):
                acc += K[j, i] * P[j, c]
            Q[i, c] = acc


@njit(cache=True)
def _g_dense(system, t_old, h, y_old, Q, t, y, k, s, l, hbuf):  # pragma: no cover - compiled
    dense(t_old, h, y_old, Q, t, y)
    return event_value(system, y, k, s, l, hbuf)


@njit(cache=True)
def locate(system, t_old, t_new, y_old, Q, k, s, l, hbuf, y):  # pragma: no cover - compiled
    """The root of g on the step's dense output in [t_old, t_new]: Brent's method as scipy's C ``brentq``
    (xtol = rtol = 4 eps, at most 100 iterations). If g does not change sign over the bracket (round-off: the
    dense output at t_new is y_new only to round-off), the end where |g| is smaller."""
    h = t_new - t_old
    xtol = rtol = 4.0 * EPS
    xpre, xcur = t_old, t_new
    fpre = _g_dense(system, t_old, h, y_old, Q, xpre, y, k, s, l, hbuf)
    fcur = _g_dense(system, t_old, h, y_old, Q, xcur, y, k, s, l, hbuf)
    if fpre == 0.0:
        return xpre
    if fcur == 0.0:
        return xcur
    if (fpre < 0.0) == (fcur < 0.0):
        return xpre if abs(fpre) < abs(fcur) else xcur
    xblk = fblk = spre = scur = 0.0
    for _ in range(BRENT_ITERATIONS):
        if fpre != 0.0 and fcur != 0.0 and (fpre < 0.0) != (fcur < 0.0):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2.0
        sbis = (xblk - xcur) / 2.0
        if fcur == 0.0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:
                stry = -fcur * (xcur - xpre) / (fcur - fpre)  # secant
            else:
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))  # inverse quadratic
            if 2.0 * abs(stry) < min(abs(spre), 3.0 * abs(sbis) - delta):
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        if abs(scur) > delta:
            xcur += scur
        else:
            xcur += delta if sbis > 0.0 else -delta
        fcur = _g_dense(system, t_old, h, y_old, Q, xcur, y, k, s, l, hbuf)
    return xcur


@njit(cache=True)
def integrate(
    system, side, t0, y0, t_bound, rtol, atol, max_step, first_step, k, s, l, hbuf, y_end
):  # pragma: no cover - compiled
    """``solve_ivp(method="RK45", events=[g])`` from (t0, y0) to t_bound with the mode ``side`` held, g the
    terminal rising event of (k, s, l) (:func:`event_value`; none if empty); ``first_step`` ≤ 0: chosen.
    rtol scalar, atol (n,); ``hbuf`` (m,) workspace for the guards.

    The final state goes to ``y_end`` (n,). Returns (status FINISHED / EVENT / FAILED, its time, field
    evaluations, accepted steps, the largest accepted step but the last (0 with fewer than two steps): what
    ``np.max(np.diff(sol.t[:-1]))`` gives after ``solve_ivp``).
    """
    n = y0.shape[0]
    rtol = max(rtol, 100.0 * EPS)
    K = np.empty((7, n))
    work = np.empty((2, n))
    y, y_new, f = y0.copy(), np.empty(n), np.empty(n)
    events = k.shape[0] > 0
    ess_system.field(system, y, side, f)
    evaluations = 1
    if first_step > 0.0:
        h_abs = first_step
    else:
        h_abs = initial_step(system, side, t0, y, f, t_bound, max_step, rtol, atol, work)
        evaluations += 1
    g = 0.0
    if events:
        g = event_value(system, y, k, s, l, hbuf)
    t = t0
    steps = 0
    largest = last = 0.0
    while True:
        if t == t_bound:
            y_end[:] = y
            return FINISHED, t, evaluations, steps, largest
        accepted, t_new, h_next, used = step(
            system, side, t, y, f, h_abs, t_bound, max_step, rtol, atol, K, y_new, work
        )
        evaluations += used
        if not accepted:
            y_end[:] = y
            return FAILED, t, evaluations, steps, largest
        if steps > 0:
            largest = max(largest, last)
        last = t_new - t
        steps += 1
        if events:
            g_new = event_value(system, y_new, k, s, l, hbuf)
            if g <= 0.0 and g_new >= 0.0:
                Q = np.empty((n, 4))
                _interpolant(K, Q)
                root = locate(system, t, t_new, y, Q, k, s, l, hbuf, y_end)
                dense(t, t_new - t, y, Q, root, y_end)
                return EVENT, root, evaluations, steps, largest
            g = g_new
        if t_new - t_bound >= 0.0:
            y_end[:] = y_new
            return FINISHED, t_new, evaluations, steps, largest
        t, h_abs = t_new, h_next
        y, y_new = y_new, y
        f[:] = K[6]
