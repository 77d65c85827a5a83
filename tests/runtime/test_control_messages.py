"""The control protocol's messages against docs/runtime.md, and their round trips.

The HTTP API's JSON is tabled in docs/runtime.md (clients outside the project read it);
the models of :mod:`panama.runtime.control.messages` are what both sides send. Every key
a table names must be a field of the row's models (their JSON schema, nested models
included), and every field of a request body must be named in the table.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from panama.runtime.control import messages as m

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "runtime.md"

# row (method and path, as the table's first cell has them) -> (request body, replies)
ROWS: dict[str, tuple[type[m.Body] | None, tuple[type[m.Reply], ...]]] = {
    # controller
    "POST /v1/jobs/{job}/register": (m.RegisterBody, (m.RegisterReply,)),
    "POST /v1/jobs/{job}/heartbeat": (m.ProgressBody, (m.HeartbeatReply,)),
    "POST /v1/jobs/{job}/leave": (m.ProgressBody, (m.LeaveReply,)),
    "POST /v1/jobs/{job}/unicast": (m.UnicastBody, (m.UnicastReply,)),
    "GET /v1/jobs/{job}[?probe=1]": (None, (m.JobDetail,)),
    "GET /v1/jobs": (None, (m.JobsReply,)),
    "DELETE /v1/jobs/{job}": (None, (m.JobSummary,)),
    "DELETE /v1/admin/jobs/{job}": (None, (m.JobSummary,)),
    "GET /v1/switches[?probe=1]": (None, (m.SwitchesReply,)),
    "GET /v1/health (no token needed), GET /metrics": (None, (m.ControllerHealth,)),
    # switch daemon
    "GET /health (no token needed)": (None, (m.SwitchHealth,)),
    "GET /stats": (None, (m.SwitchStats,)),
    "GET /jobs": (None, (m.InstalledJobs,)),
    "PUT /jobs/{job_id}": (m.InstallBody, (m.InstallReply,)),
    "DELETE /jobs/{job_id}": (None, (m.RemoveReply,)),
    "DELETE /jobs/{job_id}/multicast": (m.MulticastOffBody, (m.MulticastOffReply,)),
}
# Replies whose table rows list every top-level field (the others elide some with "...").
FULLY_LISTED = (
    m.RegisterReply,
    m.HeartbeatReply,
    m.UnicastReply,
    m.JobDetail,
    m.JobSummary,
    m.ControllerHealth,
    m.SwitchHealth,
    m.SwitchStats,
    m.InstallReply,
    m.MulticastOffReply,
)

_KEY = re.compile(r'(?<!: )"([a-z][a-z_]*)"')  # a quoted key; a quoted value follows ": "
_TICKED = re.compile(r"`([a-z][a-z_]*)(?:\{[^}`]*\})?`")  # `name` or `name{labels}` (the counters row)


def doc_rows(text: str) -> dict[str, list[str]]:
    """Table rows of ``text`` whose first cell is a method and path: that cell (backticks
    dropped) -> the other cells."""
    rows = {}
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        head = cells[0].replace("`", "")
        if head.split(" ", 1)[0] in ("GET", "PUT", "POST", "DELETE"):
            rows[head] = cells[1:]
    return rows


def doc_keys(cell: str) -> set[str]:
    """The JSON keys a cell names: quoted keys, or, in a counters list, ticked names."""
    if cell.startswith("counters:"):
        return set(_TICKED.findall(cell))
    return set(_KEY.findall(cell))


def schema_names(model: type) -> set[str]:
    """Every property name in ``model``'s JSON schema, nested models included."""
    schema = model.model_json_schema()
    names = set(schema.get("properties", {}))
    for sub in schema.get("$defs", {}).values():
        names |= set(sub.get("properties", {}))
    return names


def split_row(cells: list[str]) -> tuple[str, str]:
    """(body cell, answer cell) of a row: the controller's tables have both; the daemon's
    one cell ``body → answer`` (or the answer alone)."""
    if len(cells) >= 2:
        return cells[0], cells[1]
    body, arrow, answer = cells[0].partition("→")
    return (body, answer) if arrow else ("", body)


@pytest.fixture(scope="module")
def rows() -> dict[str, list[str]]:
    return doc_rows(DOC.read_text())


def test_every_modelled_path_is_tabled(rows):
    assert sorted(set(ROWS) - set(rows)) == []


@pytest.mark.parametrize("path", sorted(ROWS))
def test_the_tables_name_only_fields_of_the_models(rows, path):
    body_model, replies = ROWS[path]
    body_cell, answer_cell = split_row(rows[path])
    body_keys, answer_keys = doc_keys(body_cell), doc_keys(answer_cell)
    if body_model is not None:
        assert body_keys - schema_names(body_model) == set(), f"{path}: body keys the model lacks"
    else:
        assert body_keys == set(), f"{path} takes no body"
    reply_names = set().union(*(schema_names(r) for r in replies))
    assert answer_keys - reply_names == set(), f"{path}: answer keys the models lack"
    for reply in replies:
        if reply in FULLY_LISTED:
            top = set(reply.model_fields)
            assert top - answer_keys == set(), f"{path}: fields of {reply.__name__} the table does not name"


@pytest.mark.parametrize("model", sorted({b for b, _ in ROWS.values() if b is not None}, key=lambda b: b.__name__))
def test_every_body_field_is_tabled(rows, model):
    named = set()
    for path, (body, _) in ROWS.items():
        if body is model:
            named |= doc_keys(split_row(rows[path])[0])
    assert set(model.model_fields) - named == set()


def test_the_check_catches_a_renamed_field():
    row = '| `POST /v1/jobs/{job}/leave` | `{"rank", "jobid"?}` | 200 `{"state": "running", "reason"}` |'
    body, answer = split_row(doc_rows(row)["POST /v1/jobs/{job}/leave"])
    assert doc_keys(body) - schema_names(m.ProgressBody) == {"jobid"}
    assert doc_keys(answer) == {"state", "reason"}  # "running" is a value


def test_replies_round_trip_and_leave_unset_parts_out():
    refused = m.RegisterReply(job="j", job_id=3, admitted=False, reason="host-based")
    assert refused.to_json() == {"job": "j", "job_id": 3, "admitted": False, "reason": "host-based"}
    group = m.ResultsGroup(group=None, reason="one worker child")
    assert group.to_json() == {"group": None, "reason": "one worker child"}
    assert m.ResultsGroup(group="239.80.0.1:5000").to_json() == {"group": "239.80.0.1:5000"}
    newer = {"state": "running", "reason": "", "job_id": 1, "left": {"2": 4}, "added_later": True}
    assert m.HeartbeatReply.parse(newer).left == {"2": 4}  # an older client ignores a newer key


def test_bodies_are_sent_as_the_server_reads_them():
    body = m.InstallBody(trees=[m.TreeBody(tree_id=0, children=["127.0.0.1:1"])], key="ab")
    sent = body.to_json()
    assert sent == {"trees": [{"tree_id": 0, "children": ["127.0.0.1:1"], "parent": None}], "key": "ab"}
    assert m.InstallBody.parse(sent) == body
    progress = m.ProgressBody(rank=1, job_id=2, calls=3)
    assert m.ProgressBody.parse(progress.to_json()) == progress
