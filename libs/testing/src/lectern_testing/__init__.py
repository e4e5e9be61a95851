"""Test support for Lectern: the pytest plugin (real NATS and Postgres fixtures), a fake
Gemini / OpenAI-compatible server speaking their REST protocols, a gateway harness with
retriever and re-ranker stand-ins, and hostile files.

Installed by ``make install`` for tests and benchmarks only: production images never
install it, and no service package may import it (tests/test_architecture.py).
"""
