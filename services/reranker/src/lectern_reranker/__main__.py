"""Process entry: `python -m lectern_reranker`."""

from lectern_common.service import run_service
from lectern_reranker.app import create_app
from lectern_reranker.config import Settings


def main() -> None:
    """Build settings from the environment, build the app, serve until SIGTERM."""
    settings = Settings()
    run_service(create_app(settings), settings)


if __name__ == "__main__":
    main()
