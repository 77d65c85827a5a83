"""The switch daemon (``panama switch``): one aggregation accelerator behind a UDP socket.

- :mod:`.daemon` — the process: settings, sockets, the HTTP control API, the loop it runs;
- :mod:`.dataplane` — :class:`~.dataplane.DataPlane`, the state and the per-datagram
  ``ingest()`` both loops share;
- :mod:`.loop_plain` and :mod:`.loop_batch` — the two data-plane loops (one datagram per
  buffer; GRO/GSO batches);
- :mod:`.api` — its HTTP routes and Prometheus metrics.
"""
