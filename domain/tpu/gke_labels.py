"""GKE's names for TPU nodes: the node labels and the extended resource, as GKE sets them. The
manifests select and request by them (domain/resources/kuberay.py,
domain/resources/gcp_resources.py) and the policies read them back (policies/rules/)."""

TPU_RESOURCE = "google.com/tpu"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
# The provisioning model: Spot nodes carry gke-spot=true, flex-start nodes gke-flex-start=true
# (the cluster autoscaler's FlexStartLabel; GKE's flex-start pages select it).
SPOT_LABEL = "cloud.google.com/gke-spot"
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
# The label GKE's managed DRANET driver schedules on.
DRANET_LABEL = "cloud.google.com/gke-networking-dra-driver"
