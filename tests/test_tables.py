"""The one terminal-table formatter: headers apart, columns aligned, missing values as '-'."""

import pytest

from panama.tables import format_pairs, format_table


def test_headers_never_run_together_and_columns_align():
    text = format_table([("ring", "1234.5", None), ("panama", "7.25", "0.91 [0.8,1.0]")], ("scheme", "p99 µs", "ratio"))
    head, rule, *rows = text.splitlines()
    assert head.split() == ["scheme", "p99", "µs", "ratio"]
    assert set(rule.replace(" ", "")) == {"-"} and len(rule.split()) == 3
    assert rows[0].split()[-1] == "-"
    # right-aligned numbers end in the same column
    assert rows[0].index("1234.5") + len("1234.5") == rows[1].index("7.25") + len("7.25")


def test_alignment_letters_must_match_columns():
    with pytest.raises(ValueError, match="align"):
        format_table([("a", "b")], ("x", "y"), align="l")


def test_pairs_pad_labels():
    lines = format_pairs([("offered load", "x"), ("datagram", "y")], indent="  ").splitlines()
    assert lines[0].startswith("  offered load  x") and lines[1].index("y") == lines[0].index("x")
