# Meter Plus: `make run` runs the firmware on this computer, `make test` runs every test.
# Both set up what they need first (a virtualenv from the pinned requirements-dev.txt).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUM    := $(shell cksum < requirements-dev.txt | cut -d' ' -f1)
STAMP  := $(VENV)/.installed-$(SUM)
RUN_STAMP := $(VENV)/.run-installed-$(SUM)
ARGS   ?=

.PHONY: run test test-fast bench bench-device soak sysdeps clean web

$(STAMP): requirements-dev.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Python 3.11 or newer is needed (found: $$($(PYTHON) --version))"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@rm -f $(VENV)/.installed-*
	# Every package is pinned, dependencies included, so installs are repeatable; --no-deps keeps
	# adafruit-blinka out (its board/busio modules would shadow the host stand-ins).
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-dev.txt
	@# Only the deliberately left-out Blinka family may be reported missing (host/cp/_bleio.py stands in for
	@# adafruit-blinka-bleio), and bleak: the tests use py-improv-ble-client's protocol module only.
	@$(BIN)/python -m pip check --disable-pip-version-check | \
		grep -v -E 'requires (adafruit-blinka|adafruit-blinka-bleio|adafruit-circuitpython-busdevice|adafruit-circuitpython-requests|bleak|bleak-retry-connector),|^No broken' | \
		{ ! grep . ; }
	@touch $@

$(RUN_STAMP): requirements-dev.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@rm -f $(VENV)/.run-installed-*
	grep -E '#[[:space:]]*run' requirements-dev.txt > $(VENV)/requirements-run.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -r $(VENV)/requirements-run.txt
	@touch $@

run: $(RUN_STAMP)
	$(BIN)/python -m host $(ARGS)

sysdeps:
	@bash tools/sysdeps.sh

# The tests run in TEST_JOBS pytest-xdist workers (2: CI's cores; the suite waits on simulated time and sockets
# half of its run, so two workers fit two cores; 3 were faster here but load-sensitive tests then failed), whole
# files each (pyproject.toml). The 20 slowest tests close the log: where the next minutes go. pytest's exit
# status 5 (no test collected) fails make like any other failure.
TEST_JOBS ?= 2

test: $(STAMP) sysdeps
	$(BIN)/python -m pytest -n $(TEST_JOBS) --durations=20 $(ARGS)

# The edit-test loop: the tests not marked slow (no host runtime, browser or soak), a few minutes. A test that
# starts the host runtime here fails and says it lacks the mark (tests/hostproc.py).
test-fast: $(STAMP) sysdeps
	METERPLUS_TEST_RING=fast $(BIN)/python -m pytest -n $(TEST_JOBS) -m "not slow" $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

# code.py on CircuitPython's own interpreter (unix port, the S3's number model): heap, smallest heap, polls.
# Needs a CircuitPython source tree (README.md, "Device bench") and gcc-multilib; skips with a message without one.
CIRCUITPY_SRC ?=
bench-device: $(STAMP)
	CIRCUITPY_SRC="$(CIRCUITPY_SRC)" $(BIN)/python -m bench.bench_device $(ARGS)

# The web interface: web-src/ (Preact, htm, uPlot; esbuild) -> web/index.html.gz + web/files.tsv. The built files
# are committed, so run/test need no Node.js; this target is for changing the interface (needs Node.js 18+ and npm).
web:
	cd web-src && npm ci --no-audit --no-fund && node build.mjs

clean:
	rm -rf $(VENV) .host

# Releases (docs/release.md). `make release VERSION=x.y.z KEY=path/to/ota_private_key.pem` writes
# dist/meterplus-x.y.z/ (signed update, upload archive, CIRCUITPY zip, SHA256SUMS) and dist/manifest.json, the channel
# ota.url points at; VERSION defaults to core/version.py's (the only one allowed), no KEY builds it unsigned.
# CIRCUITPY_SRC (above) builds CircuitPython's mpy-cross for .mpy files; without it one from the device bench's cache,
# else .py (RELEASE_ARGS=--py: .py anyway; --out DIR: elsewhere than dist/).
# `make install DRIVE=/media/$(USER)/CIRCUITPY [ARGS=--dry-run]` builds the release and puts it onto a board's drive.
VERSION ?=
KEY     ?=
RELEASE_ARGS ?=
DRIVE   ?=
.PHONY: release install
release: $(STAMP)
	CIRCUITPY_SRC="$(CIRCUITPY_SRC)" $(BIN)/python -m tools.release $(VERSION) $(if $(KEY),--key "$(KEY)") $(RELEASE_ARGS)

install: release
	@test -n "$(DRIVE)" || { echo "make install DRIVE=/path/to/CIRCUITPY (where the board's drive is mounted)"; exit 2; }
	$(BIN)/python -m tools.install "$(DRIVE)" $(ARGS)
