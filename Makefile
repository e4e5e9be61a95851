# Lectern — run `make help` for the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PACKAGES := -e libs/common -e libs/answerer -e libs/eval -e clients/python -e libs/cli -e services/ingest -e services/retriever \
            -e services/reranker -e services/memory -e services/chat-gateway -e libs/testing
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# Python keeps the bytecode it compiles. This machine's environment sets PYTHONDONTWRITEBYTECODE
# and uv installs no .pyc, so every process compiled every module it imported again: a
# service's imports took 4.6 s against 2.2 s, collecting the suite 37 s against 17 s, and the
# suite starts hundreds of processes
unexport PYTHONDONTWRITEBYTECODE

.DEFAULT_GOAL := help

.PHONY: help install system-deps run test fuzz chaos test-fast lint format asyncapi bench bench-ingest bench-retrieval bench-rerank bench-chat bench-memory bench-reindex bench-startup bench-answers bench-offline bench-scale bench-reader train-reader train-reader-l3 train-reader-spans fit-margin fit-answerer fit-rerank tune-rerank soak clean client-models client-ts

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): libs/*/pyproject.toml services/*/pyproject.toml clients/python/pyproject.toml requirements-dev.txt constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip uv==0.13.9
	# torch first, pinned and by pip: 2.13.0 is the local CPU wheel (uv does not look on this
	# disk); any other spec pulls CUDA wheels
	$(PIP) install -q torch==2.13.0
	# the rest by uv into the same venv, torch kept: the versions pip resolves (pip freeze is
	# the same), fetched in parallel: ~20 s on a fresh machine against pip's 3-4 minutes
	$(VENV)/bin/uv pip install -q --python $(PY) -c constraints.txt $(PACKAGES) -r requirements-dev.txt
	# the wheel's pgvector is built for AVX-512 CPUs: probe it, rebuild portably if it crashes
	$(PY) -m lectern_common.runtime.pgvector ensure
	# export the local embedding model to ONNX once, before services start together
	$(PY) -m lectern_common.prepare_models
	touch $(STAMP)

install: $(STAMP) ## Install everything into .venv (torch pinned, then all packages editable)

run: install ## Start the embedded stack (NATS, Postgres, five services) and serve the gateway on :8000
	$(VENV)/bin/lectern up

lint: install ## ruff + mypy --strict
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy libs/common/src libs/answerer/src libs/eval/src libs/cli/src libs/testing/src clients/python/src services/*/src tests bench

format: install ## Format the code
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# OCR and the browser tests need Tesseract and Chromium: installed from Debian's packages when
# missing and this runs as root (CI does), so those tests run instead of skipping
SYSTEM_TOOLS := tesseract chromium
system-deps: ## Tesseract (OCR) and Chromium (browser tests) from Debian's packages, as root
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing$$missing from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    tesseract-ocr tesseract-ocr-eng chromium >/dev/null; \
	else echo "system-deps: missing$$missing (not root: OCR and browser tests will skip)"; fi

# The suite runs in PYTEST_WORKERS processes (pytest-xdist), a test file to a worker, each
# worker with embedded NATS and Postgres of its own: most tests wait on servers and processes,
# so one process left a core mostly idle (14 minutes against 8). schemathesis gives its
# generated tests one node id, which xdist's file scheduling folds into one test, so the
# OpenAPI fuzz file runs after (beside the workers, a fuzzed request timed out at 30 s on a
# loaded machine, 2026-12-02), in PYTEST_WORKERS processes of its own, each fuzzing a share
# of the operations (LECTERN_FUZZ_SHARD; 168 s in one process). The lint (a minute of mypy on a fresh clone)
# runs beside, at the lowest CPU priority, so that it takes only what the suite leaves; its
# output follows the suite's, and any of them failing fails the target
PYTEST_WORKERS ?= 2
FUZZ_TESTS := tests/gateway/test_openapi_fuzz.py
# the fuzz file in PYTEST_WORKERS processes at once, shard k of n each; the first prints as it
# goes, the others' output follows; sets `fuzzed` to 1 when any failed
FUZZ_SHARDS = fuzzed=0; shards=""; \
	for k in $$(seq 1 $$(( $(PYTEST_WORKERS) - 1 ))); do \
	  LECTERN_FUZZ_SHARD=$$k/$(PYTEST_WORKERS) $(VENV)/bin/pytest --durations=5 $(FUZZ_ARGS) \
	    $(FUZZ_TESTS) > $(VENV)/fuzz-$$k.log 2>&1 & shards="$$shards $$!"; done; \
	LECTERN_FUZZ_SHARD=0/$(PYTEST_WORKERS) $(VENV)/bin/pytest --durations=5 $(FUZZ_ARGS) \
	  $(FUZZ_TESTS) || fuzzed=1; \
	for pid in $$shards; do wait $$pid || fuzzed=1; done; \
	for k in $$(seq 1 $$(( $(PYTEST_WORKERS) - 1 ))); do \
	  echo "--- fuzz shard $$k/$(PYTEST_WORKERS)"; cat $(VENV)/fuzz-$$k.log; done
test: install system-deps ## Install, lint, and run the whole test suite against real NATS + Postgres
	@nice -n 19 $(MAKE) --no-print-directory lint > $(VENV)/lint.log 2>&1 & lint=$$!; \
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile --ignore=$(FUZZ_TESTS); tests=$$?; \
	echo "--- the OpenAPI fuzz tests, in $(PYTEST_WORKERS) processes"; $(FUZZ_SHARDS); \
	wait $$lint; linted=$$?; \
	echo "--- make lint (ran beside the tests)"; cat $(VENV)/lint.log; \
	if [ $$linted -ne 0 ]; then echo "make lint failed"; fi; \
	exit $$(( tests != 0 || fuzzed != 0 || linted != 0 ))

fuzz: install ## The deep schemathesis run over every route (300 examples each; docs/reliability.md)
	LECTERN_FUZZ_EXAMPLES=300 $(VENV)/bin/pytest -q -s tests/gateway/test_openapi_fuzz.py

chaos: install ## The long fault run: the cluster stack's NATS leader killed 8 times under load, gateway takeover, read replica stopped (docs/reliability.md)
	LECTERN_CHAOS_ROUNDS=8 $(VENV)/bin/pytest -q -s tests/e2e/test_cluster_stack.py tests/gateway/test_chat_takeover.py tests/common/test_read_replica.py

test-fast: FUZZ_ARGS = -m "not slow and not e2e"
test-fast: install ## The suite without slow and e2e tests
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not slow and not e2e" --ignore=$(FUZZ_TESTS)
	@$(FUZZ_SHARDS); exit $$fuzzed

asyncapi: install ## Regenerate docs/asyncapi.yaml and docs/openapi.json from the code
	$(PY) -m lectern_common.asyncapi > docs/asyncapi.yaml
	$(PY) -m lectern_gateway.openapi > docs/openapi.json

client-models: install ## Regenerate the Python client's models from docs/openapi.json
	$(PY) clients/python/scripts/generate_models.py

client-ts: ## Build the TypeScript client (clients/typescript): npm ci, API types from docs/openapi.json, tsc + browser bundle
	cd clients/typescript && npm ci --no-audit --no-fund && npm run generate && npm run build

bench: bench-answers bench-offline bench-reader bench-ingest bench-retrieval bench-rerank bench-chat bench-memory bench-reindex bench-startup bench-scale ## Run every benchmark

bench-answers: install ## Answer quality on real documents through upload, ingest and chat SSE (bench/answers)
	$(PY) bench/bench_answers.py

bench-offline: install ## The offline answerer's own time: reading every unit vs at most READ_AT_MOST (8) (after bench-answers)
	$(PY) bench/bench_offline_answer.py

bench-ingest: install ## Ingest throughput vs the raw embedder (../shared/data/docs)
	$(PY) bench/bench_ingest.py

bench-retrieval: install ## Retrieval quality (BEIR sets) and latency at 100k chunks
	$(PY) bench/bench_retrieval.py

# the scale benchmark's size: `make bench-scale SCALE_CHUNKS=200000 SCALE_TENANTS=40`
SCALE_CHUNKS ?= 1000000
SCALE_TENANTS ?= 100
# a million chunks' HNSW index is ~2 GB: Postgres as docs/deploy.md sizes it (4 GB of buffers)
SCALE_SHARED_BUFFERS ?= 4GB
bench-scale: install ## Retrieval at 1M chunks over 100 tenants of skewed sizes: latency, filtered recall, throughput, memory, disk
	$(PY) bench/bench_scale.py --chunks $(SCALE_CHUNKS) --tenants $(SCALE_TENANTS) --shared-buffers $(SCALE_SHARED_BUFFERS) --json /tmp/lectern-bench-scale.json

bench-rerank: install ## Re-rank latency and confidence bands
	$(PY) bench/bench_rerank.py

bench-chat: install ## Gateway overhead to first token
	$(PY) bench/bench_chat.py

soak: install ## 20 concurrent chats + continuous ingestion for 5 minutes: turns a second, first token, CPU a turn per service, against the accepted run in docs/benchmarks.md
	$(PY) bench/soak.py

clean: ## Remove the virtualenv, caches and local data
	rm -rf $(VENV) .lectern .mypy_cache .ruff_cache .pytest_cache .hypothesis

bench-memory: install ## Is memory right about the student (scripted students, dev beside test), and recall latency at 10,000 memories
	$(VENV)/bin/lectern eval-memory --set bench/memory --documents ../shared/data --json /tmp/lectern-bench-memory.json
	$(PY) bench/bench_memory.py

bench-reindex: install ## Re-index to another model while retrieval answers: latency during/before
	$(PY) bench/bench_reindex.py

bench-startup: install ## A service's time to ready with and without PyTorch (the lean image's runtime), and their sizes
	$(PY) bench/bench_startup.py

tune-rerank: install ## The bi-encoder's re-rank calibration and rank-prior share, replayed on bioasq-dev
	$(PY) bench/tune_rerank.py

# the readers: trained here from ../shared/data/reading (resuming from the last checkpoint in
# ~/.cache/lectern/), then exported as int8 ONNX into libs/common/src/lectern_common/
# (READER_EXPORT=--fp32 for the float graph): the offline answerer's, all 6 of the base's
# layers (reader/, about an hour on 2 cores), and the re-ranker's, its first 3 with a span
# head beside the relevance one (reader_l3_spans/, about 95 minutes; the default reader_l3/ is
# the same run without --spans, half the cost a word piece of the 6-layer one, 59 minutes)
# Those times are of 2 cores with bfloat16 (AVX-512 BF16); without it the steps run in float32,
# ~5 s a step of the 6-layer span reader on an AVX2-only EPYC: ~7.4 hours for its 5,299 steps
READER_EXPORT ?=
train-reader: install ## Train the answerer's reader (cross-encoder from the packaged MiniLM) and export it as int8 ONNX
	$(PY) bench/train_reader.py train
	$(PY) bench/train_reader.py export $(READER_EXPORT)

train-reader-l3: install ## Train the 3-layer reader with span and no-answer heads (reader_l3_spans; reader_l3 is the same without --spans) and export it as int8 ONNX
	$(PY) bench/train_reader.py train --layers 3 --spans --work $(HOME)/.cache/lectern/reader-train-l3s
	$(PY) bench/train_reader.py export --work $(HOME)/.cache/lectern/reader-train-l3s --out libs/common/src/lectern_common/reader_l3_spans $(READER_EXPORT)

# issue 59's reader: all 6 layers with span and no-answer heads (measured, not kept: see
# docs/benchmarks.md, forty-third session). 5,300 steps: ~6.5 s a step in float32 on the
# AVX2-only EPYC (~9.5 hours; a session resumes it), 1.5 s with bfloat16 on the AVX-512 BF16
# EPYC (2 h 16 min). `python bench/train_reader.py snapshot --work DIR` measures it mid-run.
SPANS_WORK ?= $(HOME)/.cache/lectern/reader-train-l6s
train-reader-spans: install ## Train the 6-layer reader with span and no-answer heads (resumable) and export it as int8 ONNX into reader_spans/
	$(PY) bench/train_reader.py train --spans --work $(SPANS_WORK)
	$(PY) bench/train_reader.py export --work $(SPANS_WORK) --out libs/common/src/lectern_common/reader_spans $(READER_EXPORT)

bench-reader: install ## The reader alone: SelQA test, COVID-QA, held-out bioasq, dev units (beside the bi-encoder and BM25); its span head on SQuAD, FairytaleQA, WikiTableQuestions
	@test -f /tmp/lectern-bench-answers.json || $(PY) bench/bench_answers.py
	$(PY) bench/bench_reader.py --run /tmp/lectern-bench-answers.json
	$(PY) bench/bench_spans.py

fit-margin: install ## Fit the answer margin chat refuses below on a bench-answers run (RUN=...); dev cross-fitted, test once
	$(PY) bench/fit_margin.py --json $(or $(RUN),/tmp/lectern-bench-answers.json)

fit-answerer: install ## Refit the offline answerer on a bench-answers run's dev split (RUN=/tmp/lectern-bench-answers.json); cross-fitted dev figures
	$(PY) bench/replay_answers.py --json $(or $(RUN),/tmp/lectern-bench-answers.json) --signals /tmp/lectern-answer-signals.npz
	cd bench && ../$(PY) fit_answerer.py --signals /tmp/lectern-answer-signals.npz --cross-fit /tmp/lectern-answer-cross-fitted
	$(PY) bench/replay_answers.py --json $(or $(RUN),/tmp/lectern-bench-answers.json) --cross-fitted /tmp/lectern-answer-cross-fitted

fit-rerank: install ## Fit the re-ranker's reader/retrieval weights on bioasq-dev's training questions; held-out nDCG@10
	@test -f /tmp/lectern-rerank-records.json || $(PY) bench/fit_rerank.py records
	$(PY) bench/fit_rerank.py fit
