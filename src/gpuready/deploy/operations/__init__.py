"""pyinfra operations that yield commands only when the host differs from the spec."""
