"""Kubernetes resource quantities ("100m", "1Gi", "8") as exact numbers, for scheduling arithmetic."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}  # fmt: skip


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity; raises ValueError on a malformed one (the caller turns it into 422)."""
    if isinstance(value, int | float):
        return Fraction(value)
    text = str(value).strip()
    if not text:
        raise ValueError("quantity is empty")
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return _number(text[: -len(suffix)]) * factor
    if text[-1] in "numkMGTPE" and not text[-1].isdigit():
        return _number(text[:-1]) * _DECIMAL[text[-1]]
    return _number(text)


def _number(text: str) -> Fraction:
    try:
        return Fraction(Decimal(text))
    except (InvalidOperation, ValueError) as exc:
        raise ValueError(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        ) from exc


def is_valid_quantity(value: object) -> bool:
    try:
        parse_quantity(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False
    return True


def milli_value(value: str | int | float) -> int:
    """The quantity in thousandths, rounded up (apimachinery's MilliValue): exact integer arithmetic that is
    fast enough to compare allocatable and requests across a thousand nodes per pod."""
    q = parse_quantity(value) * 1000
    return -((-q.numerator) // q.denominator)
