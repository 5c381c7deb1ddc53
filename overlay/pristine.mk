# Pristine vLLM tree for the overlay (patch refresh and tests).
# Included by the main Makefile; usable alone: make -f overlay/pristine.mk pristine
#
#   make pristine            fetch vllm==$(OVERLAY_VLLM_VERSION) from PyPI (no deps) into
#                            .cache/ and unpack vllm/ and its .dist-info into
#                            .cache/vllm-$(OVERLAY_VLLM_VERSION)/
#   make overlay-refresh     recompute overlay/series/.../lock.json from that tree
#   make overlay-lock-check  fail if lock.json is stale
#   make overlay-test        run the overlay tests against that tree
#   make vllm-tests          fetch the vllm==$(OVERLAY_VLLM_VERSION) sdist from PyPI (it ships
#                            vLLM's own tests) and unpack its tests/ and pyproject.toml into
#                            .cache/vllm-$(OVERLAY_VLLM_VERSION)-sdist/
#
# Tests read VLLM_PRISTINE_DIR when it is set, else this location; VLLM_TESTS_DIR likewise
# for the sdist's tests.

OVERLAY_VLLM_VERSION ?= $(shell sed -n 's/^vllm==//p' requirements/vllm.txt)
OVERLAY_PYTHON ?= python3
OVERLAY_PIP ?= $(OVERLAY_PYTHON) -m pip
OVERLAY_CACHE ?= .cache
OVERLAY_WHEEL_DIR := $(OVERLAY_CACHE)/wheels
OVERLAY_PRISTINE := $(OVERLAY_CACHE)/vllm-$(OVERLAY_VLLM_VERSION)
OVERLAY_STAMP := $(OVERLAY_PRISTINE)/.unpacked
OVERLAY_SDIST_DIR := $(OVERLAY_CACHE)/sdists
OVERLAY_SDIST := $(OVERLAY_SDIST_DIR)/vllm-$(OVERLAY_VLLM_VERSION).tar.gz
# `pip download --no-binary :all:` would build the sdist's metadata (vLLM's setup.py needs its
# build requirements, CUDA torch among them), so the file is fetched by its PyPI address and
# checked against the sha256 PyPI publishes for it.
OVERLAY_SDIST_URL := https://files.pythonhosted.org/packages/f7/25/aa5684e9c59d6fc75f78926b7f15e8d9adc7de2d9e6e7575b80776ad8169/vllm-0.33.0.tar.gz
OVERLAY_SDIST_SHA256 := f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112
OVERLAY_TESTS := $(OVERLAY_CACHE)/vllm-$(OVERLAY_VLLM_VERSION)-sdist
OVERLAY_TESTS_STAMP := $(OVERLAY_TESTS)/.unpacked

.PHONY: pristine overlay-refresh overlay-lock-check overlay-test vllm-tests

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
	$(OVERLAY_PYTHON) -m overlay.refresh --pristine $(OVERLAY_PRISTINE)

overlay-lock-check: $(OVERLAY_STAMP)
	$(OVERLAY_PYTHON) -m overlay.refresh --pristine $(OVERLAY_PRISTINE) --check

overlay-test: $(OVERLAY_STAMP)
	VLLM_PRISTINE_DIR=$(abspath $(OVERLAY_PRISTINE)) $(OVERLAY_PYTHON) -m pytest -q tests/overlay

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
