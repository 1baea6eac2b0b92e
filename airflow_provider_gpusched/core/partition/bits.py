"""Sets of layer positions as the bits of an int: what the exact solver and the integer program share."""

from __future__ import annotations


def bit_positions(bits: int) -> list[int]:
    """The positions of the set bits, lowest first."""
    positions = []
    while bits:
        low = bits & -bits
        positions.append(low.bit_length() - 1)
        bits ^= low
    return positions
