# Types of panama/core/accelerator.py for the simulator's compiled fast path (setup.py);
# the .py is the source. Counters and sequence numbers are 64-bit integers; slot states
# are SlotState values as C integers; children bitmaps stay Python integers (any fan-out).
cimport cython

from panama.core.packet cimport Packet, new_packet

cdef long long _FREE, _AGGREGATING, _PARTIAL_SENT, _RESULT
# Imported from panama.core.packet: C constants here.
cdef long long CE, ECT0, FLAG_ACK, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT, MAX_CWND_CAP
cdef tuple _NOTHING

@cython.final
cdef class _Slot:
    cdef public long long index
    cdef public object row
    cdef public long long seq
    cdef public long long generation
    cdef public long long count
    cdef public object seen
    cdef public long long nseen
    cdef public bint ce
    cdef public bint retx
    cdef public long long cap
    cdef public long long state

@cython.final
cdef class _Tree:
    cdef public long long job_id
    cdef public long long tree_id
    cdef public tuple children
    cdef public dict child_index
    cdef public tuple bits
    cdef public long long nchildren
    cdef public object parent
    cdef public object parent_from
    cdef public tuple up
    cdef public list ring
    cdef public long long mask
    cdef public dict spill
    cdef public list child_ack
    cdef public long long floor
    cdef public long long at_floor
    cdef public long long used
    cdef public long long peak_used
    cdef public long long target
    cdef public long long limit
    cdef public long long cap
    cdef public object hold_seq
    cdef public long long hold_cap
    cdef public long long cap_sent

cdef class Accelerator:
    # An instance dict keeps the accelerator open to Python-level instrumentation (tests
    # replace ``acc.receive`` on an instance); cpdef calls check it for overrides. Cython
    # gives every instance its own dict, so that check misses its cache whenever the
    # accelerator changes: the internal steps of ``receive`` are cdef methods (called in C,
    # not overridable; interpreted, ordinary methods).
    cdef dict __dict__
    cdef public object name
    cdef public long long packet_memory
    cdef public long long payload_elems
    cdef public bint store_payloads
    cdef public bint copy_payloads
    cdef public long long reserve_shares
    cdef public object _memory
    cdef public list _free
    cdef public dict _trees
    cdef public dict _jobs
    cdef public list _recent
    cdef public long long used_slots
    cdef public long long peak_used_slots
    cdef public object drops
    cdef public long long contributions
    cdef public long long results_in
    cdef public long long partials_out
    cdef public long long results_out
    cdef public long long retransmits_answered
    cdef public long long partials_resent
    cdef public long long slots_freed
    cdef public long long acks_in
    cdef public long long acks_out
    cdef public long long acks_unmatched

    @cython.locals(tree=_Tree, slot=_Slot, flags=cython.longlong, count=cython.longlong, seq=cython.longlong,
                   ack=cython.longlong, old_ack=cython.longlong, acks=list, trees=dict, child=cython.longlong,
                   job_id=cython.longlong, tree_id=cython.longlong)
    cpdef tuple receive(self, Packet packet, object from_node)

    @cython.locals(slot=_Slot, seq=cython.longlong, count=cython.longlong, room=cython.longlong, cap=cython.longlong,
                   ring=list, at=cython.longlong)
    cdef _Slot _open_slot(self, _Tree tree, Packet packet, long long child)

    cdef object _complete(self, _Tree tree, _Slot slot)
    cdef object _payload_out(self, _Slot slot)
    cdef Packet _partial(self, _Tree tree, _Slot slot, object payload, long long flags)

    @cython.locals(flags=cython.longlong, cap=cython.longlong, packet=Packet)
    cdef object _results_to(self, _Tree tree, _Slot slot, object payload, tuple children, long long ecn)

    cdef object _duplicate(self, _Tree tree, _Slot slot, Packet packet, object from_node, long long child)

    @cython.locals(slot=_Slot)
    cdef object _receive_result(self, _Tree tree, Packet packet, object from_node)

    @cython.locals(ack=cython.longlong, floor=cython.longlong)
    cdef object _receive_ack(self, _Tree tree, Packet packet, long long child)

    @cython.locals(old=cython.longlong)
    cdef _take_ack(self, _Tree tree, long long child, long long ack)

    @cython.locals(new_floor=cython.longlong, old_floor=cython.longlong, slot=_Slot, freed=cython.longlong,
                   ring=list, spill=dict, mask=cython.longlong, child_ack=list, free=list, a=cython.longlong,
                   at=cython.longlong, s=cython.longlong)
    cdef _advance_floor(self, _Tree tree)
