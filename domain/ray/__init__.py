"""The Ray cluster: the head's needs, the one Ray version, the compiler flags, slices queueing, Spot preemption timings."""
