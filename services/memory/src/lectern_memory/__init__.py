"""Lectern memory service."""
