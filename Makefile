# The two commands of the README. Both work on a fresh Debian machine as root (or with sudo):
#   make run   — install what is missing, start a local Redis and the daemon, run sample jobs, show them
#   make test  — install what is missing, then the whole test suite
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
APT_PACKAGES := redis-server python3-venv default-jdk-headless libapache-poi-java antiword procps prometheus systemd libreoffice-calc-nogui spin tcc chromium chromium-driver

.PHONY: setup deps venv jvm run test bench clean

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

venv: deps
	@$(PY) -m pip --version >/dev/null 2>&1 || python3 -m venv --clear $(VENV)  # new, or half-made by an interrupted run
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[daemon,web,test]'

jvm: deps
	@if [ -x jvm/build.sh ]; then bash jvm/build.sh; fi

# Our packages' bytecode, written once: every daemon and CLI process the tests (or systemd) start
# imports ~0.2 s less, and a shell with PYTHONDONTWRITEBYTECODE=1 would otherwise compile them anew
# in each process (compileall writes .pyc whatever that variable says)
setup: venv jvm
	@$(PY) -m compileall -q -j 0 store client supervisor slots extract web >/dev/null

run: setup
	@bash deploy/quickstart.sh

test: setup
	@$(PY) -m pytest -q --durations=30

bench: setup
	@$(PY) bench/bench_pool.py
	@$(PY) bench/bench_scale.py --quick

clean:
	rm -rf $(VENV) jvm/build
