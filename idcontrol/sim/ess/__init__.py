"""The ESS integrator (Anderson & Revzen) and the compliant multi-contact simulator built on it."""
