"""What runs on or for the cluster where the real thing cannot: the Helm chart repositories, the
Cluster API Operator, its admission webhook server, cert-manager's CA injector (the last three on
a shared controller loop, `controller_loop.py`), and the lab the Ansible playbook built, laid out
on an API server (`playbook_lab.py`). A stand-in for another thing on the cluster goes here."""
