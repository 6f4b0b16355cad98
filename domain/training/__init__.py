"""A training job: its resolved description, the presets, MaxText's configuration and config check, and the job's log (events, the one reader, goodput)."""
