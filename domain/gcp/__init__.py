"""Google Cloud and GKE: naming rules, GKE's versions and allocatable shares, DCN address plans, machine types, images and the kubeconfig."""
