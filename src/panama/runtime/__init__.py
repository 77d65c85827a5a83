"""The real UDP runtime: thin drivers of :mod:`panama.core` (see docs/runtime.md), in rooms:

- :mod:`panama.runtime.net` — socket I/O: addresses, the picosecond clock, the packet
  socket (ECN via IP_TOS), batched system calls, GSO/GRO, loopback multicast;
- :mod:`panama.runtime.switch` — ``panama switch``: one Accelerator behind a UDP socket;
- :mod:`panama.runtime.controller` — ``panama controller serve`` (HTTP/JSON);
- :mod:`panama.runtime.control` — the control plane the other rooms share: its messages
  (requests and replies, typed), the authenticated client, the server side, admission
  and tokens (``controller``, ``switch`` and ``worker`` import none of each other);
- :mod:`panama.runtime.worker` — ``Communicator`` (allreduce for one rank of one job; torch
  tensors taken without importing torch: the DDP hook is :mod:`panama.distributed.ddp_hook`);
- shared by those rooms: :mod:`.settings` (every setting of these processes, declared
  once), :mod:`.files`
  (private state files), :mod:`.process` and :mod:`.lifeline` (daemon start-up and
  lifetime);
- :mod:`panama.runtime.cluster` — ``LocalCluster``, ``panama cluster up|down|status``, and
  ``find_or_start_cluster`` (which cluster a training run's ranks use).

``panama train`` lives in :mod:`panama.training`; ``panama bench allreduce`` and
``panama bench switch`` measure this package (:mod:`panama.benchmarks`).

Nothing is imported here, so ``import panama.runtime`` stays cheap.
"""
