"""The teachers' review queues."""
