"""What runs the tests, and nothing they test: the engine build (`build-engine.sh`), the real CLI
on a copy of the project (`cli.py`), the network-namespace runner for scenarios (`netns.py`) and
a real Kubernetes control plane (`control_plane.py`). A new module goes here when it runs or
builds real software for the tests; it imports nothing else of e2e (netns.py finds a scenario
by its name in e2e.box only when it runs it)."""
