"""CURVE keys and authentication, forced on over loopback; the loopback-only rule without keys."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq
import zmq.auth

from idcontrol import protocol as wire
from idcontrol.client import AdminClient
from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.core import ControlCore
from idcontrol.daemon.server import Daemon
from idcontrol.errors import ConfigError
from idcontrol.reference import make_reference
from idcontrol.security import KeyDirectory, generate_keys
from idcontrol.settings import Endpoints, load_launch
from idcontrol.tools.cli import main as cli_main

ANY_PORT = Endpoints("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*")


@pytest.fixture
def keys(tmp_path) -> KeyDirectory:
    return generate_keys(tmp_path / "keys")


@pytest.fixture
def curve_daemon(quadruped, keys):
    """A daemon whose sockets are CURVE servers, serving in a thread on loopback."""
    ctx = zmq.Context()
    core = ControlCore(InverseDynamicsController(quadruped), make_reference("hold", quadruped))
    daemon = Daemon(core, ANY_PORT, context=ctx, curve=keys)
    thread = threading.Thread(target=daemon.serve, kwargs={"install_signal_handlers": False})
    thread.start()
    admin = AdminClient(daemon.bound["admin"], context=ctx, curve=keys)
    admin.request("status", timeout=120.0)
    yield ctx, daemon
    admin.request("shutdown")
    thread.join(timeout=5)
    admin.close()
    ctx.destroy(linger=0)  # closes what a failed test left open (term() would wait on it forever)


def test_keys_generate_writes_both_pairs_and_authorizes_the_client(tmp_path):
    """`idcontrol keys generate DIR`: server and client pairs, the client's public key authorized, secrets
    private; a second run refuses to overwrite them."""
    directory = tmp_path / "keys"
    assert cli_main(["keys", "generate", str(directory)]) == 0
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["authorized", "client.key", "client.key_secret", "server.key", "server.key_secret"]
    assert [p.name for p in (directory / "authorized").iterdir()] == ["client.key"]
    assert (directory / "server.key_secret").stat().st_mode & 0o077 == 0
    KeyDirectory(directory).check()
    assert cli_main(["keys", "generate", str(directory)]) == 2


def test_authorized_clients_are_served_and_unauthenticated_peers_get_nothing(curve_daemon, keys, tmp_path):
    """With CURVE on: the authorized admin client and bridge are answered; a plain (NULL) client and a CURVE
    client whose key is not authorized get no reply on the admin or the control channel."""
    ctx, daemon = curve_daemon
    with AdminClient(daemon.bound["admin"], context=ctx, curve=keys) as admin:
        assert admin.request("status")["robot"] == "quadruped"
    bridge = ctx.socket(zmq.DEALER)
    bridge.setsockopt(zmq.LINGER, 0)
    keys.make_client(bridge)
    bridge.connect(daemon.bound["control"])
    r = daemon.core.robot
    bridge.send(wire.encode_hello(r.name, r.nq, r.nv, r.nu))  # CURVE authenticates: no credential needed
    assert bridge.poll(2000) and msgpack.unpackb(bridge.recv())["type"] == "welcome"
    q = r.standing_configuration()
    bridge.send(wire.encode_state(1, 0.0, q, np.zeros(r.nv)))
    assert bridge.poll(2000) and msgpack.unpackb(bridge.recv())["type"] == "command"
    bridge.close(linger=0)

    stranger_public, stranger_secret = zmq.auth.load_certificate(
        zmq.auth.create_certificates(tmp_path, "stranger")[1]
    )  # a valid key pair, not in authorized/
    for setup in ("plain", "stranger"):
        admin = ctx.socket(zmq.REQ)
        control = ctx.socket(zmq.DEALER)
        for s in (admin, control):
            s.setsockopt(zmq.LINGER, 0)
            if setup == "stranger":
                s.curve_publickey, s.curve_secretkey = stranger_public, stranger_secret
                s.curve_serverkey = zmq.auth.load_certificate(keys.path / "server.key")[0]
        admin.connect(daemon.bound["admin"])
        control.connect(daemon.bound["control"])
        for socket, message in (
            (admin, wire.encode_request("stop")),
            (control, wire.encode_state(2, 0.0, q, np.zeros(daemon.core.robot.nv))),
        ):
            try:
                socket.send(message, zmq.NOBLOCK)
            except zmq.Again:  # the daemon refused the handshake before the message was queued: it never left
                pass
        assert not admin.poll(500) and not control.poll(10), setup
        admin.close(linger=0)
        control.close(linger=0)
    assert daemon.core.mode == "idle"  # the refused stop never reached the daemon


def test_a_client_holding_only_the_servers_public_key_and_its_own_pair_is_served(
    curve_daemon, keys, tmp_path, monkeypatch
):
    """A remote driver's key directory holds server.key and client.key_secret only (no daemon secret key): it
    loads with a launch file, its client connects over CURVE and is served, and no client ever opens the daemon's
    secret key; a client directory without one of its files is refused, naming it."""
    ctx, daemon = curve_daemon
    remote = tmp_path / "remote"
    remote.mkdir(mode=0o700)
    for name in ("server.key", "client.key_secret"):
        shutil.copy(keys.path / name, remote / name)
    launch = tmp_path / "remote.toml"
    launch.write_text(
        'robot = "quadruped"\n[endpoints]\ncontrol = "tcp://192.168.1.20:15555"\n[security]\ncurve_keys = "remote"\n'
    )
    assert load_launch(launch).curve_keys == remote.resolve()
    opened: list[str] = []
    load_certificate = zmq.auth.load_certificate
    monkeypatch.setattr(
        zmq.auth, "load_certificate", lambda path: opened.append(Path(path).name) or load_certificate(path)
    )

    driver = ctx.socket(zmq.DEALER)
    driver.setsockopt(zmq.LINGER, 0)
    KeyDirectory(remote).make_client(driver)
    driver.connect(daemon.bound["control"])
    r = daemon.core.robot
    driver.send(wire.encode_hello(r.name, r.nq, r.nv, r.nu))
    assert driver.poll(2000) and msgpack.unpackb(driver.recv())["type"] == "welcome"
    driver.send(wire.encode_state(1, 0.0, r.standing_configuration(), np.zeros(r.nv)))
    assert driver.poll(2000) and msgpack.unpackb(driver.recv())["type"] == "command"
    driver.close(linger=0)
    local = ctx.socket(zmq.DEALER)
    keys.make_client(local)  # the daemon's machine's whole directory: a client still reads only its files
    local.close(linger=0)
    assert opened == ["client.key_secret", "server.key"] * 2

    for name, what in (("server.key", "the daemon's public key"), ("client.key_secret", "the client's key pair")):
        (remote / name).rename(remote / "away")
        socket = ctx.socket(zmq.DEALER)
        with pytest.raises(ConfigError, match=f"lacks {name} \\({what}\\), which a client needs"):
            KeyDirectory(remote).make_client(socket)
        with pytest.raises(ConfigError, match=f"lacks {name}"):
            load_launch(launch)
        socket.close(linger=0)
        (remote / "away").rename(remote / name)
    with pytest.raises(
        ConfigError, match=r"lacks server\.key_secret \(the daemon's key pair\), authorized/ .*, which the daemon needs"
    ):
        KeyDirectory(remote).make_server(ctx.socket(zmq.ROUTER))  # (closed with the context)


def test_non_loopback_endpoints_need_curve_keys(tmp_path, keys):
    """Without keys an address beyond loopback is refused with the command that makes keys; with a
    [security] key directory the launch file loads (its relative path resolved from the file)."""
    with pytest.raises(ConfigError, match="keys generate"):
        Endpoints(control="tcp://0.0.0.0:5555").check()
    Endpoints(control="tcp://0.0.0.0:5555").check(curve=True)
    text = """robot = "quadruped"
[endpoints]
control = "tcp://192.168.1.20:15555"
admin = "tcp://127.0.0.1:15556"
telemetry = "tcp://127.0.0.1:15557"
"""
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="not loopback"):
        load_launch(path)
    path.write_text(text + '[security]\ncurve_keys = "keys"\n')
    assert load_launch(path).curve_keys == Path(keys.path).resolve()
    path.write_text(text + '[security]\ncurve_keys = "missing"\n')
    with pytest.raises(ConfigError, match="keys generate"):
        load_launch(path)
