"""The datapath's interface and parameters: the header and key-trailer layout it parses,
its per-packet verdict codes (:data:`EVENTS`), the control-register fields of a tree-table
entry (:data:`FIELDS`), slot and hold states, and :class:`HwConfig`.

Shared by the RTL (:mod:`panama.hw.datapath`), its simulation driver and the reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from panama.core import accelerator as core_acc
from panama.core import codec
from panama.core.codec import HEADER_BYTES

HEADER_WORDS = HEADER_BYTES // 4  # 7
# The key trailer after the payload (codec version 2: 8 bytes; 0 where the codec has none).
KEY_BYTES = getattr(codec, "KEY_BYTES", 0)
KEY_WORDS = KEY_BYTES // 4
MAGIC = codec.MAGIC
VERSION = codec.VERSION

# Verdicts reported per packet (index = event_code).
EVENTS = (
    "ok",
    "ack_unmatched",
    core_acc.UNKNOWN_JOB,
    core_acc.UNKNOWN_TREE,
    core_acc.NOT_CHILD,
    core_acc.NOT_PARENT,
    core_acc.STALE,
    core_acc.GENERATION_MISMATCH,
    core_acc.COUNT_MISMATCH,
    core_acc.TOO_LARGE,
    core_acc.BAD_ACK,
    core_acc.SHARE_EXCEEDED,
    core_acc.DUPLICATE,
    core_acc.DUPLICATE_RESULT,
    core_acc.UNEXPECTED_RESULT,
    "codec_" + codec.SHORT,
    "codec_" + codec.BAD_MAGIC,
    "codec_" + codec.BAD_VERSION,
    "codec_" + codec.UNKNOWN_FLAGS,
    "codec_" + codec.RESERVED_NONZERO,
    "codec_" + codec.COUNT_MISMATCH,
    "codec_" + codec.TRAILING_BYTES,
    "codec_" + codec.BAD_KEY,
)
EV = {name: i for i, name in enumerate(EVENTS)}

# Control-register fields of a tree-table entry.
FIELDS = (
    "valid",
    "job_id",
    "tree_id",
    "nchildren",
    "child_port",
    "child_mask",
    "parent",
    "is_root",
    "target",
    "limit",
    "cap",
    "cap_sent",
    "hold_mode",
    "hold_seq",
    "hold_cap",
    "used",
    "floor",
    "init",
    "release",
    "grow_done",
    "key_hi",
    "key_lo",
)
F = {name: i for i, name in enumerate(FIELDS)}
HOLD_NONE, HOLD_WAIT_RESULT, HOLD_SEQ = 0, 1, 2  # the core's hold_seq None / -1 / >= 0

# Slot states (the core's SlotState values).
S_FREE, S_AGG, S_PARTIAL, S_RESULT = 0, 1, 2, 3


@dataclass(frozen=True)
class HwConfig:
    """Parameters of one datapath instance.

    ``width``: stream bits per beat (256, 512 or 1024; the 28-byte header must fit in
    beat 0); ``slots``: packet memory in slots of ``payload_elems`` floats;
    ``max_trees``: tree-table entries; ``max_children``: children per tree (power of 2);
    ``ports``: neighbours (ingress/egress ports).
    """

    width: int = 512
    slots: int = 64
    payload_elems: int = codec.DEFAULT_PAYLOAD_ELEMS
    max_trees: int = 16
    max_children: int = 8
    ports: int = 16

    def __post_init__(self):
        if self.width not in (256, 512, 1024):
            raise ValueError(f"width must be 256, 512 or 1024 bits, got {self.width}")
        mc = self.max_children
        if mc < 1 or mc & (mc - 1):
            raise ValueError(f"max_children must be a power of 2, got {mc}")
        if self.slots < 1 or self.max_trees < 1 or self.ports < 2 or self.payload_elems < 1:
            raise ValueError("slots, max_trees, payload_elems must be >= 1 and ports >= 2")

    @property
    def lanes(self) -> int:
        return self.width // 32

    @property
    def beats_per_slot(self) -> int:
        return -(-(HEADER_WORDS + self.payload_elems) // self.lanes)

    def beats(self, nbytes: int) -> int:
        return max(1, -(-nbytes // (self.width // 8)))


def _bits_for(n: int) -> int:
    return max(1, (n - 1).bit_length())
