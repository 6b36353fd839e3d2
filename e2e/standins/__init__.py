"""Stand-ins for what cannot run here, one package for each thing they stand in for: the Proxmox
VE API (`proxmox/`), the VM and the commands inside it (`guest/`), and what runs on or for the
cluster (`cluster/`); what several of them share stays at this level (`https_server.py`). A new
stand-in goes in the package of what it stands in for; it may use e2e.engine, never e2e.box."""
