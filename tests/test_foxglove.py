"""The live view in Foxglove and the same topics in the MCAP log: a real daemon, bridge, live view process and
log writer, and a client speaking the Foxglove WebSocket protocol."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader

from idcontrol.errors import ConfigError
from idcontrol.logs import foxglove as fox
from idcontrol.logs.reader import read_log
from idcontrol.robot.model import RobotModel
from idcontrol.settings import load_launch
from idcontrol.tools.live import FoxgloveClient, connect_live, layout_json, paired_shift, spawn_live
from idcontrol.tools.ports import free_ports
from tests.test_launch import launch_file, spawn, stop, wait_for

ROOT = Path(__file__).resolve().parents[1]


def record(robot: RobotModel, now: float, late: bool = False) -> dict:
    q = robot.standing_configuration()
    return {
        "now": now,
        "t": now,
        "q": q,
        "qd": np.zeros(robot.nv),
        "tau": np.zeros(robot.nu),
        "compute_us": 100.0,
        "last_late": late,
        "last_rtt_us": None if late else 300.0,
        "mode": "run",
        "formulation": "two_stage_qp",
        "note": "",
        "contact_points": np.zeros((4, 3)),
        "force_world": np.tile([0.0, 0.0, 12.0], (4, 1)),
        "sensed_forces": np.tile([0.0, 0.0, 11.0], (4, 1)),
        "contact_ids": ["LF_foot/floor"] * 4,
    }


def test_view_publishes_at_50_hz_and_counts_every_tick_in_the_deadline_statistics(quadruped):
    """2 s of 1 kHz records give 100 messages per topic (the model once a second), and the deadline messages add
    up to every record, late ones included."""
    view = fox.FoxgloveView(quadruped)
    out: dict[str, list] = {}
    for i in range(2000):
        for topic, message, _ in view.feed(record(quadruped, i * 1e-3, late=i % 100 == 0)):
            out.setdefault(topic, []).append(message)
    assert {len(out[t]) for t in (fox.TF_TOPIC, fox.JOINTS_TOPIC, fox.FORCES_TOPIC, fox.DEADLINES_TOPIC)} == {100}
    assert len(out[fox.ROBOT_TOPIC]) == 2 and len(out[fox.DESCRIPTION_TOPIC]) == 2
    deadlines = out[fox.DEADLINES_TOPIC]
    assert sum(d["ticks"] for d in deadlines) == deadlines[-1]["ticks_total"] == 2000 - 19  # the last window is open
    assert deadlines[-1]["late_total"] == 20
    arrows = out[fox.FORCES_TOPIC][-1]["entities"][0]["arrows"]
    assert len(arrows) == 4
    o = arrows[0]["pose"]["orientation"]  # +x turned onto +z: a quarter turn about -y
    np.testing.assert_allclose([o["x"], o["y"], o["z"], o["w"]], [0, -np.sqrt(0.5), 0, np.sqrt(0.5)], atol=1e-9)
    assert arrows[0]["shaft_length"] + arrows[0]["head_length"] == pytest.approx(0.01 * 12.0 / fox.NEWTONS_PER_CM)


def test_the_paired_shift_takes_out_a_drifting_machine_and_its_interval_holds_the_true_shift():
    drift = 300.0 + 4.0 * np.arange(21)  # a machine slowing by 4 µs a segment: off, on, off, ..., off
    exact = paired_shift(list(drift + 7.0 * (np.arange(21) % 2)))
    assert exact["pairs"] == 10
    assert exact["p99_shift_us"] == pytest.approx(7.0)
    assert exact["p99_shift_interval_us"] == pytest.approx((7.0, 7.0))
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(200):
        noisy = paired_shift(list(drift + 7.0 * (np.arange(21) % 2) + rng.normal(0.0, 10.0, 21)))
        low, high = noisy["p99_shift_interval_us"]
        covered += low <= 7.0 <= high
    assert 180 <= covered <= 200  # a 95 % interval: 190 of 200 expected
    assert paired_shift([300.0, 310.0])["p99_shift_interval_us"] is None  # one pair: no interval


def test_every_link_with_a_visual_gets_a_transform_and_its_shapes(quadruped):
    """The URDF's visual boxes, cylinders and spheres are drawn on the links /tf moves, at forward kinematics."""
    view = fox.FoxgloveView(quadruped)
    messages = {topic: m for topic, m, _ in view.feed(record(quadruped, 0.0))}
    frames = {t["child_frame_id"]: t for t in messages[fox.TF_TOPIC]["transforms"]}
    drawn = {e["frame_id"] for e in messages[fox.ROBOT_TOPIC]["entities"]}
    assert drawn <= set(frames) and len(drawn) >= 9  # base and the legs' links
    quadruped.update(quadruped.standing_configuration(), np.zeros(quadruped.nv))
    foot = quadruped.model.getFrameId("LF_foot")
    expected = quadruped.data.oMf[foot].translation
    got = frames["LF_foot"]["translation"]
    np.testing.assert_allclose([got["x"], got["y"], got["z"]], expected, atol=1e-12)


def test_live_view_serves_every_channel_and_the_log_holds_the_same_topics_and_schemas(tmp_path):
    """A daemon logging to MCAP, its bridge, and the live view process: a Foxglove WebSocket client receives
    messages on every channel (robot, transforms, force arrows, joints, status, deadlines, URDF), and the log has
    the same topics with the same schema names and schemas, so a recorded run looks like a live one."""
    path, endpoints = launch_file(tmp_path)
    log = tmp_path / "run.mcap"
    port = free_ports(1)[0]
    daemon = spawn("daemon", str(path), "--log", str(log))
    from idcontrol.client import AdminClient

    admin = AdminClient(endpoints["admin"], credential_for=endpoints["control"])
    bridge = live = client = None
    try:
        wait_for(admin, lambda s: True)
        live = spawn_live(path, port)
        bridge = spawn("bridge", str(path))
        wait_for(admin, lambda s: s["bridge_connected"])
        admin.request("start")
        client = connect_live(port, 60.0)
        deadline = time.monotonic() + 60.0
        while not client.receives_all() and time.monotonic() < deadline:
            time.sleep(0.05)
        advertised = client.topics()
        assert set(advertised) == set(fox.SCHEMAS) and client.receives_all(), client.counts
        assert advertised[fox.TF_TOPIC] == "foxglove.FrameTransforms"
        assert advertised[fox.FORCES_TOPIC] == advertised[fox.ROBOT_TOPIC] == "foxglove.SceneUpdate"
        wait_for(admin, lambda s: s["t"] > 0.3)
        time.sleep(0.2)
        status, joints = client.message(fox.STATUS_TOPIC), client.message(fox.JOINTS_TOPIC)
        assert status["mode"] == "run" and status["formulation"] == "two_stage_qp" and status["contacts"] == 4
        assert len(joints["name"]) == len(joints["position"]) == len(joints["effort"]) == 12
        forces = {e["id"]: e["arrows"] for e in client.message(fox.FORCES_TOPIC)["entities"]}
        assert len(forces["forces/predicted"]) == 4 and len(forces["forces/sensed"]) == 4
        assert client.message(fox.DEADLINES_TOPIC)["ticks_total"] > 100
        if hasattr(os, "SCHED_IDLE"):  # an observer: it runs only on CPU time the daemon and bridge leave
            assert os.sched_getscheduler(live.pid) == os.SCHED_IDLE
        schemas_live = {c["topic"]: (c["schemaName"], json.loads(c["schema"])) for c in client.channels.values()}
        admin.request("stop")
        wait_for(admin, lambda s: s["mode"] == "stopped")
        admin.request("shutdown")
        daemon.wait(timeout=30)
    finally:
        if client is not None:
            client.close()
        admin.close()
        for p in (live, bridge, daemon):
            if p is not None:
                stop(p)
    with open(log, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        logged = {
            c.topic: (summary.schemas[c.schema_id].name, json.loads(summary.schemas[c.schema_id].data))
            for c in summary.channels.values()
        }
        counts = summary.statistics.channel_message_counts
        per_topic = {c.topic: counts.get(c.id, 0) for c in summary.channels.values()}
    for topic, (name, schema) in schemas_live.items():
        assert logged[topic] == (name, schema), topic
        assert per_topic[topic] > 0, topic
    assert {"/idcontrol/tick", "/idcontrol/config"} <= set(logged)  # the log's own topics stay
    now = read_log(log).array("now")  # the daemon's clock: at most one message per 1/50 s of it that had a tick
    slots = len(np.unique(np.floor(now * fox.LIVE_RATE_HZ + 1e-6)))
    assert per_topic[fox.TF_TOPIC] == slots


def test_the_layout_file_is_the_generated_one_and_names_only_published_topics():
    """docs/foxglove-layout.json is what ``layout_json()`` builds, and every topic it shows is one the view
    publishes."""
    text = (ROOT / "docs" / "foxglove-layout.json").read_text()
    assert text == layout_json()
    named = {t for t in fox.SCHEMAS if t in text}
    assert {fox.ROBOT_TOPIC, fox.FORCES_TOPIC, fox.JOINTS_TOPIC, fox.DEADLINES_TOPIC, fox.STATUS_TOPIC} <= named
    for path in json.loads(text)["content"]["items"][1]["content"]["items"]:
        config = path["content"]["config"]
        for series in config.get("paths", []):
            assert series["value"].split(".")[0] in fox.SCHEMAS


def test_telemetry_foxglove_port_is_checked_when_the_launch_file_is_read(tmp_path):
    """[telemetry] foxglove takes a TCP port, foxglove_origins web origins (scheme and host), foxglove_viewers a
    count and foxglove_programs a boolean; anything else fails at load time naming the key."""
    path, _ = launch_file(tmp_path)
    path.write_text(path.read_text() + "\n[telemetry]\nfoxglove = 8765\n")
    assert load_launch(path).telemetry.foxglove == 8765
    path.write_text(path.read_text().replace("foxglove = 8765", "foxglove = 70000"))
    with pytest.raises(ConfigError, match="telemetry.foxglove"):
        load_launch(path)
    for bad in (
        'foxglove_origins = ["app.foxglove.dev"]',
        'foxglove_origins = ["https://x.example/path"]',
        "foxglove_viewers = 0",
        "foxglove_programs = 1",
    ):
        path.write_text(
            path.read_text().replace("foxglove = 70000", "foxglove = 8765").split("[telemetry]")[0]
            + f"[telemetry]\nfoxglove = 8765\n{bad}\n"
        )
        with pytest.raises(ConfigError, match="telemetry.foxglove_"):
            load_launch(path)


def test_the_client_speaks_the_protocol_to_an_sdk_server_directly():
    """The test client against a bare foxglove-sdk server: it subscribes to an advertised channel and decodes
    a logged JSON message (the client itself is checked, not only the live view)."""
    import foxglove

    port = free_ports(1)[0]
    server = foxglove.start_server(host="127.0.0.1", port=port)
    channel = foxglove.Channel("/probe", schema={"type": "object"}, message_encoding="json")
    client = FoxgloveClient(f"ws://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 10
        while not client.receives_all() and time.monotonic() < deadline:
            channel.log({"x": 1.5})
            time.sleep(0.05)
        assert client.message("/probe") == {"x": 1.5}
    finally:
        client.close()
        channel.close()
        server.stop()


def test_launch_with_foxglove_starts_the_live_view_beside_the_run_and_stops_it(tmp_path):
    """`idcontrol launch FILE --foxglove PORT` serves the live view while the run goes on, and ends cleanly."""
    import subprocess
    import sys

    path, _ = launch_file(tmp_path)
    port = free_ports(1)[0]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "idcontrol",
            "launch",
            str(path),
            "--duration",
            "0.3",
            "--quiet",
            "--foxglove",
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"live view: ws://127.0.0.1:{port}" in out.stderr and "deadline misses" in out.stdout
