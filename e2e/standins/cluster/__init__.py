"""What runs on or for the cluster where the real thing cannot: the Helm chart repositories, the
Cluster API Operator, its admission webhook server, cert-manager's CA injector (the last three on
a shared controller loop, `controller_loop.py`), the lab the Ansible playbook built, laid out on
an API server where k3s's real helm-controller installs its charts (`playbook_lab.py`), and the
pod runner (`pod_runner.py`, `pod_process.py`, `pod_volumes.py`, sharing `pod_status.py` with the
operator stand-in), which runs a Deployment's Pods, or a controller's Jobs' Pods, as processes of
the binaries built here (the real cluster-autoscaler, klipper-helm's `entry` with Helm). A stand-in
for another thing on the cluster goes here."""
