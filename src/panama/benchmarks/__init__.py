"""Benchmarks that report throughput as a ratio against a baseline measured in the same run."""
