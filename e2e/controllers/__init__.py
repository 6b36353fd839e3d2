"""Real controllers the box runs as processes beside its API servers, built from upstream archives
by e2e/engine/build-engine.sh (not stand-ins: the code is upstream's, only how it is started is
the box's): the Cluster API core manager (`cluster_api.py`). It may use e2e.engine and
e2e.standins.https_server, never another stand-in package or e2e.box."""
