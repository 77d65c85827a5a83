"""``panama train``: data-parallel training of the reference LeNet on the runtime.

- :mod:`.run` — the training run (workers, cluster, results);
- :mod:`.config` — :class:`~.config.TrainConfig` and :class:`~.config.TrainResult`;
- :mod:`.steps` — seeded batches and shards, evaluation, the shared step;
- :mod:`.worker` — one worker process (gloo or PANAMA allreduce);
- :mod:`.data` and :mod:`.models` — the bundled datasets and the LeNet variant.

Built on :mod:`panama.runtime` (which never imports this package).
"""
