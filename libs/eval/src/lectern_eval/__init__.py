"""Evaluation of a running Lectern through its public contracts (HTTP, SSE, NATS)."""
