"""The gateway's sessions domain."""
