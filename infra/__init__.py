"""The infra Pulumi project: components that wire the resources the domain modules describe."""
