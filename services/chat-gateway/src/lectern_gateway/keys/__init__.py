"""The gateway's keys domain."""
