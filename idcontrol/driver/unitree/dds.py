"""Unitree SDK 2's message types on Cyclone DDS: the low-level topics, written and taken as raw samples.

The topics are registered with the SDK's own generated types (``unitree_sdk2py``), so a peer sees the type names
and type information Unitree's robots and tools use; the samples are the bytes of :mod:`.messages` (the same bytes
the SDK's ``serialize`` produces, checked by the tests), written and taken without the generated classes' 0.4 ms
Python serializer.

The ``unitree-sdk2`` 1.0.1 wheel's package ``__init__`` imports a subpackage (``b2``) the wheel does not contain,
so ``import unitree_sdk2py`` fails; its message types are imported here without running that ``__init__``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
import types
from dataclasses import dataclass
from typing import Any

from idcontrol.errors import ConfigError, MissingDependency

#: Unitree's low-level topics: the robot publishes its state, the controller its command
LOWSTATE_TOPIC, LOWCMD_TOPIC = "rt/lowstate", "rt/lowcmd"
#: what a Go-class robot's sport-mode service (its own walking controller) publishes while it runs
SPORTMODE_TOPIC = "rt/sportmodestate"
#: the message families: ``go`` (Go2, B2, and Go1/A1-class quadrupeds on SDK 2), ``hg`` (the humanoids: G1, H1-2)
FAMILIES = ("go", "hg")


class UnitreeSdkMissing(MissingDependency):
    """Unitree's SDK is not installed. Its wheel pins cyclonedds 0.10.2, which has no wheel for this Python, so the
    ``unitree`` extra brings cyclonedds and the SDK is installed without its pins."""

    def __init__(self, package: str) -> None:
        super().__init__(package, "unitree", "the Unitree driver and its simulator")
        self.args = (
            f"the Unitree driver and its simulator need {package}, which is not installed: "
            "pip install 'idcontrol[unitree]' && pip install --no-deps 'unitree-sdk2==1.0.1'",
        )


def _sdk_module(name: str) -> Any:
    """``unitree_sdk2py.NAME``, without the package's ``__init__`` (see the module docstring)."""
    if "unitree_sdk2py" not in sys.modules:
        spec = importlib.util.find_spec("unitree_sdk2py")
        if spec is None or not spec.submodule_search_locations:
            raise UnitreeSdkMissing("unitree-sdk2")
        package = types.ModuleType("unitree_sdk2py")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["unitree_sdk2py"] = package
    return importlib.import_module(f"unitree_sdk2py.{name}")


def message_types(family: str) -> tuple[type, type]:
    """The SDK's (LowCmd_, LowState_) classes of a family (``go`` or ``hg``)."""
    if family not in FAMILIES:
        raise ConfigError(f"message family must be one of {list(FAMILIES)}, got {family!r}")
    try:
        import cyclonedds  # noqa: F401
    except ImportError:
        raise UnitreeSdkMissing("cyclonedds") from None
    module = _sdk_module(f"idl.unitree_{family}.msg.dds_")
    return module.LowCmd_, module.LowState_


def cyclonedds_config(interface: str) -> str:
    """A Cyclone DDS configuration that uses one network interface. On the loopback interface (``lo``), which
    has no multicast, discovery goes by unicast to 127.0.0.1; on a robot's interface, by multicast as Unitree's
    robots do."""
    if interface in ("lo", "127.0.0.1", "localhost"):
        return (
            '<CycloneDDS><Domain Id="any"><General><Interfaces><NetworkInterface name="lo"/></Interfaces>'
            "<AllowMulticast>false</AllowMulticast></General><Discovery><Peers>"
            '<Peer address="127.0.0.1"/></Peers><ParticipantIndex>auto</ParticipantIndex>'
            "<MaxAutoParticipantIndex>32</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>"
        )
    return (
        f'<CycloneDDS><Domain Id="any"><General><Interfaces><NetworkInterface name="{interface}" '
        'priority="default" multicast="default"/></Interfaces></General></Domain></CycloneDDS>'
    )


def is_loopback(interface: str) -> bool:
    return interface in ("lo", "127.0.0.1", "localhost")


@dataclass
class Endpoint:
    """One side of the low-level link: a participant, a writer on one topic and a reader (with a wait set) on
    the other. ``publishes``: ``lowcmd`` (a controller) or ``lowstate`` (a robot or its simulator)."""

    participant: Any
    writer: Any
    reader: Any
    waitset: Any
    mask: int

    @classmethod
    def open(cls, family: str, interface: str, domain: int, publishes: str) -> Endpoint:
        if not 0 <= domain <= 232:
            raise ConfigError(f"DDS domain id must be in 0 .. 232, got {domain}")
        low_cmd, low_state = message_types(family)
        # Cyclone DDS reads its configuration when the first participant of the process is made
        os.environ["CYCLONEDDS_URI"] = cyclonedds_config(interface)
        from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState, WaitSet
        from cyclonedds.domain import DomainParticipant
        from cyclonedds.pub import DataWriter
        from cyclonedds.qos import Policy, Qos
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        participant = DomainParticipant(domain)
        cmd_topic = Topic(participant, LOWCMD_TOPIC, low_cmd)
        state_topic = Topic(participant, LOWSTATE_TOPIC, low_state)
        out_topic, in_topic = (cmd_topic, state_topic) if publishes == "lowcmd" else (state_topic, cmd_topic)
        writer = DataWriter(participant, out_topic)  # the DDS defaults, as the SDK's publishers
        reader = DataReader(participant, in_topic, Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(1)))
        mask = SampleState.Any | ViewState.Any | InstanceState.Any
        waitset = WaitSet(participant)
        waitset.attach(ReadCondition(reader, mask))
        return cls(participant, writer, reader, waitset, mask)

    def sport_mode_running(self, timeout_s: float) -> bool:
        """Whether a sport-mode service publishes ``rt/sportmodestate`` on this domain (waits up to ``timeout_s``)."""
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        module = _sdk_module("idl.unitree_go.msg.dds_")
        reader = DataReader(self.participant, Topic(self.participant, SPORTMODE_TOPIC, module.SportModeState_))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if reader.take(N=1):
                return True
            time.sleep(0.02)
        return False

    def sport_mode_writer(self) -> Any:
        """A writer of ``rt/sportmodestate`` and one sample of it (a simulator playing a robot whose sport-mode
        service runs)."""
        from cyclonedds.pub import DataWriter
        from cyclonedds.topic import Topic

        module = _sdk_module("idl.unitree_go.msg.dds_")
        defaults = _sdk_module("idl.default")
        writer = DataWriter(self.participant, Topic(self.participant, SPORTMODE_TOPIC, module.SportModeState_))
        return writer, defaults.unitree_go_msg_dds__SportModeState_()

    def write(self, sample: bytes) -> None:
        from cyclonedds._clayer import ddspy_write

        ret = ddspy_write(self.writer._ref, sample)
        if ret < 0:
            raise ConfigError(f"DDS write failed ({ret})")

    def take(self) -> bytes | None:
        """The newest sample received since the last take, or None."""
        from cyclonedds._clayer import ddspy_take

        got = ddspy_take(self.reader._ref, self.mask, 8)
        if isinstance(got, int) or not got:
            return None
        valid = [data for data, info in got if info.valid_data]
        return valid[-1] if valid else None

    def wait(self, timeout_s: float) -> bytes | None:
        """The newest sample, waiting up to ``timeout_s`` for one."""
        sample = self.take()
        if sample is not None or timeout_s <= 0:
            return sample
        from cyclonedds.util import duration

        self.waitset.wait(duration(microseconds=int(timeout_s * 1e6)))
        return self.take()

    def matched(self) -> int:
        """Peers whose reader matches this writer (a started simulator or robot is one)."""
        return len(self.writer.get_matched_subscriptions())
