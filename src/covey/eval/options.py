"""Parsing of `covey eval` options that are checked before any model loads: `--k`, `--shard`."""

from __future__ import annotations

__all__ = ["parse_ks", "parse_shard", "pow2_ks"]


def pow2_ks(n: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to n, and n itself when it is not a power of two.

    >>> pow2_ks(8), pow2_ks(300)[-3:], pow2_ks(1)
    ((1, 2, 4, 8), (128, 256, 300), (1,))
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ks = [1 << e for e in range(n.bit_length()) if 1 << e <= n]
    return tuple(ks if ks[-1] == n else ks + [n])


def parse_ks(spec: str, n: int) -> tuple[int, ...]:
    """`--k`: "pow2" or comma-separated ints, each in 1..n (ValueError with a one-line message)."""
    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    if spec.strip().lower() == "pow2":
        return pow2_ks(n)
    try:
        ks = tuple(int(x) for x in spec.split(","))
    except ValueError:
        raise ValueError(f"--k must be comma-separated integers (e.g. 1,4,8), got {spec!r} (or pow2: 1, 2, 4, ..., n)") from None
    if any(k < 1 for k in ks):
        raise ValueError(f"every k must be >= 1; got k={spec}")
    if any(k > n for k in ks):
        raise ValueError(f"every k must be <= n={n}; got k={spec}")
    return ks


def parse_shard(spec: str | None) -> tuple[int, int]:
    """`--shard i/m` -> (i, m) with 0 <= i < m; None -> (0, 1)."""
    if spec is None:
        return 0, 1
    try:
        i, m = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard must be i/m (e.g. 0/4), got {spec!r}") from None
    if not 0 <= i < m:
        raise ValueError(f"--shard i/m needs 0 <= i < m, got {spec!r}")
    return i, m
