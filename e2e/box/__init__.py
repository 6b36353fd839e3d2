"""The lab in a box and the scenarios the real-engine tests run, each a function that
e2e.engine.netns runs in a network namespace of its own by its name here, `module.function`
(`in_new_netns("lifecycle.whole_box_lifecycle", ...)`; scenarios.py's by the bare function name).
One module per topic, beside the test that reads it: scenarios.py (the README's first run and the
CLI, with the values and steps every scenario shares), vm.py, host.py, the program's cluster part
on a real API server (cluster_part.py's shared setup, cluster_first_run.py, handover.py,
cluster_adoption.py), and the whole box (box.py, run by `make box` through make_box.py): its life
(lifecycle.py), faults (box_faults.py) and adoption of the playbook's VM (playbook_vm.py,
box_adoption.py); the workload cluster's scenarios in a package of their own (workload/: lab1
scaling and the takeover of a clusterctl-made lab1, on the workload box); the owner's takeover
as docs/adoption.md writes it, management cluster and lab1 at once (takeover/); with webhook_trial.py
and the programs the box's engine runs as the project's `__main__.py` (box_program.py,
box_vm_program.py). A new scenario goes in the module of its topic, or a new module beside a new
test; a module here imports only from the ones it builds on, never
in a circle (tests/test_e2e_layout.py)."""
