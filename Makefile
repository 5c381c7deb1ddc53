# One command per job; each sets itself up.
#   make image     build, tag and push the default recipe (PUSH=0: no push). Needs a Docker engine
#                  that answers, Python >= 3.10 and git; creates the venv with the project's runtime
#                  dependencies (no test extra) and installs nothing else.
#   make port TO=VERSION   (maintainers) follow a vLLM release: fetch its wheel, port the newest overlay
#                  series onto it, hold the gate to its planning; one report, exit code per outcome
#                  (TO=latest: PyPI's newest, TO=nightly; PORT_ARGS=--json, --from SERIES, --write;
#                  docs/overlay.md "Following a vLLM release")
#   make test      the whole test suite, with its Docker engine and registry (a Debian machine:
#                  installs the test packages, and Debian's docker.io only where no engine is)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RECIPE ?= recipes/glm53-flash-dflash2-gb300/recipe.yaml
PUSH ?= 1
BUILD_ARGS ?=
PYTEST_ARGS ?=
DEBIAN_PACKAGES := $(shell sed 's/\#.*//' requirements/debian-packages.txt)
# Debian's engine package and the packages of other engines it conflicts with (installing it
# would remove them): requirements/debian-engine.txt, first word the package, the rest those.
ENGINE_PACKAGE := $(word 1,$(shell sed 's/\#.*//' requirements/debian-engine.txt))
OTHER_ENGINES := $(wordlist 2,99,$(shell sed 's/\#.*//' requirements/debian-engine.txt))
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# $(call pin,NAME): NAME's `NAME==VERSION` line in requirements/vllm.txt.
pin = $(shell grep -E '^$(1)==' requirements/vllm.txt)

export IMAGE_OWNER

.PHONY: owner host install test-install oracle deps lock record image compose geometry docs lint test test-setup bytecode cosign bench pristine port clean

include tools/pristine.mk

# The project itself, editable: the direct dependencies' pins are in pyproject.toml, everything
# they pull in is pinned by the two constraints files. `install` (what image, compose, geometry,
# lock and record run) installs what the project runs with; `test-install` installs it with the test
# extra (pytest, hypothesis, ruff, ...) for test, lint and bench, in one pip run, and so also
# satisfies `install`.
CONSTRAINTS := requirements/constraints.txt requirements/oracle.txt
# pip compiles each installed file on one core; the venv's packages are compiled after each install
# step instead, on every core (compileall skips the files already compiled). As with pip, a file that
# does not compile on this Python (torch ships a few for newer ones) is left to fail where imported.
PIP_INSTALL := $(PY) -m pip install -q --no-compile
COMPILE = $(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
# $(call project,EXTRA): the venv (made with $(PYTHON) where missing) and the project in it, editable.
define project
@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null || \
  { echo "make: $(PYTHON) is missing or older than Python 3.10: install Python >= 3.10 or pass PYTHON=..." >&2; exit 2; }
@test -x $(PY) || $(PYTHON) -m venv $(VENV) >/dev/null || \
  { echo "make: $(PYTHON) -m venv failed: install the venv module (Debian, Ubuntu: the python3-venv package)" >&2; exit 2; }
$(PIP_INSTALL) --upgrade pip
$(PIP_INSTALL) $(addprefix -c ,$(CONSTRAINTS)) -e '.$(1)'
$(COMPILE)
endef

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(call project,)
	touch $@

$(VENV)/.test-installed: pyproject.toml $(CONSTRAINTS)
	$(call project,[test])
	touch $(VENV)/.installed $@

# vLLM's own code on the CPU: the oracle for geometry, patches and serve flags.
$(VENV)/.oracle: $(VENV)/.test-installed requirements/vllm.txt requirements/oracle.txt
	$(PIP_INSTALL) $(call pin,torch)
	$(PIP_INSTALL) --no-deps $(call pin,vllm) -r requirements/oracle.txt
	$(COMPILE)
	touch $@

install: $(VENV)/.installed
test-install: $(VENV)/.test-installed
oracle: $(VENV)/.oracle

# The test machine's Debian packages (make test, .ci/run): the test registry, arm64 emulation, the
# synthetic bases' rootfs, the venv. Debian's Docker engine only when no engine answers and no other
# engine package is installed: installing docker.io removes Docker CE (it conflicts with it).
deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if ! docker info >/dev/null 2>&1 && ! dpkg -s $(ENGINE_PACKAGE) >/dev/null 2>&1; then \
	  other=$$(for p in $(OTHER_ENGINES); do dpkg -s $$p >/dev/null 2>&1 && echo $$p; done); \
	  if [ -n "$$other" ]; then echo "engine: $$(echo $$other) installed, not answering: left alone (tests/infra/services.sh starts its dockerd)"; \
	  else missing="$$missing $(ENGINE_PACKAGE)"; fi; \
	fi; \
	missing=$$(echo $$missing); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

lock: install
	$(PY) build.py lock --recipe $(RECIPE)

# Copy the oracle record of the recipe's image in the engine next to the recipe (commit it like
# the lock). `make image` keeps it already (build --keep-record) whenever the gate imported vLLM.
# A multi-platform recipe keeps one per platform: RECORD_ARGS='--platform linux/arm64'.
RECORD_ARGS ?=
record: install
	$(PY) build.py record --recipe $(RECIPE) $(RECORD_ARGS)

# A push goes to ghcr.io/$(IMAGE_OWNER)/...: refuse before anything is installed or built.
owner:
	@if [ "$(PUSH)" = 1 ] && [ -z "$(IMAGE_OWNER)" ] && grep -q '{owner}' $(RECIPE); then \
	  echo "make image: no image owner to push to: set IMAGE_OWNER=your-namespace (or PUSH=0 to build without pushing)" >&2; exit 2; fi
	@if [ -n "$(IMAGE_OWNER)" ]; then echo "image owner: $(IMAGE_OWNER) (IMAGE_OWNER)"; fi

# What the main job needs of the host besides Python (checked by the venv rule) and an engine (checked
# by build.py, which says how to get one): git, for the source revision in the tags and labels.
host:
	@command -v git >/dev/null || { echo "make image: git not found: install git" >&2; exit 2; }

# The main job installs nothing on the host: the engine is the user's.
image: owner host install
	@lockfile=$$(dirname $(RECIPE))/recipe.lock.json; \
	if [ ! -f $$lockfile ] && ! grep -q '^ *digest:' $(RECIPE); then $(PY) build.py lock --recipe $(RECIPE); fi
	$(PY) build.py build --recipe $(RECIPE) $(if $(filter 1,$(PUSH)),--push,--no-push) \
	  --keep-record --report out/build-report.json $(BUILD_ARGS)

compose: install
	$(PY) build.py compose --recipe $(RECIPE)

geometry: install
	$(PY) build.py geometry --recipe $(RECIPE)

# The generated documents: docs/cli.md from the CLI's help texts, the tables of README.md and docs/
# from the simulator, the gate, the import contracts and geometry's public API (tests/docs/test_cli_reference.py,
# tests/docs/test_doc_sections.py).
docs: install
	$(PY) tools/cli_reference.py
	$(PY) tools/doc_sections.py

# The formatter and the linter on the whole tree (also a test: tests/test_lint.py).
lint: test-install
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports

# run-tests.sh starts the services and the synthetic bases' background builds (with $(PYTHON):
# they need only its standard library and pip), then runs test-setup while they build, then pytest.
test: deps
	PYTHON_VENV=$(abspath $(PY)) INFRA_PYTHON="$$(command -v $(PYTHON))" \
	  INFRA_SETUP='$(MAKE) -j4 --output-sync=target --no-print-directory test-setup' tests/infra/run-tests.sh $(PYTEST_ARGS)

test-setup: test-install oracle pristine-all vllm-tests cosign bytecode

# Where PYTHONDONTWRITEBYTECODE is set (CI's machines set it), each process the tests start would
# compile the project's modules it imports (0.12 CPU-s a `build.py` run): compiled once here instead.
bytecode: $(VENV)/.test-installed
	$(PY) -m compileall -qq -j 0 build.py geometry stackbuild overlay tools tests

# Debian's cosign for the signing tests, unpacked into .cache/infra (tests/infra/cosign.py pins it).
cosign:
	$(PYTHON) tests/infra/cosign.py

# tools/port_release.py: the maintainer's; the planning runs the release's own code on the oracle's torch.
PORT_ARGS ?=
port: oracle
	@test -n "$(TO)" || { echo "make port: TO=VERSION (or TO=latest, TO=nightly) is required" >&2; exit 2; }
	$(PY) -m tools.port_release --to $(TO) $(PORT_ARGS)

bench: deps test-install oracle pristine
	PYTHON_VENV=$(abspath $(PY)) tests/infra/run-bench.sh

clean:
	rm -rf $(VENV) out .cache
