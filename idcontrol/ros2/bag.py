"""``idcontrol log export LOG --ros2``: a tick log as an MCAP file with ROS 2 message encodings (CDR, profile
``ros2``), which ``ros2 bag`` (with its MCAP storage plugin) and Foxglove's ROS panels read.

Needs ``mcap-ros2-support`` only (the message definitions are written here), not rclpy. One message per tick on
each topic, stamped with the bridge's time of the state (``t``, s → ns):

* ``/joint_states`` ``sensor_msgs/msg/JointState``: actuated joints, position rad, velocity rad/s;
* ``/joint_commands`` ``sensor_msgs/msg/JointState``: the tick's torque as ``effort``, N·m;
* ``/odom`` ``nav_msgs/msg/Odometry`` (floating base): base pose in ``world``, twist in the base frame;
* ``/contacts/predicted/<sphere>`` ``geometry_msgs/msg/WrenchStamped``: predicted force per contact sphere,
  world frame, N (run-mode ticks whose solve found one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from idcontrol.errors import LogError

_SEP = "=" * 80
_TIME = "int32 sec\nuint32 nanosec\n"
_HEADER = "builtin_interfaces/Time stamp\nstring frame_id\n"
_VECTOR3 = "float64 x\nfloat64 y\nfloat64 z\n"


def _definition(main: str, *dependencies: tuple[str, str]) -> str:
    return main + "".join(f"{_SEP}\nMSG: {name}\n{text}" for name, text in dependencies)


#: ROS 2 message definitions (the concatenated form ``ros2 bag`` writes), by type.
DEFINITIONS = {
    "sensor_msgs/msg/JointState": _definition(
        "std_msgs/Header header\nstring[] name\nfloat64[] position\nfloat64[] velocity\nfloat64[] effort\n",
        ("std_msgs/Header", _HEADER),
        ("builtin_interfaces/Time", _TIME),
    ),
    "nav_msgs/msg/Odometry": _definition(
        "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/PoseWithCovariance pose\n"
        "geometry_msgs/TwistWithCovariance twist\n",
        ("std_msgs/Header", _HEADER),
        ("builtin_interfaces/Time", _TIME),
        ("geometry_msgs/PoseWithCovariance", "Pose pose\nfloat64[36] covariance\n"),
        ("geometry_msgs/Pose", "Point position\nQuaternion orientation\n"),
        ("geometry_msgs/Point", _VECTOR3),
        ("geometry_msgs/Quaternion", "float64 x 0\nfloat64 y 0\nfloat64 z 0\nfloat64 w 1\n"),
        ("geometry_msgs/TwistWithCovariance", "Twist twist\nfloat64[36] covariance\n"),
        ("geometry_msgs/Twist", "Vector3 linear\nVector3 angular\n"),
        ("geometry_msgs/Vector3", _VECTOR3),
    ),
    "geometry_msgs/msg/WrenchStamped": _definition(
        "std_msgs/Header header\nWrench wrench\n",
        ("std_msgs/Header", _HEADER),
        ("builtin_interfaces/Time", _TIME),
        ("geometry_msgs/Wrench", "Vector3 force\nVector3 torque\n"),
        ("geometry_msgs/Vector3", _VECTOR3),
    ),
}


def _header(t_s: float, frame: str = "") -> dict:
    sec = int(np.floor(t_s))
    return {"stamp": {"sec": sec, "nanosec": int(round((t_s - sec) * 1e9)) % 1_000_000_000}, "frame_id": frame}


def _xyz(v: np.ndarray) -> dict:
    return {"x": float(v[0]), "y": float(v[1]), "z": float(v[2])}


def export_ros2(path: str | Path, output: str | Path | None = None) -> Path:
    """Write the log at ``path`` as a ROS 2 MCAP file at ``output`` (default: ``<log>.ros2.mcap``); returns it."""
    try:
        from mcap_ros2.writer import Writer
    except ImportError:
        raise LogError("idcontrol log export --ros2 needs mcap-ros2-support: pip install 'idcontrol[ros2]'") from None
    from idcontrol.logs.reader import read_log
    from idcontrol.robot.model import RobotModel

    log = read_log(path)
    out = Path(output) if output else Path(path).with_suffix(".ros2.mcap")
    if out.exists():
        raise LogError(f"{out} already exists; choose another name with -o")
    robot_name = log.config.get("robot")
    if not robot_name:
        raise LogError(f"{path}: the log does not name its robot")
    robot = RobotModel(str(robot_name))
    joints, spheres = list(robot.actuated_joints), list(robot.sphere_names)
    idx_q, idx_v = np.asarray(robot.actuated_idx_q), np.asarray(robot.actuated_dofs)
    t, q, qd, tau = log.array("t"), log.array("q"), log.array("qd"), log.array("tau")
    forces = log.array("force_world") if "force_world" in log.fields() else None
    ids = log.array("contact_ids") if forces is not None else None
    with open(out, "wb") as f:
        writer = Writer(f)
        schemas = {name: writer.register_msgdef(name, text) for name, text in DEFINITIONS.items()}
        for i in range(len(log)):
            stamp_ns = int(round(t[i] * 1e9))
            header = _header(float(t[i]))
            writer.write_message(
                "/joint_states",
                schemas["sensor_msgs/msg/JointState"],
                {
                    "header": header,
                    "name": joints,
                    "position": q[i, idx_q].tolist(),
                    "velocity": qd[i, idx_v].tolist(),
                    "effort": [],
                },
                log_time=stamp_ns,
                sequence=i,
            )
            writer.write_message(
                "/joint_commands",
                schemas["sensor_msgs/msg/JointState"],
                {"header": header, "name": joints, "position": [], "velocity": [], "effort": tau[i].tolist()},
                log_time=stamp_ns,
                sequence=i,
            )
            if robot.floating_base:
                x = q[i]
                v = qd[i]
                writer.write_message(
                    "/odom",
                    schemas["nav_msgs/msg/Odometry"],
                    {
                        "header": _header(float(t[i]), "world"),
                        "child_frame_id": "base",
                        "pose": {
                            "pose": {"position": _xyz(x[:3]), "orientation": {**_xyz(x[3:6]), "w": float(x[6])}},
                            "covariance": [0.0] * 36,
                        },
                        "twist": {"twist": {"linear": _xyz(v[:3]), "angular": _xyz(v[3:6])}, "covariance": [0.0] * 36},
                    },
                    log_time=stamp_ns,
                    sequence=i,
                )
            if forces is not None and ids is not None:
                per_sphere: dict[str, np.ndarray] = {}
                for label, force in zip(ids[i], forces[i], strict=True):
                    sphere = str(label).split("/", 1)[0]
                    if sphere in spheres and np.all(np.isfinite(force)):
                        per_sphere[sphere] = per_sphere.get(sphere, np.zeros(3)) + force
                wrench = schemas["geometry_msgs/msg/WrenchStamped"]
                for sphere, force in per_sphere.items():
                    message = {
                        "header": _header(float(t[i]), "world"),
                        "wrench": {"force": _xyz(force), "torque": _xyz(np.zeros(3))},
                    }
                    writer.write_message(
                        f"/contacts/predicted/{sphere}", wrench, message, log_time=stamp_ns, sequence=i
                    )
        writer.finish()
    return out
