"""Lectern shared library: settings, event contracts, database, broker, telemetry, models."""

__version__ = "0.1.0"
