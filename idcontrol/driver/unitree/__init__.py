"""Unitree robots behind the driver SDK: ``idcontrol driver unitree`` and its simulator (docs/unitree.md).

* :mod:`.messages`: the low-level messages (``unitree_go``, ``unitree_hg``) as preallocated buffers, their CRC;
* :mod:`.dds`: the SDK's message types on Cyclone DDS, the topics ``rt/lowstate`` and ``rt/lowcmd``;
* :mod:`.motors`: Unitree's motor order against a robot file's joints;
* :mod:`.driver`: the driver (torque only, the motors' damping when the daemon does not drive them);
* :mod:`.simulator`: a simulated robot on the same topics, MuJoCo behind it;
* :mod:`.app`: the two command lines.

An edge of the package: nothing but the command line imports it, and it needs the ``unitree`` extra (cyclonedds)
and Unitree's SDK (``unitree-sdk2``), imported only when a driver or simulator starts.
"""
