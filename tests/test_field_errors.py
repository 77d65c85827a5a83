"""One error base for inputs at fault: every field-naming error is a FieldError with attributes."""

import pickle

import pytest

from panama.core.controller import ControllerError
from panama.core.errors import FieldError
from panama.core.topology import TopologyError
from panama.experiments.comm_ratio import ModelTableError
from panama.experiments.report import ReportError
from panama.runtime.controller.cluster_file import ClusterFileError
from panama.runtime.net.udp import AddressError, parse_addr
from panama.settings import SettingsError
from panama.sim.scenario import ScenarioError


@pytest.mark.parametrize(
    "cls",
    [
        ControllerError,
        TopologyError,
        ModelTableError,
        ReportError,
        AddressError,
        ScenarioError,
        SettingsError,
        ClusterFileError,
    ],
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


def test_no_source_names_a_field_in_a_plain_value_error():
    """A message "field: detail" in a bare ValueError is what FieldError replaces: callers would have
    to split strings to find the field. (Scans raise statements with ast.)"""
    import ast
    import pathlib
    import re

    src = pathlib.Path(__file__).resolve().parents[1] / "src" / "panama"
    field_first = re.compile(r"^[\w.{}\[\]/'-]+: ")

    def text(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{x}" for v in node.values)
        return None

    found = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            call = node.exc if isinstance(node, ast.Raise) else None
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "ValueError" and call.args:
                message = text(call.args[0])
                if message and field_first.match(message):
                    found.append(f"{path.relative_to(src)}:{node.lineno}: {message[:60]}")
    assert found == []
