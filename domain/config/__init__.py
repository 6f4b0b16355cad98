"""What the stacks take and give: each setting and output declared once, the readers, the stack's identity and the one error type for unusable input."""
