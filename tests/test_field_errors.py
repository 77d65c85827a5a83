"""One error base for inputs at fault: every field-naming error is a FieldError with attributes."""

import pickle

import pytest

from panama.core.controller import ControllerError
from panama.core.errors import FieldError
from panama.core.topology import TopologyError
from panama.experiments.comm_ratio import ModelTableError
from panama.experiments.report import ReportError
from panama.runtime.udp import AddressError, parse_addr
from panama.sim.scenario import ScenarioError


@pytest.mark.parametrize(
    "cls", [ControllerError, TopologyError, ModelTableError, ReportError, AddressError, ScenarioError]
)
def test_every_field_error_carries_field_and_detail(cls):
    exc = cls("some.key", "must be >= 1, got 0: really")
    assert isinstance(exc, FieldError) and isinstance(exc, ValueError)
    assert (exc.field, exc.detail, str(exc)) == (
        "some.key",
        "must be >= 1, got 0: really",
        "some.key: must be >= 1, got 0: really",
    )
    back = pickle.loads(pickle.dumps(exc))  # crosses process boundaries intact
    assert type(back) is cls and (back.field, back.detail) == (exc.field, exc.detail)


def test_scenario_error_keeps_its_key_name():
    assert ScenarioError("sim.duration_ms", "must be > 0").key == "sim.duration_ms"


def test_address_errors_name_the_field():
    with pytest.raises(AddressError) as info:
        parse_addr("localhost", field="--udp")
    assert info.value.field == "--udp" and info.value.detail.startswith("expected HOST:PORT")
