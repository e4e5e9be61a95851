"""Lectern ingest service."""
