"""The gateway's web domain."""
