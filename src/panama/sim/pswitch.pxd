# Types of panama/sim/pswitch.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.core.accelerator cimport Accelerator
from panama.core.packet cimport Packet
from panama.sim.nodes cimport HookObject, Switch
from panama.sim.packet cimport SimPacket, panama_sim_packet

cdef long long PANAMA_OVERHEAD_BYTES  # imported from panama.sim.packet: a C constant here
cdef long long FLAG_RESULT  # imported from panama.core.packet: a C constant here

cdef class PanamaHook(HookObject):
    cdef public Accelerator acc
    cdef public Switch switch
    cdef public dict _ports
    cdef public list _recent

    # out and destinations typed: Accelerator.receive returns tuples of (tuple, Packet) pairs,
    # iterated by index and unpacked without the iterator protocol.
    @cython.locals(pkt=Packet, p=Packet, res=list, size=cython.longlong, ecn=cython.longlong,
                   out=tuple, destinations=tuple, ports=tuple, at=cython.Py_ssize_t, hit=tuple)
    cpdef object run(self, SimPacket spkt, object from_node)
