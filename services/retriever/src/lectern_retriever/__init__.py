"""Lectern retriever service."""
