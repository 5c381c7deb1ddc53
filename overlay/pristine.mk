# Pristine vLLM tree for the overlay (patch refresh and tests).
# Included by the main Makefile; usable alone: make -f overlay/pristine.mk pristine
#
#   make pristine            fetch vllm==$(OVERLAY_VLLM_VERSION) from PyPI (no deps) into
#                            .cache/ and unpack vllm/ and its .dist-info into
#                            .cache/vllm-$(OVERLAY_VLLM_VERSION)/
#   make overlay-refresh     recompute overlay/series/.../lock.json from that tree
#   make overlay-lock-check  fail if lock.json is stale
#   make overlay-test        run the overlay tests against that tree
#
# Tests read VLLM_PRISTINE_DIR when it is set, else this location.

OVERLAY_VLLM_VERSION ?= 0.33.0
OVERLAY_PYTHON ?= python3
OVERLAY_PIP ?= $(OVERLAY_PYTHON) -m pip
OVERLAY_CACHE ?= .cache
OVERLAY_WHEEL_DIR := $(OVERLAY_CACHE)/wheels
OVERLAY_PRISTINE := $(OVERLAY_CACHE)/vllm-$(OVERLAY_VLLM_VERSION)
OVERLAY_STAMP := $(OVERLAY_PRISTINE)/.unpacked

.PHONY: pristine overlay-refresh overlay-lock-check overlay-test

pristine: $(OVERLAY_STAMP)

$(OVERLAY_STAMP):
	mkdir -p $(OVERLAY_WHEEL_DIR)
	$(OVERLAY_PIP) download --no-deps --only-binary=:all: --dest $(OVERLAY_WHEEL_DIR) \
		vllm==$(OVERLAY_VLLM_VERSION)
	rm -rf $(OVERLAY_PRISTINE).tmp
	mkdir -p $(OVERLAY_PRISTINE).tmp
	$(OVERLAY_PYTHON) -c 'import glob, sys, zipfile; \
	whl = sorted(glob.glob("$(OVERLAY_WHEEL_DIR)/vllm-$(OVERLAY_VLLM_VERSION)-*.whl")); \
	assert len(whl) == 1, whl; z = zipfile.ZipFile(whl[0]); \
	names = [n for n in z.namelist() if n.startswith(("vllm/", "vllm-$(OVERLAY_VLLM_VERSION).dist-info/"))]; \
	z.extractall("$(OVERLAY_PRISTINE).tmp", names); print(whl[0], len(names), "files")'
	rm -rf $(OVERLAY_PRISTINE)
	mv $(OVERLAY_PRISTINE).tmp $(OVERLAY_PRISTINE)
	touch $@

overlay-refresh: $(OVERLAY_STAMP)
	$(OVERLAY_PYTHON) overlay/refresh.py --pristine $(OVERLAY_PRISTINE)

overlay-lock-check: $(OVERLAY_STAMP)
	$(OVERLAY_PYTHON) overlay/refresh.py --pristine $(OVERLAY_PRISTINE) --check

overlay-test: $(OVERLAY_STAMP)
	VLLM_PRISTINE_DIR=$(abspath $(OVERLAY_PRISTINE)) $(OVERLAY_PYTHON) -m pytest -q tests/test_overlay*.py
