"""Thin component resources: each wires the resources of one concern, parented to itself."""
