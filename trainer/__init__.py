"""Programs that run on the Ray cluster: MaxText pre-training through Ray Train's JaxTrainer."""
