"""The gateway's documents domain."""
