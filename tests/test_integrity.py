"""Integrity against a real daemon over real sockets: an authorized client's finite input never gives `internal`,
nobody without the credential changes what the robot does, on any channel (docs/protocol.md, "Who may do what,
on each channel"), and a stranger's traffic cannot stop the robot."""

from __future__ import annotations

import os
import socket
import stat
import tempfile

import pytest
import zmq

from idcontrol import protocol as wire
from idcontrol.client import AdminClient
from idcontrol.errors import ConfigError, ProtocolError
from idcontrol.reference import make_reference
from idcontrol.security import Credential, runtime_dir
from tests.test_daemon import Harness


@pytest.fixture
def harness(quadruped):
    h = Harness(quadruped)
    yield h
    h.close()


def code_of(admin: AdminClient, kind: str, **fields) -> str:
    with pytest.raises(ProtocolError) as e:
        admin.request(kind, **fields)
    return e.value.code


def timed_state(h: Harness, t: float) -> dict:
    """One state of the harness's bridge at bridge time ``t`` (s)."""
    h.seq += 1
    return h.exchange(wire.encode_state(h.seq, t, h.q, h.v))


def swing_one_joint(h: Harness, **options) -> None:
    """The joint sinusoid on the quadruped's first joint (all of them are on legs, so one is named)."""
    h.admin.request("set_reference", name="joint_sinusoid", options={"joints": [h.robot.actuated_joints[0]], **options})


# ------------------------------------------------------------------------------- finite input, authorized client
def test_a_state_time_far_beyond_the_runs_clock_is_a_bad_state(harness):
    """Running the joint sinusoid, a state at t = 1.7e308 s is bad_state (it was `internal`: math.sin of an
    infinite phase); the run goes on with the next ordinary state."""
    swing_one_joint(harness)
    harness.admin.request("start")
    assert timed_state(harness, 0.001)["mode"] == "run"
    reply = timed_state(harness, 1.7e308)
    assert reply["type"] == "error" and reply["code"] == "bad_state", reply
    assert timed_state(harness, 0.002)["mode"] == "run"
    assert harness.admin.request("status")["mode"] == "run"


def test_a_sinusoid_without_a_ramp_takes_a_time_before_its_first(harness):
    """set_reference with ramp_time = 0, then a state earlier than the run's first: a command (it divided by
    zero into `internal`)."""
    swing_one_joint(harness, ramp_time=0.0)
    harness.admin.request("start")
    assert timed_state(harness, 1.0)["mode"] == "run"
    reply = timed_state(harness, 0.5)
    assert reply["type"] == "command" and reply["mode"] == "run", reply


def test_a_reference_that_raises_stops_safely_with_a_named_reason(harness, monkeypatch):
    """A reference whose sample raises is handled like a failed solve: a command that leaves run (a safe stop),
    the reason names the reference and its error, never `internal`."""
    harness.admin.request("start")
    assert harness.state()["mode"] == "run"

    def broken(*_args, **_kwargs):
        raise ValueError("math domain error")

    monkeypatch.setattr(harness.daemon.core.reference, "sample", broken)
    reply = harness.state()
    assert reply["type"] == "command" and reply["mode"] in ("safe_stop", "stopped"), reply  # at rest: stopped at once
    status = harness.admin.request("status")
    assert "reference 'hold' raised ValueError" in status["reason"], status["reason"]
    assert status["interventions"]["solve_failed"] == 1


@pytest.mark.parametrize("option", ["forward_speed", "lateral_speed", "yaw_rate"])
def test_a_running_trot_refuses_a_speed_out_of_range_and_keeps_its_own(quadruped, option):
    """set_reference on the running trot with a speed of 1e308 is refused and the commanded twist is unchanged;
    the same value is refused at start-up."""
    h = Harness(quadruped)
    try:
        h.admin.request("set_reference", name="trot")
        h.admin.request("start")
        h.state()
        before = h.daemon.core.reference.desired
        assert code_of(h.admin, "set_reference", name="trot", options={option: 1e308}) in (
            "invalid_transition",
            "bad_field",
        )
        assert h.daemon.core.reference.desired == before
        assert h.state()["mode"] == "run"
    finally:
        h.close()
    with pytest.raises(ConfigError, match=option):
        make_reference("trot", quadruped, **{option: 1e308})


@pytest.mark.parametrize(("name", "option"), [("two_stage_qp", "ridge"), ("noslip_lcp", "spread")])
def test_infinite_options_are_non_finite(harness, name, option):
    """An option of +inf is non_finite at set_formulation (the doc: every accepted float is finite); the
    formulation is unchanged."""
    assert code_of(harness.admin, "set_formulation", name=name, options={option: float("inf")}) == "non_finite"
    assert code_of(harness.admin, "set_reference", name="trot", options={"forward_speed": float("-inf")}) == (
        "non_finite"
    )
    assert harness.admin.request("status")["formulation"] == "two_stage_qp"


# ------------------------------------------------------------------------------- the runtime directory, ipc://
def test_a_symlinked_runtime_directory_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    """A runtime directory that is a symbolic link (planted by another user, say) is refused, saying so; its
    target keeps its mode and gets no credential (it used to be made 0700 and written into)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    victim.chmod(0o755)
    link = tmp_path / "link"
    link.symlink_to(victim)
    monkeypatch.setenv("IDCONTROL_RUNTIME_DIR", str(link))
    with pytest.raises(ConfigError, match="symbolic link"):
        Credential.create("tcp://127.0.0.1:5555")
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o755 and not list(victim.iterdir())


def test_the_default_runtime_directory_in_tmp_is_refused_when_linked_or_open(tmp_path, monkeypatch):
    """<tmp>/idcontrol-<uid>: a symbolic link there is refused, and so is a directory others may enter; a
    missing one is made 0700."""
    monkeypatch.delenv("IDCONTROL_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    default = tmp_path / f"idcontrol-{os.getuid()}"
    assert runtime_dir() == default and stat.S_IMODE(os.stat(default).st_mode) == 0o700
    default.chmod(0o755)
    with pytest.raises(ConfigError, match="open to others"):
        runtime_dir()
    default.rmdir()
    default.symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="symbolic link"):
        runtime_dir()


def test_a_second_daemon_on_ipc_endpoints_is_refused_and_leaves_the_first_alone(quadruped, tmp_path, monkeypatch):
    """A second daemon on the ipc:// endpoints of a running one refuses to start, naming the endpoint; the
    first keeps its socket files and its credential (the second used to replace both, and delete them on exit).
    A socket file nobody serves (a daemon that died) is bound over."""
    from idcontrol.control.controller import InverseDynamicsController
    from idcontrol.control.core import ControlCore
    from idcontrol.daemon.server import Daemon
    from idcontrol.settings import Endpoints

    monkeypatch.setenv("IDCONTROL_RUNTIME_DIR", str(tmp_path / "run"))
    endpoints = Endpoints(f"ipc://{tmp_path}/control", f"ipc://{tmp_path}/admin", None)
    ctx = zmq.Context()
    core = ControlCore(InverseDynamicsController(quadruped), make_reference("hold", quadruped))
    first = Daemon(core, endpoints, context=ctx)
    try:
        with pytest.raises(ConfigError, match="running process"):
            Daemon(core, endpoints, context=ctx)
        assert (tmp_path / "control").exists() and (tmp_path / "admin").exists()
        assert Credential.of_daemon(endpoints.control).token == first.credential.token
        dealer = ctx.socket(zmq.DEALER)  # the first daemon still takes connections on its path
        dealer.connect(endpoints.control)
        dealer.send(b"x")
        assert first.control.poll(2000)
        dealer.close(linger=0)
    finally:
        first.close()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "control"))  # a dead daemon's file: nobody listens on it
    stale.close()
    Daemon(core, endpoints, context=ctx).close()
    ctx.term()
