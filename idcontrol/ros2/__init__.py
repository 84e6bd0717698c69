"""The ROS 2 edge (the ``ros2`` extra): idcontrol where ROS 2 robots, planners and tools already are.

* :mod:`idcontrol.ros2.node`: ``idcontrol ros2 LAUNCH_FILE``, a node beside the daemon (a client of its protocol,
  holding its credential) that publishes the daemon's ticks as standard messages and takes trajectories, velocity
  commands, start/stop and parameters from ROS 2;
* :mod:`idcontrol.ros2.robot`: a robot that lives in ROS 2 (``JointState`` + ``Imu`` out, efforts in on a
  ``Float64MultiArray``) as a driver of the daemon, through the driver SDK; and a MuJoCo robot that speaks those
  topics (:mod:`idcontrol.ros2.sim_robot`);
* :mod:`idcontrol.ros2.latency`: what a ROS 2 hop costs, measured;
* :mod:`idcontrol.ros2.bag`: tick logs as MCAP with ROS 2 message encodings (``idcontrol log export --ros2``; needs
  ``mcap-ros2-support`` only, not rclpy).

Nothing outside this package and the command line imports it; topics, QoS and services: docs/ros2.md.
"""

from __future__ import annotations

from idcontrol.errors import ConfigError

EXTRA_HINT = "pip install 'idcontrol[ros2]'"


def require_rclpy() -> None:
    """Raise ConfigError naming the extra when rclpy or the message packages are not installed."""
    try:
        import diagnostic_msgs.msg  # noqa: F401
        import geometry_msgs.msg  # noqa: F401
        import nav_msgs.msg  # noqa: F401
        import rclpy  # noqa: F401
        import sensor_msgs.msg  # noqa: F401
        import std_msgs.msg  # noqa: F401
        import std_srvs.srv  # noqa: F401
        import trajectory_msgs.msg  # noqa: F401
    except ImportError as e:
        raise ConfigError(
            f"the ROS 2 node needs rclpy and the standard messages ({e.name} is missing): {EXTRA_HINT}"
        ) from None


class Spinner:
    """Runs a node's callbacks in a thread of their own (rclpy's single-threaded executor, woken at least every
    50 ms to see :meth:`stop`). rclpy's experimental events executor was tried: its spin does not return to a
    completed future or a shutdown here (rclpy 9.1), so it is not used."""

    def __init__(self, node: object, context: object, name: str = "ros2-spin") -> None:
        import threading

        from rclpy.executors import SingleThreadedExecutor

        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(node)
        self.context = context
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, name=name, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            while not self._stop.is_set() and self.context.ok():  # type: ignore[attr-defined]
                self.executor.spin_once(timeout_sec=0.05)
        except ExternalShutdownException:  # the context was shut down: the node is closing
            pass

    def stop(self) -> None:
        """Stop the executor and wait for its thread (2 s at most)."""
        self._stop.set()
        self.thread.join(timeout=2.0)
