"""Flow-size distributions and Poisson arrivals."""

from __future__ import annotations

import numpy as np
import pytest

from panama.sim.workload import (
    BUILTIN_WORKLOADS,
    FlowSizeCdf,
    WorkloadError,
    load_cdf,
    parse_cdf_text,
    poisson_flows,
)


@pytest.mark.parametrize(
    "name,mean_bytes,median_bytes",
    [
        ("web-search", 1.71e6, 73e3),
        ("data-mining", 12.7e6, 1.1e3),
        ("fb-hadoop", 120e3, 700),
        ("ali-storage", 40.9e3, None),
    ],
)
def test_builtin_means_match_reference_table(name, mean_bytes, median_bytes):
    cdf = load_cdf(name)
    assert cdf.mean_bytes == pytest.approx(mean_bytes, rel=0.01)
    if median_bytes is not None:
        assert float(cdf.quantile(0.5)) == pytest.approx(median_bytes, rel=0.01)


def test_samples_follow_the_cdf():
    cdf = load_cdf("web-search")
    sizes = cdf.sample(np.random.default_rng(3), 200_000)
    assert sizes.min() >= 1 and sizes.dtype == np.int64
    for size, p in zip(cdf.sizes_bytes[1:], cdf.cdf[1:]):
        assert np.mean(sizes <= size) == pytest.approx(p, abs=0.005)
    assert sizes.mean() == pytest.approx(cdf.mean_bytes, rel=0.03)


def test_cdf_file_percent_scale_and_errors(tmp_path):
    f = tmp_path / "w.txt"
    f.write_text("# my workload\n0 0\n1000 50 # half\n\n2000, 100\n")
    cdf = load_cdf(str(f))
    assert cdf.mean_bytes == pytest.approx(0.5 * 500 + 0.5 * 1500)
    with pytest.raises(WorkloadError, match="unknown workload"):
        load_cdf("nope")
    with pytest.raises(WorkloadError, match="non-decreasing"):
        parse_cdf_text("0 0\n10 0.6\n5 1.0")
    with pytest.raises(WorkloadError, match="end at 1"):
        parse_cdf_text("0 0\n10 0.6")
    with pytest.raises(WorkloadError, match=":2"):
        parse_cdf_text("0 0\nabc 1")
    assert set(BUILTIN_WORKLOADS) == {"web-search", "data-mining", "fb-hadoop", "ali-storage"}


def test_poisson_arrivals_offer_the_target_load():
    cdf = FlowSizeCdf("fixed", np.array([10_000.0, 10_000.0]), np.array([0.0, 1.0]))
    hosts = [f"h{i}" for i in range(8)]
    rate, load, span = 10e9, 0.4, 200_000_000_000  # 0.2 s
    flows = poisson_flows(np.random.default_rng(5), cdf, hosts, link_rate_bps=rate, load=load, start_ps=0, stop_ps=span)
    expected_per_host = load * rate * 0.2 / (8 * 10_000)  # 1000 flows
    assert len(flows) == pytest.approx(8 * expected_per_host, rel=0.05)
    per_host = {h: sum(f.size_bytes for f in flows if f.src == h) * 8 / 0.2 / rate for h in hosts}
    for h, offered in per_host.items():
        assert offered == pytest.approx(load, rel=0.15), h
    assert all(f.src != f.dst for f in flows)
    assert [f.start_ps for f in flows] == sorted(f.start_ps for f in flows)
    assert [f.flow_id for f in flows] == list(range(len(flows)))
    assert all(0 <= f.start_ps < span for f in flows)
    # Destinations uniform over the other hosts.
    counts = np.bincount([hosts.index(f.dst) for f in flows], minlength=8)
    assert counts.min() > 0.8 * counts.mean()


def test_arrivals_are_deterministic_per_generator_and_respect_window():
    cdf = load_cdf("data-mining")
    kw = dict(link_rate_bps=10e9, load=0.5, start_ps=1_000_000, stop_ps=50_000_000_000)
    a = poisson_flows(np.random.default_rng(9), cdf, ["h0", "h1", "h2"], **kw)
    b = poisson_flows(np.random.default_rng(9), cdf, ["h0", "h1", "h2"], **kw)
    c = poisson_flows(np.random.default_rng(10), cdf, ["h0", "h1", "h2"], **kw)
    assert a == b and a != c
    assert all(1_000_000 <= f.start_ps < 50_000_000_000 for f in a)
    assert poisson_flows(np.random.default_rng(9), cdf, ["h0"], **kw) == []  # nobody to talk to
    assert poisson_flows(np.random.default_rng(9), cdf, ["h0", "h1"], **(kw | {"load": 0})) == []
    with pytest.raises(WorkloadError):
        poisson_flows(np.random.default_rng(9), cdf, ["h0", "h1"], **(kw | {"load": 3}))
