"""Experiments that reproduce the claims of the original PANAMA work.

* :mod:`~panama.experiments.comm_ratio` — the motivation figure (communication share of an
  iteration and the single-job speed-up bound of in-network aggregation);
* :mod:`~panama.experiments.shared_cluster` — the main result: one shared cluster, the same
  workload under ``ring``, ``ina-fixed``, ``ina-single`` and ``panama``;
* :mod:`~panama.experiments.sweep` — grids of points in worker processes or on Dask, with
  resume and seed aggregation (:mod:`~panama.experiments.stats`);
* :mod:`~panama.experiments.report` — writes a results page from experiment outputs;
* :mod:`~panama.experiments.page_outputs` — the results page's outputs and the settings of
  each (``reproduce`` runs them); :mod:`~panama.experiments.publish` stores them in
  ``docs/results/`` and writes ``docs/results.md`` and the README's rows;
* ``panama experiment ...`` and ``panama demo`` are in :mod:`panama.cli.experiment_cmds`
  (``reproduce`` and ``publish`` in :mod:`panama.cli.page_cmds`).

This package sits above the drivers (simulator, runtime) and imports them lazily.
"""
