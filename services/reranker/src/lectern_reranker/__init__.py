"""Lectern reranker service."""
