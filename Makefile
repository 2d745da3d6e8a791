# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEB_PACKAGES := hping3 openssh-server openssh-client ethtool iproute2 procps gcc libc6-dev python3 sudo
PYTEST_ARGS ?= -ra
BENCH_ARGS ?=

.PHONY: run test unit integration bench lint deb clean

# A venv of $(PYTHON) (>= 3.11, with venv/ensurepip: Debian's python3-venv, installed here
# as root), made afresh (--clear): a venv left by a failed install or another Python goes.
$(STAMP): setup.cfg pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python >= 3.11 (make PYTHON=... to name it)" >&2; exit 2; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "$(PYTHON) is Python $$($(PYTHON) -V 2>&1 | cut -d' ' -f2); nictune needs >= 3.11 (make PYTHON=python3.11 ...)" >&2; exit 2; }
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || [ "$$(id -u)" != 0 ] || { \
	  echo "installing Debian package python3-venv"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; }
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "$(PYTHON) cannot make a venv: apt-get install python3-venv (as root)" >&2; exit 2; }
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,cluster,bench]'
	touch $(STAMP)

# Debian packages the deploy and validation tests use (needs root; skipped otherwise).
deb:
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi; \
	else echo "not root: skipping Debian packages ($(DEB_PACKAGES)); namespace tests will be skipped"; fi

run: $(STAMP)
	$(BIN)/nictune optimize configs/paper-47.yaml --out runs/paper-47

test: $(STAMP) deb
	$(BIN)/ruff check .
	$(BIN)/pytest $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/pytest -m "not netns" $(PYTEST_ARGS)

integration: $(STAMP) deb
	$(BIN)/pytest -m netns $(PYTEST_ARGS)

bench: $(STAMP) deb
	$(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
