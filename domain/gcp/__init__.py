"""Google Cloud and GKE: the infra stack's resource arguments, naming rules, DCN address plans, machine types, images and the worker image build."""
