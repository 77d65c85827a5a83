"""Experiments that reproduce the claims of the original PANAMA work.

* :mod:`~panama.experiments.comm_ratio` — the motivation figure (communication share of an
  iteration and the single-job speed-up bound of in-network aggregation);
* :mod:`~panama.experiments.shared_cluster` — the main result: one shared cluster, the same
  workload under ``ring``, ``ina-fixed``, ``ina-single`` and ``panama``;
* :mod:`~panama.experiments.sweep` — grids of points in worker processes or on Dask, with
  resume and seed aggregation (:mod:`~panama.experiments.stats`);
* :mod:`~panama.experiments.report` — writes ``docs/results.md`` from experiment outputs;
* ``panama experiment ...`` and ``panama demo`` are in :mod:`panama.cli.experiment_cmds`.

This package sits above the drivers (simulator, runtime) and imports them lazily.
"""
