"""Benchmarks that report throughput as a ratio against a baseline measured in the same run.

- :mod:`~panama.benchmarks.core` — ``panama bench core``: the accelerator against ``numpy.add``.
- :mod:`~panama.benchmarks.sim` — ``panama bench sim``: simulator hops/s, compiled against pure Python.
- :mod:`~panama.benchmarks.allreduce` — ``panama bench allreduce``: PANAMA against gloo.
- :mod:`~panama.benchmarks.switch` — ``panama bench switch``: one daemon against the socket floor.
- :mod:`~panama.benchmarks.settings` — their settings models (each command's options).
- :mod:`~panama.benchmarks.opcodes` — bytecodes per operation (``bench/*.py --opcodes``).

The scripts in ``bench/`` are thin wrappers over these and the library.
"""
