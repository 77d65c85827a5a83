"""Socket I/O of the runtime: the packet socket and its clock (:mod:`.udp`), batched
``recvmmsg``/``sendmmsg`` (:mod:`.mmsg`, C in ``_mmsg.pyx``), UDP segmentation and receive
coalescing (:mod:`.offload`) and loopback multicast of results (:mod:`.mcast`).

Used by the switch daemon, the controller service and the worker library alike; imports
nothing of them.
"""
