# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled batched datagram I/O (Linux ``recvmmsg`` / ``sendmmsg``) for the runtime's hot loops.

Optional: :mod:`panama.runtime.net.mmsg` imports this module when it was built (``setup.py``,
Linux only) and ``PANAMA_NO_EXTENSIONS`` is not set, and otherwise uses its pure-Python
classes with the same contract (one ``recvmsg_into`` / ``sendmsg`` per datagram). The
contract of every method is written there; this file only restates what differs in how.

No protocol here: datagrams are moved as bytes, their sizes, IP ECN codepoints and
source addresses reported, nothing is parsed.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyObject_GetBuffer, PyBuffer_Release
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.errno cimport EAGAIN, EINTR, errno
from libc.string cimport memset

import socket as _socket


cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    ctypedef unsigned short sa_family_t

    struct sockaddr:
        sa_family_t sa_family

    struct iovec:
        void *iov_base
        size_t iov_len

    struct msghdr:
        void *msg_name
        socklen_t msg_namelen
        iovec *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags

    struct mmsghdr:
        msghdr msg_hdr
        unsigned int msg_len

    struct cmsghdr:
        size_t cmsg_len
        int cmsg_level
        int cmsg_type

    int recvmmsg(int fd, mmsghdr *msgvec, unsigned int vlen, int flags, void *timeout)
    int sendmmsg(int fd, mmsghdr *msgvec, unsigned int vlen, int flags)
    cmsghdr *CMSG_FIRSTHDR(msghdr *msg)
    cmsghdr *CMSG_NXTHDR(msghdr *msg, cmsghdr *cmsg)
    unsigned char *CMSG_DATA(cmsghdr *cmsg)
    size_t CMSG_SPACE(size_t length)
    size_t CMSG_LEN(size_t length)
    int AF_INET
    int MSG_DONTWAIT
    int MSG_TRUNC


cdef extern from "<netinet/in.h>" nogil:
    struct in_addr:
        unsigned int s_addr

    struct sockaddr_in:
        sa_family_t sin_family
        unsigned short sin_port
        in_addr sin_addr

    int IPPROTO_IP
    int IP_TOS
    unsigned short ntohs(unsigned short)
    unsigned short htons(unsigned short)
    unsigned int ntohl(unsigned int)


cdef extern from "<arpa/inet.h>" nogil:
    int inet_pton(int af, const char *src, void *dst)


DEF CMSG_BYTES = 64  # room for IP_TOS (and anything else the kernel adds) per datagram
DEF MAX_MSGS = 64  # datagrams of one send or send_each call (destinations of one multicast)
DEF MAX_PARTS = 3  # buffers gathered into one datagram
DEF SOURCE_CACHE_MAX = 4096  # distinct source addresses remembered (forged ones cannot grow it)

IMPLEMENTATION = "recvmmsg/sendmmsg"


cdef class Receiver:
    """``recv(max_count)``: up to ``max_count`` datagrams with one ``recvmmsg``."""

    cdef int fd
    cdef int count
    cdef int want_sources
    cdef Py_buffer *bufs
    cdef mmsghdr *msgs
    cdef iovec *iovs
    cdef sockaddr_in *names
    cdef unsigned char *control
    cdef dict _source_cache
    cdef object _sock
    cdef object _buffers
    cdef public list sizes
    cdef public list ecns
    cdef public list sources

    def __cinit__(self, sock, buffers, bint sources=True):
        self.count = 0
        self.bufs = NULL
        self.msgs = NULL
        self.iovs = NULL
        self.names = NULL
        self.control = NULL
        cdef int n = len(buffers)
        if n < 1:
            raise ValueError("a receiver needs at least one buffer")
        self.fd = sock.fileno()
        self._sock = sock
        self._buffers = list(buffers)
        self.want_sources = sources
        self.bufs = <Py_buffer *> PyMem_Calloc(n, sizeof(Py_buffer))
        self.msgs = <mmsghdr *> PyMem_Calloc(n, sizeof(mmsghdr))
        self.iovs = <iovec *> PyMem_Calloc(n, sizeof(iovec))
        self.names = <sockaddr_in *> PyMem_Calloc(n, sizeof(sockaddr_in))
        self.control = <unsigned char *> PyMem_Calloc(n, CMSG_BYTES)
        if not (self.bufs and self.msgs and self.iovs and self.names and self.control):
            raise MemoryError()
        cdef int k
        for k in range(n):
            PyObject_GetBuffer(self._buffers[k], &self.bufs[k], PyBUF_SIMPLE | PyBUF_WRITABLE)
            self.count = k + 1
            self.iovs[k].iov_base = self.bufs[k].buf
            self.iovs[k].iov_len = <size_t> self.bufs[k].len
        self.sizes = [0] * n
        self.ecns = [0] * n
        self.sources = [None] * n
        self._source_cache = {}

    def __dealloc__(self):
        cdef int k
        if self.bufs != NULL:
            for k in range(self.count):
                PyBuffer_Release(&self.bufs[k])
        PyMem_Free(self.bufs)
        PyMem_Free(self.msgs)
        PyMem_Free(self.iovs)
        PyMem_Free(self.names)
        PyMem_Free(self.control)

    @property
    def capacity(self):
        return self.count

    cdef object _source(self, sockaddr_in *name, socklen_t namelen):
        if namelen < sizeof(sockaddr_in) or name.sin_family != AF_INET:
            return None
        cdef unsigned int ip = ntohl(name.sin_addr.s_addr)
        cdef unsigned int port = ntohs(name.sin_port)
        key = (<unsigned long long> ip << 16) | port
        src = self._source_cache.get(key)
        if src is None:
            host = f"{ip >> 24}.{(ip >> 16) & 255}.{(ip >> 8) & 255}.{ip & 255}"
            src = (host, <int> port)
            if len(self._source_cache) >= SOURCE_CACHE_MAX:
                self._source_cache.clear()
            self._source_cache[key] = src
        return src

    def recv(self, int max_count):
        """See :meth:`panama.runtime.net.mmsg.PyReceiver.recv`."""
        cdef int n = max_count if max_count < self.count else self.count
        cdef int k, got, err
        cdef msghdr *h
        cdef cmsghdr *c
        cdef int ecn
        if n < 1:
            return 0
        for k in range(n):
            h = &self.msgs[k].msg_hdr
            h.msg_name = &self.names[k]
            h.msg_namelen = sizeof(sockaddr_in)
            h.msg_iov = &self.iovs[k]
            h.msg_iovlen = 1
            h.msg_control = self.control + k * CMSG_BYTES
            h.msg_controllen = CMSG_BYTES
            h.msg_flags = 0
        while True:
            with nogil:
                got = recvmmsg(self.fd, self.msgs, n, MSG_DONTWAIT, NULL)
                err = errno
            if got >= 0 or err != EINTR:
                break
        if got < 0:
            if err == EAGAIN:  # EWOULDBLOCK on Linux
                return 0
            raise OSError(err, _strerror(err))
        sizes = self.sizes
        ecns = self.ecns
        sources = self.sources
        for k in range(got):
            h = &self.msgs[k].msg_hdr
            ecn = 0
            c = CMSG_FIRSTHDR(h)
            while c != NULL:
                if c.cmsg_level == IPPROTO_IP and c.cmsg_type == IP_TOS and c.cmsg_len > CMSG_LEN(0):
                    ecn = CMSG_DATA(c)[0] & 3
                    break
                c = CMSG_NXTHDR(h, c)
            ecns[k] = ecn
            sizes[k] = -1 if h.msg_flags & MSG_TRUNC else <int> self.msgs[k].msg_len
            if self.want_sources:
                sources[k] = self._source(&self.names[k], h.msg_namelen)
        return got


cdef class Sender:
    """``send(parts, destinations, tos)``: one datagram to several destinations with one ``sendmmsg``."""

    cdef int fd
    cdef object _sock
    cdef dict _names
    cdef mmsghdr msgs[MAX_MSGS]
    cdef sockaddr_in addrs[MAX_MSGS]
    cdef iovec iov[3]
    cdef unsigned char control[CMSG_BYTES]
    cdef Py_buffer held[MAX_MSGS * MAX_PARTS]
    cdef iovec iovs[MAX_MSGS * MAX_PARTS]
    cdef unsigned char controls[MAX_MSGS * CMSG_BYTES]

    def __cinit__(self, sock):
        self.fd = sock.fileno()
        self._sock = sock
        self._names = {}
        memset(self.msgs, 0, sizeof(self.msgs))
        memset(self.control, 0, CMSG_BYTES)
        memset(self.controls, 0, sizeof(self.controls))

    cdef int _addr(self, object to, sockaddr_in *out) except -1:
        """Fill ``out`` for ``to`` = (dotted IPv4, port); 0 when ``to`` is not one (the caller
        sends that destination with Python's ``sendmsg``, which resolves names)."""
        if not isinstance(to, tuple):  # not an address (and maybe not hashable): sendmsg judges it
            return 0
        try:
            cached = self._names.get(to)
        except TypeError:  # a tuple holding something unhashable: not an address either
            return 0
        if cached is None:
            cached = _sockaddr(to)
            if len(self._names) >= SOURCE_CACHE_MAX:
                self._names.clear()
            self._names[to] = cached
        if cached is False:
            return 0
        cdef const unsigned char[:] raw = cached
        memset(out, 0, sizeof(sockaddr_in))
        out.sin_family = AF_INET
        out.sin_port = htons(<unsigned short> ((raw[0] << 8) | raw[1]))
        (<unsigned char *> &out.sin_addr)[0] = raw[2]
        (<unsigned char *> &out.sin_addr)[1] = raw[3]
        (<unsigned char *> &out.sin_addr)[2] = raw[4]
        (<unsigned char *> &out.sin_addr)[3] = raw[5]
        return 1

    cdef int _set_name(self, object to, msghdr *h, int m) except -1:
        """Address message ``m`` (header ``h``) to ``to``: none for ``None`` (a connected
        socket), else ``to`` as an IPv4 address; 0 when ``to`` is not one (the caller sends
        that destination with Python's ``sendmsg``, which resolves names or refuses)."""
        if to is None:
            h.msg_name = NULL
            h.msg_namelen = 0
            return 1
        if self._addr(to, &self.addrs[m]):
            h.msg_name = &self.addrs[m]
            h.msg_namelen = sizeof(sockaddr_in)
            return 1
        return 0

    cdef object _send_prepared(self, int m, int *todo, object failed):
        """``sendmmsg`` the first ``m`` prepared messages, again after EINTR or a partial
        send; a message the kernel refuses is added to ``failed`` as ``(todo[k], OSError)``
        and the ones after it still go. Returns ``failed`` (None when nothing failed)."""
        cdef int start = 0
        cdef int r, err
        while start < m:
            with nogil:
                r = sendmmsg(self.fd, &self.msgs[start], m - start, 0)
                err = errno
            if r > 0:
                start += r
                continue
            if r < 0 and err == EINTR:
                continue
            if failed is None:
                failed = []
            if r == 0:
                err = EAGAIN
            failed.append((todo[start], OSError(err, _strerror(err))))
            start += 1
        return failed

    def send(self, parts, destinations, int tos, int default_tos):
        """See :meth:`panama.runtime.net.mmsg.PySender.send`."""
        cdef Py_buffer views[3]
        cdef int nparts = len(parts)
        cdef int ndest = len(destinations)
        cdef int k, j, held = 0
        cdef int todo[MAX_MSGS]
        cdef int m = 0
        cdef msghdr *h
        if nparts < 1 or nparts > 3:
            raise ValueError("a datagram is one to three buffers")
        if ndest > MAX_MSGS:
            raise ValueError(f"at most {MAX_MSGS} destinations per send")
        failed = None
        slow = None
        try:
            for k in range(nparts):
                PyObject_GetBuffer(parts[k], &views[k], PyBUF_SIMPLE)
                held = k + 1
                self.iov[k].iov_base = views[k].buf
                self.iov[k].iov_len = <size_t> views[k].len
            for j in range(ndest):
                to = destinations[j]
                h = &self.msgs[m].msg_hdr
                if not self._set_name(to, h, m):
                    if slow is None:
                        slow = []
                    slow.append(j)
                    continue
                h.msg_iov = self.iov
                h.msg_iovlen = nparts
                _set_tos(h, self.control, tos, default_tos)  # the same bytes for every copy
                h.msg_flags = 0
                todo[m] = j
                m += 1
            failed = self._send_prepared(m, todo, failed)
        finally:
            for k in range(held):
                PyBuffer_Release(&views[k])
        if slow is not None:
            sendmsg = self._sock.sendmsg
            anc = () if tos == default_tos else [(_socket.IPPROTO_IP, _socket.IP_TOS, bytes((tos,)))]
            for j in slow:
                try:
                    sendmsg(parts, anc, 0, destinations[j])
                except (OSError, TypeError, ValueError, OverflowError) as exc:
                    if failed is None:
                        failed = []
                    failed.append((j, exc))
            if failed is not None:
                failed.sort(key=_first)
        return failed


    def send_each(self, messages, destinations, toses, int default_tos):
        """See :meth:`panama.runtime.net.mmsg.PySender.send_each`."""
        cdef int nmsg = len(messages)
        cdef int k, j, p, nparts, m = 0
        cdef int held = 0
        cdef int tos
        cdef int todo[MAX_MSGS]
        cdef msghdr *h
        if nmsg > MAX_MSGS:
            raise ValueError(f"at most {MAX_MSGS} messages per send_each")
        if len(toses) != nmsg or len(destinations) != nmsg:
            raise ValueError("send_each needs one destination and one TOS per message")
        failed = None
        slow = None
        try:
            for k in range(nmsg):
                parts = messages[k]
                nparts = len(parts)
                if nparts < 1 or nparts > MAX_PARTS:
                    raise ValueError("a datagram is one to three buffers")
                to = destinations[k]
                h = &self.msgs[m].msg_hdr
                if not self._set_name(to, h, m):
                    if slow is None:
                        slow = []
                    slow.append(k)
                    continue
                h.msg_iov = &self.iovs[m * MAX_PARTS]
                h.msg_iovlen = nparts
                h.msg_flags = 0
                for p in range(nparts):
                    PyObject_GetBuffer(parts[p], &self.held[held], PyBUF_SIMPLE)
                    self.iovs[m * MAX_PARTS + p].iov_base = self.held[held].buf
                    self.iovs[m * MAX_PARTS + p].iov_len = <size_t> self.held[held].len
                    held += 1
                _set_tos(h, self.controls + m * CMSG_BYTES, toses[k], default_tos)
                todo[m] = k
                m += 1
            failed = self._send_prepared(m, todo, failed)
        finally:
            for j in range(held):
                PyBuffer_Release(&self.held[j])
        if slow is not None:
            sendmsg = self._sock.sendmsg
            for k in slow:
                tos = toses[k]
                anc = () if tos == default_tos else [(_socket.IPPROTO_IP, _socket.IP_TOS, bytes((tos,)))]
                try:
                    sendmsg(messages[k], anc, 0, destinations[k])
                except (OSError, TypeError, ValueError, OverflowError) as exc:
                    if failed is None:
                        failed = []
                    failed.append((k, exc))
            if failed is not None:
                failed.sort(key=_first)
        return failed


cdef inline void _set_tos(msghdr *h, unsigned char *buf, int tos, int default_tos) noexcept:
    """Message ``h`` carries IP_TOS ``tos`` as control data written into ``buf`` (zeroed,
    CMSG_BYTES long), or none when ``tos`` is the socket's ``default_tos``."""
    cdef cmsghdr *c
    if tos == default_tos:
        h.msg_control = NULL
        h.msg_controllen = 0
        return
    c = <cmsghdr *> buf
    c.cmsg_level = IPPROTO_IP
    c.cmsg_type = IP_TOS
    c.cmsg_len = CMSG_LEN(sizeof(int))
    (<int *> CMSG_DATA(c))[0] = tos
    h.msg_control = buf
    h.msg_controllen = CMSG_SPACE(sizeof(int))


def _first(item):
    return item[0]


def _sockaddr(to):
    """6 bytes (port, IPv4 address, network order) for ``(dotted, port)``; False otherwise."""
    cdef unsigned char addr[4]
    if not isinstance(to, tuple) or len(to) != 2:
        return False
    host, port = to
    if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        return False
    encoded = host.encode("ascii", "replace")
    if inet_pton(AF_INET, encoded, addr) != 1:
        return False
    return bytes([(port >> 8) & 255, port & 255, addr[0], addr[1], addr[2], addr[3]])


def _strerror(int err):
    import os

    return os.strerror(err)
