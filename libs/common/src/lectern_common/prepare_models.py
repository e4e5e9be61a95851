"""``python -m lectern_common.prepare_models``: export the local embedding model ahead of use.

``make install`` and the container build run it, so services that start together find the
ONNX export cached instead of each tracing the model at start-up. (It sits apart from
``onnx_models`` so that module stays below ``embeddings`` in the import graph.)
"""

from __future__ import annotations

import logging


def main() -> None:
    """Load the local embedder once (exporting and quantizing its graph if needed)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from lectern_common.embeddings import LocalEmbedder
    from lectern_common.settings import BaseServiceSettings

    embedder = LocalEmbedder(BaseServiceSettings())
    print(f"local embedding model {embedder.name}: backend {embedder.backend}")


if __name__ == "__main__":
    main()
