"""Stand-ins for what of a Cluster API workload cluster (lab1) cannot run in the box: the kubeadm
control-plane and bootstrap providers, CAPMOX's VMs and the workers' kubelets. Each implements the
status fields of the Cluster API v1beta2 provider contracts, on the management cluster, and fails
loudly on a kind, version or field it does not know."""
