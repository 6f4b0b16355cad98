"""The Ray cluster: KubeRay manifests, the head's needs, the one Ray version, slices queueing, Spot preemption timings."""
