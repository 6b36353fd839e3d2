"""The lab in a box and the scenarios the real-engine tests run, each a function that
e2e.engine.netns runs in a network namespace of its own by its name here, `package.module.function`
(`in_new_netns("management.lifecycle.whole_box_lifecycle", ...)`; scenarios.py's by the bare
function name). What every box shares is here: scenarios.py (the README's first run and the CLI,
with the values and steps every scenario shares), the whole box (box.py, run by `make box` through
make_box.py, and what a run made it do, observed.py), the program's cluster part on a real API
server (cluster_part.py) and the programs the box's engine runs as the project's `__main__.py`
(box_program.py, box_vm_program.py). The scenarios are in a package per topic: the management
cluster's (management/: the VM, the host, the cluster part, the whole box's life, faults and
adoption), the workload cluster's (workload/: lab1 scaling and a clusterctl-made lab1, on the
workload box), and the owner's takeover as docs/adoption.md writes it, management cluster and
lab1 at once (takeover/). A new scenario goes in the module of its topic, or a new module beside a
new test; a module here imports only from the ones it builds on, never in a circle
(tests/test_e2e_layout.py)."""
