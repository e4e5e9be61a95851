"""The gateway's memories domain."""
