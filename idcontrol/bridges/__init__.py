"""Simulator bridges: physics back ends (:mod:`.mujoco_sim`) served to the daemon by :mod:`.loop`.

Back ends are imported lazily so the package imports without their optional dependencies.
"""
