"""A FAKE Kubernetes API server, as its own process on loopback, for tests.

No real kube-apiserver can be installed on these machines (no package ships it, and the
binaries envtest, kind and k3s use cannot be fetched), so the Kubernetes driver is tested
against this fake, which follows the API server's semantics for the kinds the driver uses
(Namespaces, ConfigMaps, Leases; Events so kubectl describe works): the global resourceVersion,
409 Conflict and AlreadyExists, 404, 400, 422 with causes, watches with resumption and 410,
selectors, PATCH, discovery for kubectl, fault hooks and a state file that survives restarts.
What it is not: authentication, admission, server-side apply, managedFields, other kinds.

Modules: status (error objects), resources (the kinds), validation, store (objects, versions,
history, state file), selectors, patch, rest (the verbs), watch, faults (admin endpoint),
discovery, server (HTTP), __main__ (the command), process (start/stop/kill/pause/restart it
from tests), fixtures (the pytest plugin).
"""
