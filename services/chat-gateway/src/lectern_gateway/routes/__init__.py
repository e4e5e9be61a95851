"""HTTP routes, one module per domain."""
