# Leveret: `make run` and `make test` are all a newcomer needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# pytest-xdist workers for `make test`: most tests wait on a broker's round trips, so two run
# side by side on two cores (each file in one worker: its module-scoped node is shared);
# TEST_WORKERS=0 runs them one after another in this process
TEST_WORKERS ?= 2
# The suite starts hundreds of Python processes (nodes, their worker launchers, leveretctl):
# where PYTHONDONTWRITEBYTECODE is set (some CI images set it) each would compile every module
# it imports again, and pytest would rewrite every test module's asserts again in each worker
# (measured on test_durable_definitions.py, its nodes restarted seven times: 21.6 user CPU-s
# without the caches, 13.8 with them); the tests write the caches, which .gitignore leaves out
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
HOST ?= 127.0.0.1
PORT ?= 5672
DATA ?= ./var
NODES ?= 3
CLUSTER_PORT ?= 25672

.PHONY: run run-cluster test venv node-clients bench bench-compare bench-paper fuzz clean unit integration faults analyze jepsen

$(BIN)/leveret-server: pyproject.toml requirements.lock
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11+ is required (apt-get install python3 python3-venv)"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	@touch $@

venv: $(BIN)/leveret-server

run: venv
	mkdir -p $(DATA)
	$(BIN)/leveret-server --host $(HOST) --port $(PORT) --data-dir $(DATA)

# NODES nodes on PORT+i (AMQP) and CLUSTER_PORT+i (Raft), data in DATA/node1.. (docs/cluster.md);
# Ctrl-C stops them all.
run-cluster: venv
	$(BIN)/python -m actors.node.cluster_run --nodes $(NODES) --host $(HOST) --port $(PORT) \
		--cluster-port $(CLUSTER_PORT) --data-dir $(DATA)

# the suite runs the Spark job (tests/unit/analysis, the event-log test), which needs Java 17
JAVA_CHECK = @java -version >/dev/null 2>&1 || { echo "Java 17 is needed for Spark (make test, make analyze): sudo apt-get install openjdk-17-jre-headless"; exit 1; }

# the management UI's tests drive Debian's chromium with its chromedriver (Selenium)
BROWSER_CHECK = @test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium and chromium-driver for the browser tests"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null || \
		{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
		  apt-get install -y -q chromium chromium-driver >/dev/null; } || exit 1; \
	else echo "The browser tests need chromium: sudo apt-get install chromium chromium-driver"; exit 1; fi; }

# the Jepsen-style cluster test (tests/faults/cluster) partitions loopback with Debian's nftables,
# as root: installed here when missing; without it (or root) its partition nemeses skip
NFT_INSTALL = command -v nft >/dev/null 2>&1 || { \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing nftables for the partition tests"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables >/dev/null || \
		{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
		  apt-get install -y -q nftables >/dev/null; }; \
	else false; fi; }
NFT_NOTE = @$(NFT_INSTALL) || echo "note: the partition nemeses of tests/faults/cluster will be skipped; to run them, as root: apt-get install nftables"
NFT_CHECK = @$(NFT_INSTALL) || { echo "make jepsen partitions loopback with nftables, as root: sudo apt-get install nftables, then sudo make jepsen"; exit 1; }

# the suite runs amqplib programs (tests/clients/node, pinned by its package-lock.json) and
# amqp091-go ones (tests/clients/go, with Go and Debian's amqp091-go package)
NODE_CLIENTS := tests/clients/node
NODE_CHECK = @command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "Node.js 18+ and npm are needed for the amqplib client tests (make test): sudo apt-get install nodejs npm"; exit 1; }
# installed as root (as chromium is); otherwise `make test` says how and stops, so the Go client
# tests never skip quietly
GO_CHECK = @command -v go >/dev/null 2>&1 && test -d /usr/share/gocode/src/github.com/rabbitmq/amqp091-go || { \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing golang-go and amqp091-go for the Go client tests"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go golang-github-rabbitmq-amqp091-go-dev >/dev/null || \
		{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
		  apt-get install -y -q golang-go golang-github-rabbitmq-amqp091-go-dev >/dev/null; } || exit 1; \
	else echo "The Go client tests need Go and amqp091-go: sudo apt-get install golang-go golang-github-rabbitmq-amqp091-go-dev"; exit 1; fi; }

# npm ci when node_modules is missing or older than the lock file
$(NODE_CLIENTS)/node_modules/.package-lock.json: $(NODE_CLIENTS)/package-lock.json $(NODE_CLIENTS)/package.json
	$(NODE_CHECK)
	cd $(NODE_CLIENTS) && npm ci --no-audit --no-fund
	@touch $@

node-clients: $(NODE_CLIENTS)/node_modules/.package-lock.json

test: venv node-clients
	$(JAVA_CHECK)
	$(BROWSER_CHECK)
	$(GO_CHECK)
	$(NFT_NOTE)
	$(PYTEST) tests -n $(TEST_WORKERS) --dist loadfile

unit: venv
	$(PYTEST) tests/unit

integration: venv node-clients
	$(PYTEST) tests/integration

faults: venv
	$(NFT_NOTE)
	$(PYTEST) tests/faults

# The long Jepsen-style run (issue 15): three nodes on 127.0.0.11-13, each nemesis for 80 s of
# faults (4 x 10 s, 10 s healed between), then settle, drain and the checker's table, and the
# lifecycle job on the nodes' event logs held against it (Java, for Spark)
# (tests/faults/cluster/jepsen.py). Root, for nftables. JEPSEN_ARGS="--nemesis bridge --seed 7"
# for one nemesis, --help for the rest; the table also goes to bench/results/jepsen.txt.
jepsen: venv
	$(NFT_CHECK)
	$(JAVA_CHECK)
	@mkdir -p bench/results
	$(BIN)/python -m tests.faults.cluster.jepsen --out bench/results/jepsen.txt $(JEPSEN_ARGS)

bench: venv
	$(BIN)/python -m bench $(BENCH_ARGS)

# Installs Debian's rabbitmq-server when missing, runs it on a spare loopback port for the run,
# and prints Leveret's figures beside it.
bench-compare: venv
	$(BIN)/python -m bench.compare $(BENCH_ARGS)

# Seed 003's experiment (figures 5 and 6): send rate against queue count per x-confirm-on mode,
# on a Leveret node it starts (or --url); BENCH_ARGS="--quick --modes enqueue" for a short run.
bench-paper: venv
	$(BIN)/python -m bench.paper $(BENCH_ARGS)

# 10^6 generated AMQP frame sequences against a node it starts, a witness connection served
# throughout (tools/fuzz.py; issue 11): not part of `make test`. FUZZ_ARGS="--sequences 100000"
# for a shorter run; the summary goes to bench/results/fuzz.txt.
fuzz: venv
	$(BIN)/python -m tools.fuzz $(FUZZ_ARGS)

# Lifecycle analysis of event logs (leveret-server --events full; docs/events.md): a PySpark job,
# local[*] unless MASTER=spark://HOST:PORT (a standalone cluster; the job ships itself). EVENTS
# and OUT may be file://, hdfs:// or s3a:// URIs; a second run into the same OUT reads only the
# new files. ANALYZE_ARGS="--message ID --full ..." for more.
EVENTS ?= $(DATA)/events
OUT ?= $(DATA)/analysis
MASTER ?=
analyze: venv
	$(JAVA_CHECK)
	$(BIN)/python -m spark_analysis.lifecycle --events $(EVENTS) --out $(OUT) $(if $(MASTER),--master $(MASTER)) $(ANALYZE_ARGS)

clean:
	rm -rf $(VENV) var $(NODE_CLIENTS)/node_modules
