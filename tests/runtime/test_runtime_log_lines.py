"""Daemon logs are one line per record: fields from requests cannot forge lines (issue 35 item 4)."""

from __future__ import annotations

import logging

from panama.runtime.cluster import LocalCluster
from panama.runtime.process import OneLineFormatter, one_line


def test_control_characters_in_a_logged_field_are_escaped():
    record = logging.LogRecord(
        "panama.controller", logging.INFO, __file__, 1, "job %s: rank %d registered from %s",
        ("j\r1", 0, "127.0.0.1\n2026-11-28 09:00:00,000 ERROR forged\x00:5"), None,
    )  # fmt: skip
    line = OneLineFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert "\n" not in line and "\x00" not in line and "\r" not in line
    assert line.endswith("registered from 127.0.0.1\\n2026-11-28 09:00:00,000 ERROR forged\\x00:5")
    assert one_line("tab\there \x1b[31m \u2028 é") == "tab\\there \\x1b[31m \\u2028 é"


def test_the_controller_log_keeps_a_forged_address_on_its_own_line():
    """A register whose udp holds a newline (before: written raw, a second log line under
    the attacker's control)."""
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, log_level="INFO") as lc:
        body = {"rank": 0, "world_size": 2, "size_bytes": 1000, "wait_s": 0.5, "incarnation": "a"}
        body["udp"] = "127.0.0.1\nFORGED ERROR line:5000"
        lc.controller_call("POST", "/v1/jobs/j1/register", body)
        lines = lc.procs["controller"].log.read_text().splitlines()
    assert not any(line.startswith("FORGED") for line in lines), lines
