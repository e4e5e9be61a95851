"""The gateway's search domain."""
