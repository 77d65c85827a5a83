"""The settings base (panama.settings): one validation, errors that name the field, files both ways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field

from panama.core.errors import FieldError
from panama.settings import Settings, SettingsError


class Inner(Settings):
    size_bytes: int = Field(4, ge=1)


class Outer(Settings):
    name: str = Field(min_length=1)
    rate_gbps: float = Field(10.0, gt=0.0)
    path: Path | None = None
    inner: Inner = Field(default_factory=Inner)


@pytest.mark.parametrize(
    "data,field,detail",
    [
        ({}, "name", "required"),
        ({"name": ""}, "name", "at least 1 character"),
        ({"name": "a", "rate_gbps": 0}, "rate_gbps", "greater than 0 (got 0)"),
        ({"name": "a", "colour": 1}, "colour", "unknown key"),
        ({"name": "a", "inner": {"size_bytes": 0}}, "inner.size_bytes", "(got 0)"),
        ({"name": "a", "inner": {"extra": 0}}, "inner.extra", "unknown key"),
    ],
)
def test_every_bad_value_is_a_field_error(data, field, detail):
    for make in (lambda: Outer(**data), lambda: Outer.from_dict(data)):
        with pytest.raises(SettingsError) as info:
            make()
        assert isinstance(info.value, FieldError) and isinstance(info.value, ValueError)
        assert info.value.field == field and detail in info.value.detail, info.value


def test_file_round_trip_and_mode(tmp_path):
    outer = Outer(name="a", path=tmp_path / "x", inner=Inner(size_bytes=9))
    path = outer.save(tmp_path / "s.json")
    assert path.stat().st_mode & 0o777 == 0o644
    assert json.loads(path.read_text())["path"] == str(tmp_path / "x")
    assert Outer.load(path) == outer


def test_bad_files_name_the_file(tmp_path):
    with pytest.raises(SettingsError, match="cannot read"):
        Outer.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SettingsError, match="not JSON"):
        Outer.load(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(SettingsError, match="expected a JSON object"):
        Outer.load(tmp_path / "list.json")


def test_frozen_and_replace_validates_again():
    outer = Outer(name="a")
    with pytest.raises(Exception):
        outer.name = "b"
    assert outer.replace(rate_gbps=2.5).rate_gbps == 2.5
    with pytest.raises(SettingsError, match="rate_gbps"):
        outer.replace(rate_gbps=-1)
