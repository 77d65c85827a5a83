"""The control plane of the runtime: HTTP/JSON between workers, the controller and the
switch daemons (docs/runtime.md, "API" and "Trust model").

- :mod:`.messages` — every request body and reply, as pydantic models both sides use;
- :mod:`.client` — the authenticated client: a call takes a reply model and returns it typed;
- :mod:`.server` — the servers' middlewares (authentication, errors), bounded bodies, replies;
- :mod:`.admission` — which connections a server keeps open (floods without the token);
- :mod:`.tokens` — the cluster's and the jobs' bearer tokens.
"""
