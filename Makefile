# One command per job; each sets itself up on a fresh Debian machine.
#   make image     build, tag and push the default recipe (PUSH=0: no push)
#   make test      the whole test suite, with its Docker engine and registry
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RECIPE ?= recipes/glm53-flash-dflash2-gb300/recipe.yaml
PUSH ?= 1
BUILD_ARGS ?=
PYTEST_ARGS ?=
DEBIAN_PACKAGES := $(shell sed 's/\#.*//' requirements/debian-packages.txt)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# $(call pin,NAME): NAME's `NAME==VERSION` line in requirements/vllm.txt.
pin = $(shell grep -E '^$(1)==' requirements/vllm.txt)

export IMAGE_OWNER

.PHONY: owner install oracle deps engine lock record image compose geometry test bench pristine clean

include overlay/pristine.mk

# The project itself, editable, with its test tools: the direct dependencies' pins are in
# pyproject.toml, everything they pull in is pinned by the two constraints files.
CONSTRAINTS := requirements/constraints.txt requirements/oracle.txt

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(addprefix -c ,$(CONSTRAINTS)) -e '.[test]'
	touch $@

# vLLM's own code on the CPU: the oracle for geometry, patches and serve flags.
$(VENV)/.oracle: $(VENV)/.installed requirements/vllm.txt requirements/oracle.txt
	$(PY) -m pip install -q $(call pin,torch)
	$(PY) -m pip install -q --no-deps $(call pin,vllm)
	$(PY) -m pip install -q --no-deps -r requirements/oracle.txt
	touch $@

install: $(VENV)/.installed
oracle: $(VENV)/.oracle

# Debian packages for the engine, the test registry, arm64 emulation and the venv (before it).
deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# A Docker engine: the one at DOCKER_HOST / the default socket, else start dockerd.
engine: deps
	$(SUDO) tests/infra/services.sh engine-up

lock: install engine
	$(PY) build.py lock --recipe $(RECIPE)

# Copy the oracle record of the recipe's image in the engine next to the recipe (commit it like
# the lock). `make image` keeps it already (build --keep-record) whenever the gate imported vLLM.
record: install engine
	$(PY) build.py record --recipe $(RECIPE)

# A push goes to ghcr.io/$(IMAGE_OWNER)/...: refuse before anything is installed or built.
owner:
	@if [ "$(PUSH)" = 1 ] && [ -z "$(IMAGE_OWNER)" ] && grep -q '{owner}' $(RECIPE); then \
	  echo "make image: no image owner to push to: set IMAGE_OWNER=your-namespace (or PUSH=0 to build without pushing)" >&2; exit 2; fi
	@if [ -n "$(IMAGE_OWNER)" ]; then echo "image owner: $(IMAGE_OWNER) (IMAGE_OWNER)"; fi

image: owner deps install engine
	@lockfile=$$(dirname $(RECIPE))/recipe.lock.json; \
	if [ ! -f $$lockfile ] && ! grep -q '^ *digest:' $(RECIPE); then $(PY) build.py lock --recipe $(RECIPE); fi
	$(PY) build.py build --recipe $(RECIPE) $(if $(filter 1,$(PUSH)),--push,--no-push) \
	  --keep-record --report out/build-report.json $(BUILD_ARGS)

compose: install
	$(PY) build.py compose --recipe $(RECIPE)

geometry: install
	$(PY) build.py geometry --recipe $(RECIPE)

test: deps install oracle pristine vllm-tests
	PYTHON_VENV=$(abspath $(PY)) tests/infra/run-tests.sh $(PYTEST_ARGS)

bench: deps install oracle pristine
	PYTHON_VENV=$(abspath $(PY)) tests/infra/run-bench.sh

clean:
	rm -rf $(VENV) out .cache
