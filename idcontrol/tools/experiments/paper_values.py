"""The paper's published results (Zapolsky & Drumwright, Section 8, Tables 3-5), for the report's comparison."""

from __future__ import annotations

# The paper's numbers (Section 8; ``None``: "−", the quadruped fell). Keys: terrain, then controller.
PAPER_TABLE3: dict[str, dict[str, tuple[float, float] | None]] = {
    "rigid_low": {
        "qp_mu": (0.0310, 1.9425),
        "qp_inf": (0.0483, 2.6295),
        "lcp_mu": (0.0239, 1.8386),
        "lcp_inf": None,
        "pid": (0.0895, 1.5569),
        "sensed_1": (0.0325, 1.7952),
        "sensed_2": (0.0328, 1.7830),
    },
    "rigid_high": {
        "qp_mu": (0.0486, 2.2596),
        "qp_inf": (0.0654, 2.5737),
        "lcp_mu": (0.0259, 1.8784),
        "lcp_inf": (0.0260, 1.8950),
        "pid": (0.0916, 1.4653),
        "sensed_1": (0.1317, 2.5585),
        "sensed_2": (0.1316, 2.5608),
    },
    "compliant_low": {
        "qp_mu": (0.0217, 2.0365),
        "qp_inf": None,
        "lcp_mu": (0.0219, 2.0786),
        "lcp_inf": None,
        "pid": (0.0850, 1.5845),
        "sensed_1": (0.0265, 1.8858),
        "sensed_2": (0.0267, 1.8742),
    },
    "compliant_high": {
        "qp_mu": (0.0342, 2.9360),
        "qp_inf": (0.0446, 3.9779),
        "lcp_mu": (0.0226, 2.1243),
        "lcp_inf": None,
        "pid": (0.0850, 1.5845),
        "sensed_1": (0.1270, 4.4377),
        "sensed_2": (0.1270, 4.2061),
    },
}
#: Table 4: E|Δτ| (N·m/s, presumably), E|τ| (N·m); the paper does not say on which terrain.
PAPER_TABLE4: dict[str, tuple[float, float]] = {
    "qp_mu": (52.5718, 0.2016),
    "qp_inf": (245.5117, 0.4239),
    "lcp_mu": (677.9693, 0.8351),
    "lcp_inf": (351.1803, 0.4055),
    "sensed_1": (974.3312, 0.9918),
    "sensed_2": (17528.0, 2.7416),
    "pid": (100.1571, 0.3413),
}
#: Table 5: absolute (N) and relative (fraction) error of the summed normal force.
PAPER_TABLE5: dict[str, dict[str, tuple[float, float] | None]] = {
    "rigid_low": {"qp_mu": (3.8009, 0.1253), "qp_inf": (8.4567, 0.2226), "lcp_mu": (0.9371, 0.0194), "lcp_inf": None},
    "rigid_high": {
        "qp_mu": (13.8457, 0.2748),
        "qp_inf": (12.4153, 0.2526),
        "lcp_mu": (1.2768, 0.0155),
        "lcp_inf": (0.3572, 0.0116),
    },
    "compliant_low": {"qp_mu": (7.8260, 0.1712), "qp_inf": None, "lcp_mu": (4.6385, 0.0637), "lcp_inf": None},
    "compliant_high": {
        "qp_mu": (14.9225, 0.3086),
        "qp_inf": (15.1897, 0.3066),
        "lcp_mu": (12.4896, 0.2400),
        "lcp_inf": None,
    },
}
