# Types of panama/sim/panama_host.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.core.packet cimport Packet
from panama.core.transport cimport WorkerTransport
from panama.sim.engine cimport Engine, Timer
from panama.sim.nodes cimport Host, PacketSink
from panama.sim.packet cimport SimPacket, panama_sim_packet
from panama.sim.ports cimport Port

cdef long long _KIND_PANAMA

cdef class PanamaWorker

cdef class PanamaHost(PacketSink):
    cdef public Host host
    cdef public dict workers
    cdef public object fallback
    cdef public long long unhandled
    cdef public long long unknown_job

    @cython.locals(pkt=Packet, w=PanamaWorker)
    cpdef receive(self, SimPacket spkt)

@cython.final
cdef class PanamaWorker:
    cdef public Engine engine
    cdef public Host host
    cdef public object tor
    cdef public WorkerTransport transport
    cdef public object on_done
    cdef public object on_error
    cdef public Timer timer
    cdef public Port _up
    cdef public long long _src
    cdef public object failed
    cdef public long long packets_out
    cdef public long long bytes_out

    @cython.locals(pkt=Packet, tr=WorkerTransport, was_active=cython.bint)
    cpdef receive(self, SimPacket spkt)

    @cython.locals(tr=WorkerTransport, pkts=list, up=Port, src=cython.longlong, nbytes=cython.longlong,
                   sp=SimPacket, p=Packet, now=cython.longlong)
    cpdef _pump(self)
