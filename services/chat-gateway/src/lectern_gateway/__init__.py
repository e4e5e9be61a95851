"""Lectern gateway service."""
