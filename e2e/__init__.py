"""Test machinery kept apart from the program: the engine build, stand-ins for what cannot run here,
and the network-namespace runner for tests against lab addresses."""
