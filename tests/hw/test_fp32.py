"""The RTL binary32 adder against numpy float32 addition (bit for bit; NaNs by NaN-ness and quiet bit)."""

import platform

import numpy as np
import pytest

pytest.importorskip("amaranth")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from panama.hw import fp32_add, same_float_bits  # noqa: E402

SPECIALS = np.array(
    [
        0x00000000,
        0x80000000,  # signed zeros
        0x00000001,
        0x80000001,
        0x00000002,
        0x00000003,
        0x007FFFFF,
        0x807FFFFF,
        0x00400000,
        0x00400001,  # subnormals
        0x00800000,
        0x80800000,
        0x00800001,
        0x00FFFFFF,  # smallest normals
        0x3F800000,
        0xBF800000,
        0x3F800001,
        0xBF7FFFFF,
        0x33800000,
        0x33800001,
        0xB3800000,
        0x34000000,  # 1, ulps, ties
        0x4B000000,
        0x4B000001,
        0xCB000001,
        0x3F000000,  # 2^23 (ties at integer rounding), 0.5
        0x7F7FFFFF,
        0xFF7FFFFF,
        0x7F7FFFFE,
        0x7F000000,
        0x73800000,  # max finite (overflow)
        0x7F800000,
        0xFF800000,  # infinities
        0x7FC00000,
        0xFFC00000,
        0x7F800001,
        0xFF800001,
        0x7FC12345,
        0x7FBFFFFF,  # quiet and signalling NaNs
        0x40490FDB,
        0xC0490FDB,
        0x3EAAAAAB,
        0xBEAAAAAB,  # pi, 1/3 (cancellation)
    ],
    dtype=np.uint32,
)


def _numpy(a, b):
    with np.errstate(all="ignore"):
        return a + b


def _check(a_bits, b_bits):
    a = np.asarray(a_bits, dtype=np.uint32).view(np.float32)
    b = np.asarray(b_bits, dtype=np.uint32).view(np.float32)
    got = fp32_add(a, b, lanes=8)
    want = _numpy(a, b)
    ok = same_float_bits(got, want)
    bad = np.flatnonzero(~ok)[:5]
    assert ok.all(), [
        (
            hex(int(a.view(np.uint32)[i])),
            hex(int(b.view(np.uint32)[i])),
            hex(int(got.view(np.uint32)[i])),
            hex(int(want.view(np.uint32)[i])),
        )
        for i in bad
    ]
    return got, want


def test_special_value_corpus_all_pairs():
    a, b = np.meshgrid(SPECIALS, SPECIALS)
    got, want = _check(a.ravel(), b.ravel())
    gb = got.view(np.uint32)
    # every NaN out is quiet, and on x86 numpy's NaN (first NaN operand quieted, else the
    # default NaN) is reproduced bit for bit
    nan = np.isnan(got)
    assert nan.any() and (gb[nan] & 0x00400000).all()
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert (gb == want.view(np.uint32)).all()


def test_random_bit_patterns_and_near_cancellation():
    rng = np.random.default_rng(17)
    n = 3000
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    # half the pairs: b is a with low mantissa bits flipped and maybe the sign (cancellation, close exponents)
    b[: n // 2] = (
        a[: n // 2]
        ^ rng.integers(0, 2**24, n // 2).astype(np.uint32)
        ^ (rng.integers(0, 2, n // 2).astype(np.uint32) << 31)
    )
    _check(a, b)


def test_subnormal_pairs_and_rounding_ties():
    rng = np.random.default_rng(3)
    sub = rng.integers(0, 0x00800000, 600).astype(np.uint32) | (rng.integers(0, 2, 600).astype(np.uint32) << 31)
    small = rng.integers(0x00800000, 0x02000000, 600).astype(np.uint32)
    _check(sub, sub[::-1])
    _check(sub, small)
    # exact ties: x + half an ulp of x at several exponents
    exps = np.arange(1, 254, dtype=np.uint32)
    x = (exps << 23) | 1
    half_ulp = np.where(exps > 24, (exps - 24) << 23, 1).astype(np.uint32)
    _check(x, half_ulp)
    _check(x & ~np.uint32(1), half_ulp)


@settings(max_examples=10, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)), min_size=1, max_size=32))
def test_hypothesis_bit_patterns(pairs):
    a, b = zip(*pairs)
    _check(np.array(a, dtype=np.uint32), np.array(b, dtype=np.uint32))


@settings(max_examples=8, deadline=None)
@given(
    st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True), min_size=2, max_size=40)
)
def test_hypothesis_floats(values):
    x = np.array(values, dtype=np.float32)
    _check(x.view(np.uint32), x[::-1].view(np.uint32))


def test_same_float_bits_definition():
    x = np.array([0x7FC00001, 0x7FC00000, 0x7F800001, 0x00000000, 0x3F800000], dtype=np.uint32).view(np.float32)
    y = np.array([0xFFC00000, 0x7FC00000, 0x7FC00001, 0x80000000, 0x3F800001], dtype=np.uint32).view(np.float32)
    # quiet NaNs with other payload/sign: same; sNaN vs qNaN: differ; +0 vs -0: differ; 1 ulp: differ
    assert same_float_bits(x, y).tolist() == [True, True, False, False, False]


def test_broadcast_shape_and_empty():
    out = fp32_add(np.ones((2, 3), np.float32), np.float32(2.0), lanes=2)
    assert out.shape == (2, 3) and out.dtype == np.float32 and (out == 3).all()
    assert fp32_add(np.zeros(0, np.float32), np.zeros(0, np.float32)).shape == (0,)
