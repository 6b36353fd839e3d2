"""The Proxmox VE API stand-in (`pve_api_standin.py`) and the node behind it, one module per part
of the API: tasks and the node's state (`pve_tasks.py`), storages (`pve_storage.py`), VMs
(`pve_vms.py`), clones (`pve_clone.py`), the node, the cluster and the guest agent
(`pve_node.py`). What they all share is in `common.py`, which imports none of them; each imports
only the modules before it in that order, so a new part of the API goes in a module of its own
between `pve_tasks.py` and `pve_api_standin.py`. Request bodies are read in `pve_bodies.py`,
which imports none of them."""
