# raft_queue: `make run` starts a local 3-node cluster, `make test` runs the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA ?= .raftq/dev
NODES ?= 3
BASE_PORT ?= 7100
PYTEST_ARGS ?=

.PHONY: setup run test unit integration lint proto proto-check bench bench-peers chaos soak clean

# Debian packages the tests use: chromium + chromium-driver (the status page's
# browser test), prometheus (promtool checks configs/monitoring/), fuse3
# (libfuse3 + fusermount3 for the EIO disk fault, chaos/eiofs.py). CI is a
# fresh Debian machine running as root; elsewhere install them yourself.
SYSTEM_PACKAGES := chromium chromium-driver prometheus fuse3

$(STAMP): pyproject.toml
	if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  ! (command -v chromedriver && command -v promtool && command -v fusermount3) >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES); fi
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/raftq dev up --nodes $(NODES) --data-dir $(DATA) --base-port $(BASE_PORT)

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: setup
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

integration: setup
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy raft_queue

proto: setup
	$(BIN)/python -m grpc_tools.protoc -Iraft_queue/_proto=proto --python_out=. \
	  --grpc_python_out=. --pyi_out=. proto/raft_queue/v1/*.proto

bench: setup
	$(BIN)/raftq bench --runs 3

# Same-run comparison with NATS JetStream through the peer harness (docs/benchmarks.md);
# needs ../shared/bench/peers/setup.sh once. make bench-peers ROUNDS=3
bench-peers: setup
	$(BIN)/python -m raft_queue.bench.peer_compare --rounds $${ROUNDS:-3} --out $${OUT:-peer-results}

chaos: setup
	$(BIN)/python -m chaos.campaign --duration $${DURATION:-180} $${SEED:+--seed $$SEED}

# Mixed load on a 3-node cluster with a node restart every minute; RSS sampled
# (chaos/soak.py). make soak DURATION=600
soak: setup
	$(BIN)/python -m chaos.soak --duration $${DURATION:-600}

clean:
	rm -rf .raftq .pytest_cache .hypothesis
