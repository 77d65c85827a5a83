"""The controller service (``panama controller serve``): the pure controller of
:mod:`panama.core.controller` behind an authenticated HTTP/JSON API.

- :mod:`.service` — the service: registration, admission, plans, switch installs;
- :mod:`.api` — its HTTP routes, built from the service (bodies and replies: :mod:`panama.runtime.control.messages`);
- :mod:`.jobs` — records of ranks and jobs and their lifecycle;
- :mod:`.cluster_file` — the cluster file (topology plus every daemon's addresses).
"""
