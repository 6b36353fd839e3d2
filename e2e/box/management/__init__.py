"""The management cluster's scenarios, each beside the test that reads it: the program's VM through
the Proxmox VE API stand-in (vm.py), the guest as a real host running the host scripts (host.py),
the program's cluster part on a real API server (cluster_first_run.py, handover.py,
cluster_adoption.py, on ../cluster_part.py), and the whole box (../box.py): its life
(lifecycle.py, with the lost state, lost_state.py, and `make bench`'s floor, floor.py), its faults
(box_faults.py, acting on the guest's processes through guest_processes.py), the adoption of the
playbook's VM (playbook_vm.py, box_adoption.py), and the operator's webhooks on a real control
plane (webhook_trial.py). A scenario here is named to e2e.engine.netns as
`management.MODULE.FUNCTION`."""
