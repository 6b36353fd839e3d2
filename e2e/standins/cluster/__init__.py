"""What runs on or for the cluster where the real thing cannot: the Helm chart repositories, the
Cluster API Operator, its admission webhook server, cert-manager's CA injector (the last three on
a shared controller loop, `controller_loop.py`), the lab the Ansible playbook built, laid out
on an API server (`playbook_lab.py`), with what k3s's helm-controller left of it and removes when a
HelmChart goes (`helm_controller_standin.py`, on the same loop), and the pod runner (`pod_runner.py`, `pod_process.py`,
sharing `pod_status.py` with the operator stand-in), which runs one Deployment's Pods as processes
of the binaries built here (the real cluster-autoscaler). A stand-in for another thing on the cluster goes here."""
