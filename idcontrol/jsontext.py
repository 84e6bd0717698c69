"""JSON text that strict parsers read: NaN and ±inf (a statistic without samples, a quantity never measured) are
written as null, since JSON has no such numbers and Python's own encoder writes the invalid tokens NaN and Infinity."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float, in any nesting of dicts, lists and tuples, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:  # a numpy scalar
        return finite(value.item())
    return value


def dumps(value: Any, **options: Any) -> str:
    """:func:`json.dumps` of :func:`finite` ``value``, refusing any non-finite number left (``options``: indent...)."""
    return json.dumps(finite(value), allow_nan=False, **options)
