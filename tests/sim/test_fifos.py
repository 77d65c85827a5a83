"""The FIFO component (``sim/fifos.py`` and its C twin ``fifos.pyx``): the same entries in
the same order through growth and wrap-around, on both implementations (CI runs this file
compiled and with PANAMA_NO_EXTENSIONS=1)."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from panama.sim.fifos import DelayLine, PacketPipe, ReleaseRings


class _Pkt:
    def __init__(self, i: int, t: int):
        self.i = i
        self.arrive_ps = t


def test_packet_pipe_keeps_order_through_growth_and_wraparound():
    rng = np.random.default_rng(3)
    pipe, model = PacketPipe(), []
    t = 0
    for step in range(3000):  # pushes and pops interleaved: the ring wraps and doubles
        if model and rng.random() < 0.45:
            assert pipe.head_time() == model[0].arrive_ps
            assert pipe.pop_head() is model.pop(0)
        else:
            t += int(rng.integers(0, 5))
            p = _Pkt(step, t)
            pipe.push(t, p)
            model.append(p)
        assert len(pipe) == len(model) and bool(pipe) == bool(model)
        if model:
            assert pipe.back_time() == model[-1].arrive_ps and pipe.at(-1) is model[-1] and pipe[0] is model[0]
    while model:
        assert pipe.pop_back() is model.pop()
    assert pipe.head_time() == -1 and pipe.back_time() == -1
    with pytest.raises(IndexError):
        pipe.pop_head()
    with pytest.raises(IndexError):
        pipe.at(0)


def test_release_rings_free_what_ended_per_ingress_and_track_the_earliest_end():
    ingress = array("q", [0] * 4)
    rings = ReleaseRings(3, ingress)
    expected = [0] * 4
    for k in range(200):  # enough to grow every ring past its first allocation
        ring, end, size, idx = k % 3, 10 * k + (k % 3), 100 + k, k % 4
        rings.put(ring, end, size, idx)
        ingress[idx] += size
        expected[idx] += size
    assert len(rings) == 200 and rings.pending(1) == 67 and rings.next_end() == 0
    freed = rings.release(995)
    for k in range(200):
        if 10 * k + (k % 3) <= 995:
            expected[k % 4] -= 100 + k
    assert list(ingress) == expected and freed == sum(100 + k for k in range(200) if 10 * k + k % 3 <= 995)
    assert rings.next_end() == min(10 * k + k % 3 for k in range(200) if 10 * k + k % 3 > 995)
    assert rings.pop_back(2) == 197 % 4  # the newest entry of ring 2 (k = 197): its ingress
    assert rings.release(10**9) > 0 and len(rings) == 0 and rings.next_end() == 1 << 62
    with pytest.raises(IndexError):
        rings.put(3, 0, 1, 0)
    with pytest.raises(IndexError):
        rings.pop_back(0)


def test_delay_line_keeps_order_through_growth():
    dl = DelayLine()
    outs = [[("n", i)] for i in range(150)]
    for i, out in enumerate(outs):
        dl.put(i, out, i % 5)
    for i, out in enumerate(outs):
        assert dl.head_time() == i and dl.head_in_idx() == i % 5
        assert dl.pop_head() is out
    assert dl.head_time() == -1
