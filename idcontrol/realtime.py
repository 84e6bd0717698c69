"""Real-time scheduling for the daemon and bridge processes (Linux).

At 1 kHz on a shared machine, most of a round trip's jitter is the scheduler waking a process late
(measured here: a loopback round trip with no controller had p99 3.9 ms at normal priority and
0.58 ms under SCHED_FIFO, on a machine with a load average of 4.7). A launch file's ``[realtime]``
table asks for a SCHED_FIFO priority and, optionally, a CPU for each process; both processes block
in poll/select while they wait, unless ``spin_us`` asks them to poll without sleeping for that long
(then a real-time priority keeps the daemon's CPU mostly busy: dedicate it). ``cpu_latency_us`` holds
a PM QoS CPU latency request while the process runs, which keeps idle CPUs out of deep idle states (on a
virtual machine it cut the p99 of a tick that followed a short block by half: docs/benchmarks.md, "Measured
choices in the code").
"""

from __future__ import annotations

import logging
import os
import select
import struct
import time

import zmq

from idcontrol.settings import RealtimeSettings

log = logging.getLogger("idcontrol.realtime")


def enter_realtime(settings: RealtimeSettings, role: str) -> None:
    """Apply ``settings`` to the calling process (``role``: "daemon" or "bridge"); say what was done.

    Call it before the process opens its first ZeroMQ socket: the shared context's I/O thread, which
    moves every message between the socket and the kernel, is started then, on ``io_cpu`` if one is
    given, and gets SCHED_FIFO one priority above the process (a message is never stuck behind the
    thread that waits for it).

    A refusal (no permission for SCHED_FIFO, a CPU outside this process's set) is logged as a warning
    and the process goes on at normal priority: the loop still works, with more jitter.
    """
    if settings.cpu_latency_us is not None:
        hold_cpu_latency(settings.cpu_latency_us, role)
    allowed = os.sched_getaffinity(0)  # before pinning: the CPUs this process may use at all
    cpu = settings.daemon_cpu if role == "daemon" else settings.bridge_cpu
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
            log.info("%s pinned to CPU %d", role, cpu)
        except OSError as e:
            log.warning("%s could not be pinned to CPU %d (%s); it runs on any CPU", role, cpu, e.strerror)
    if settings.io_cpu is not None:
        if settings.io_cpu in allowed:  # (ZeroMQ aborts the process if its thread cannot be pinned)
            zmq.Context.instance().set(zmq.THREAD_AFFINITY_CPU_ADD, settings.io_cpu)
            log.info("%s ZeroMQ I/O thread pinned to CPU %d", role, settings.io_cpu)
        else:
            log.warning(
                "%s ZeroMQ I/O thread not pinned: CPU %d is outside this process's CPUs %s",
                role,
                settings.io_cpu,
                sorted(allowed),
            )
    if settings.priority:
        try:
            # the process's own threads only: children (the log writer, tools) start at normal priority
            os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(settings.priority))
            log.info("%s runs under SCHED_FIFO priority %d", role, settings.priority)
        except (OSError, AttributeError) as e:
            reason = getattr(e, "strerror", None) or str(e)
            log.warning(
                "%s could not get SCHED_FIFO priority %d (%s); it runs at normal priority (more jitter; "
                "grant CAP_SYS_NICE or an rtprio limit)",
                role,
                settings.priority,
                reason,
            )
            return
        io_priority = _permitted(min(settings.priority + 1, 99), settings.priority)
        context = zmq.Context.instance()
        context.set(zmq.THREAD_SCHED_POLICY, os.SCHED_FIFO)
        context.set(zmq.THREAD_PRIORITY, io_priority)
        log.info("%s ZeroMQ I/O thread: SCHED_FIFO priority %d", role, io_priority)


def enter_background(role: str) -> str:
    """Let the calling thread (Linux schedules threads; called first in a process's main thread: the process)
    and the threads it starts afterwards run only on CPU time that nothing else wants (``role`` names it in the
    log): SCHED_IDLE where Linux offers it, else the largest nice value. For observers of a run (the live view):
    on a machine with no CPU to spare they fall behind, the loop does not. Returns the policy it got ("idle",
    "nice 19" or "normal")."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        got = "idle"
    except (OSError, AttributeError):
        try:
            os.nice(19 - os.nice(0))
            got = "nice 19"
        except OSError:
            got = "normal"
    log.info("%s runs at %s priority (only on CPU time the run does not use)", role, got)
    return got


#: Open PM QoS requests of this process: a request lasts as long as its file stays open.
_latency_requests: list = []


def hold_cpu_latency(latency_us: int, role: str, device: str = "/dev/cpu_dma_latency") -> bool:
    """Hold a CPU wake-up latency request of ``latency_us`` until the process exits; False (and a
    warning) where the kernel refuses it (no such device, no permission)."""
    try:
        request = open(device, "wb", buffering=0)  # noqa: SIM115 (held open on purpose)
        try:
            request.write(struct.pack("=i", latency_us))
        except OSError:
            request.close()
            raise
    except OSError as e:
        log.warning(
            "%s could not request a CPU latency of %d µs (%s: %s); idle CPUs may sleep deeper (more jitter)",
            role,
            latency_us,
            device,
            e.strerror,
        )
        return False
    _latency_requests.append(request)
    log.info("%s holds a CPU latency request of %d µs while it runs", role, latency_us)
    return True


def _permitted(priority: int, fallback: int) -> int:
    """``priority`` if this process may use it, else ``fallback`` (the priority it holds now).

    ZeroMQ aborts the process when its I/O thread cannot get the priority it was configured with, so
    the calling thread tries it first and then returns to ``fallback``.
    """
    flags = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
    try:
        os.sched_setscheduler(0, flags, os.sched_param(priority))
    except OSError:
        return fallback
    os.sched_setscheduler(0, flags, os.sched_param(fallback))
    return priority


def readable(socket: zmq.Socket) -> bool:
    """Whether ``socket`` holds a message now (its FD is edge-triggered: ask the socket, not the FD)."""
    return bool(socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)


def spin_until_readable(socket: zmq.Socket, until: float) -> bool:
    """Poll ``socket`` without sleeping until it has a message (True) or ``until`` (perf_counter s) passes."""
    while True:
        if readable(socket):
            return True
        if time.perf_counter() >= until:
            return False


def wait_readable(socket: zmq.Socket, timeout_s: float, spin_s: float = 0.0) -> bool:
    """Wait up to ``timeout_s`` for a message, with the µs resolution of select (zmq_poll counts in ms).

    spin_s : first poll without sleeping for up to this long (see :attr:`RealtimeSettings.spin_us`).
    """
    now = time.perf_counter()
    deadline = now + timeout_s
    if spin_s > 0.0 and spin_until_readable(socket, min(deadline, now + spin_s)):
        return True
    fd = socket.getsockopt(zmq.FD)
    while True:
        if readable(socket):  # always ask first
            return True
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return False
        select.select([fd], [], [], remaining)


def rt_rest_fraction(proc: str = "/proc/sys/kernel") -> float:
    """The least share of each period a spinning SCHED_FIFO thread must block to stay under the kernel's
    real-time budget (sched_rt_runtime_us per sched_rt_period_us; 95 % by default), with a 1 % margin.

    A thread past the budget is stopped for the rest of the budget's period (50 ms by default), which a
    bridge sees as silence. 0 where the budget is off (-1, a common real-time setting) or unreadable.
    """
    try:
        with open(f"{proc}/sched_rt_runtime_us") as f:
            runtime = int(f.read())
        with open(f"{proc}/sched_rt_period_us") as f:
            period = int(f.read())
    except (OSError, ValueError):
        return 0.0
    if runtime < 0 or period <= 0:
        return 0.0
    return max(0.0, 1.0 - runtime / period) + 0.01
