"""The workload cluster's scenarios and what they run on: the workload box (workload_box.py: a
management API server with the real Cluster API core, the workload stand-ins and the chart
repositories), the program's lab1 from its first `up` through scaling 0 -> N -> 0
(lab1_autoscaling.py, at a site of lab1_sites.py, with what it reads, lab1_reads.py, what rolls its
machines, lab1_rollouts.py, and its controls, lab1_controls.py), and a lab1 as clusterctl makes it
(clusterctl_lab1.py, with the entry read back from the live objects, lab1_state.py), which the
owner's journey takes over (e2e/box/takeover/). A scenario here is named to e2e.engine.netns as
`workload.MODULE.FUNCTION`."""
