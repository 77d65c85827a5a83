"""The real UDP runtime: switch daemons, controller service, local cluster, worker library.

Thin drivers of :mod:`panama.core` (see docs/runtime.md):

- :mod:`panama.runtime.udp` — addresses, picosecond clock, the packet socket (ECN via IP_TOS);
- :mod:`panama.runtime.switchd` — ``panama switch``: one Accelerator behind a UDP socket;
- :mod:`panama.runtime.controller_service` — ``panama controller serve`` (HTTP/JSON);
- :mod:`panama.runtime.cluster` — ``LocalCluster`` and ``panama cluster up|down|status``;
- :mod:`panama.runtime.communicator` — ``Communicator``: allreduce for one rank of one job;
- ``panama bench allreduce`` and ``panama bench switch`` measure this package: :mod:`panama.benchmarks`.

Nothing is imported here, so ``import panama.runtime`` stays cheap.
"""
