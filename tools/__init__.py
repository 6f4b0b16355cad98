"""Developer tools, the top of the import layers (pyproject.toml): they may import every package
of the product and none imports them. `sync_settings` writes the generated tables and project
files (`scripts/sync-settings`)."""
