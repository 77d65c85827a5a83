"""Facts the docs state about the code, checked against the code (issue 38, item 5): the
codec version and the datagram size advised for a real NIC."""

import re
from pathlib import Path

from panama.core import codec

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_design_doc_names_the_codec_version():
    section = (DOCS / "design.md").read_text().split("## Packet header", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"version (\d+),", section) == [str(codec.VERSION)]


def test_every_payload_advice_for_a_real_nic_fits_one_mtu_with_the_key_trailer():
    """Each ``--payload-elems N`` the runtime docs give for real NICs (outside loopback) is
    ``NIC_PAYLOAD_ELEMS``, and that many floats make exactly one 1500-byte IP packet."""
    ip_bytes = codec.IP_UDP_OVERHEAD_BYTES + codec.HEADER_BYTES + 4 * codec.NIC_PAYLOAD_ELEMS + codec.KEY_BYTES
    assert ip_bytes <= codec.DEFAULT_MTU_BYTES < ip_bytes + 4
    advised = []
    for page in ("runtime.md", "several-machines.md"):
        text = (DOCS / page).read_text()
        for m in re.finditer(r"--payload-elems (\d+)", text):
            line = text[text.rfind("\n", 0, m.start()) + 1 : m.end()]
            before = text[max(0, m.start() - 120) : m.start()]
            if "real NIC" in before or re.search(r"panama (switch|cluster up) ", line):
                advised.append(int(m.group(1)))
    assert advised and set(advised) == {codec.NIC_PAYLOAD_ELEMS}, advised


def test_the_runtime_settings_table_names_every_field_of_each_model():
    """docs/runtime.md's settings table (model | used by | fields) lists exactly each model's fields."""
    from panama.runtime import settings
    from panama.training.config import TrainConfig

    models = {name: getattr(settings, name, None) for name in dir(settings)} | {"TrainConfig": TrainConfig}
    rows = {}
    for line in (DOCS / "runtime.md").read_text().splitlines():
        cells = line.split(" | ")
        if len(cells) == 3 and re.fullmatch(r"\| `\w+`( \(`[\w/.]+`\))?", cells[0]):
            rows[re.search(r"`(\w+)`", cells[0]).group(1)] = re.findall(r"`(\w+)`", cells[2])
    assert {"SwitchConfig", "ControllerConfig", "ClusterConfig", "CommunicatorConfig"} <= set(rows)
    for name, fields in rows.items():
        assert sorted(fields) == sorted(models[name].model_fields), name
