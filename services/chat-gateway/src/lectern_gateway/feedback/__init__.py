"""The gateway's feedback domain."""
