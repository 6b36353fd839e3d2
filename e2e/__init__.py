"""Test machinery kept apart from the program, in packages by concern, as Cluster API's own test/
tree is: what runs the tests (`engine/`), stand-ins for what cannot run here (`standins/`), the
real controllers built from upstream archives that run beside them (`controllers/`, a layer with
the stand-in packages), and the lab in a box with the scenarios the real-engine tests run in it
(`box/`). A package imports only from the ones before it in that list (tests/test_e2e_layout.py)."""
