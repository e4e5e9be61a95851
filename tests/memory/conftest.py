"""Memory-service fixtures: one real MiniLM embedder for the module's tests."""

import pytest

from lectern_common.embeddings import Embedder, LocalEmbedder
from lectern_memory.config import Settings


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The packaged MiniLM, loaded once."""
    return LocalEmbedder(Settings())


@pytest.fixture
def memory_settings(nats_url: str, database_url: str) -> Settings:
    """Settings pointing at the session's servers."""
    return Settings(nats_url=nats_url, database_url=database_url, http_port=0, log_json=False)
