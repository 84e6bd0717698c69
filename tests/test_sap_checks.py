"""`idcontrol experiment sap`: SAP's resting penetration and stiction slip with Drake, at CI length."""

from __future__ import annotations

import json
import os

import pytest

if os.environ.get("CI"):  # CI installs the drake extra: these tests must run there
    import pydrake  # noqa: F401
else:
    pytest.importorskip("pydrake", reason="the drake extra is not installed: pip install 'idcontrol[drake]'")

from idcontrol.tools.cli import main  # noqa: E402
from idcontrol.tools.experiments.sap import DIGEST_SLIP_M_S, Particle, run_checks  # noqa: E402


def test_sap_checks_are_within_20_percent_of_the_digest(tmp_path, capsys):
    """Resting penetration and both stiction slips land within 20 % of the digest's figures; JSON says so."""
    path = tmp_path / "sap.json"
    assert main(["experiment", "sap", "--seconds", "0.1", "--json", str(path)]) == 0
    out = json.loads(path.read_text())
    assert out["all_ok"] and len(out["checks"]) == 3
    for check in out["checks"]:
        assert abs(check["measured"] / check["expected"] - 1.0) <= 0.2, check
    assert "resting penetration" in capsys.readouterr().out


def test_stiction_slip_grows_with_the_push_and_sliding_starts_past_the_limit():
    """The creep is proportional to the push (0.99 / 0.5); past μ m g the particle slides and keeps speeding up."""
    checks = run_checks(0.1)
    half, most = checks[1].measured, checks[2].measured
    assert most / half == pytest.approx(0.99 / 0.5, rel=0.01)
    assert set(DIGEST_SLIP_M_S) == {0.5, 0.99}
    _, velocity = Particle(push_fraction=1.2).run(0.1)
    assert velocity[-1] > 0.1 and velocity[-1] > 1.5 * velocity[len(velocity) // 2] > 0  # accelerating
