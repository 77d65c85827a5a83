"""The worker side: what one rank of one job links against.

- :mod:`.communicator` — :class:`~.communicator.Communicator`, PANAMA allreduce for one rank;
- :mod:`.results` — its receive paths (plain batches, GRO buffers) into the transport;
- :mod:`.heartbeat` — the rank's heartbeat thread;
- :mod:`.env` — where a worker finds its cluster and job (environment, job names);
- :mod:`.arrays` — the arrays an allreduce takes and gives;
- :mod:`.diagnosis` — what the counters say about a stuck allreduce.

torch is not imported here at module level (the runtime runs without it): the DDP hook
and the pinned staging of CUDA tensors live in :mod:`panama.distributed`.
"""
