"""Real controllers the box runs as processes beside its API servers, built by
e2e/engine/build-engine.sh from upstream archives and the Go module proxy (not stand-ins: the code
is upstream's, only how it is started is the box's, manager.py): the Cluster API managers
(cluster_api.py) and the IPAM in-cluster manager (ipam.py), by provider CR in deployed.py. It may
use e2e.engine and e2e.standins.https_server, never another stand-in package or e2e.box."""
