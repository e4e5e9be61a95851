"""Signed webhooks (Standard Webhooks) for subscribers that do not run NATS."""
