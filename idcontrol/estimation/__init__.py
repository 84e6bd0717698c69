"""Floating-base state estimation from what a legged robot measures: joint encoders, an IMU, foot contacts.

Pure and synchronous, below the control core: :class:`BaseEstimator` turns a :class:`SensorReading` into an
:class:`Estimate` (Pinocchio's q and v, the covariance, a health verdict). The filters: the contact-aided
invariant EKF (:mod:`idcontrol.estimation.inekf`, the default) and MIT Cheetah 3's linear Kalman filter
(:mod:`idcontrol.estimation.lkf`). docs/estimation.md describes the model, its noise and how to tune it.
"""

from idcontrol.estimation.estimator import FILTERS, BaseEstimator
from idcontrol.estimation.types import (
    Estimate,
    EstimatorSettings,
    ExternalPose,
    HealthBounds,
    NoiseModel,
    SensorReading,
)

__all__ = [
    "FILTERS",
    "BaseEstimator",
    "Estimate",
    "EstimatorSettings",
    "ExternalPose",
    "HealthBounds",
    "NoiseModel",
    "SensorReading",
]
