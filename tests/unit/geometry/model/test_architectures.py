"""The modelled target architectures are one list (geometry/model/architectures/__init__.py's
``NAMES``): each name is a product module with its ``ARCHITECTURE`` and a twin module in
geometry/oracle/architectures/ with its ``ORACLE``, and no twin is without its product entry."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest
from support.repo import REPO

import geometry.oracle.architectures as oracle_architectures
from geometry.model.architecture import Architecture
from geometry.model.architectures import ARCHITECTURES, BY_KIND, NAMES
from geometry.oracle.architecture import OracleArchitecture
from geometry.oracle.architectures import oracle_architecture


def test_every_product_entry_is_named_by_its_module():
    assert tuple(a.kind for a in ARCHITECTURES) == NAMES
    assert all(isinstance(a, Architecture) for a in ARCHITECTURES)


@pytest.mark.parametrize("kind", NAMES)
def test_every_product_entry_has_a_twin(kind):
    assert isinstance(oracle_architecture(kind), OracleArchitecture)


def test_every_twin_has_a_product_entry():
    twins = {m.name for m in pkgutil.iter_modules(oracle_architectures.__path__)}
    assert twins == set(BY_KIND)


def test_an_unmodelled_kind_has_no_twin():
    with pytest.raises(KeyError):
        oracle_architecture("architecture")


def test_the_twins_import_no_vllm_and_no_torch():
    """The oracle's registry and every twin import without vLLM or torch (their functions import them)."""
    code = (
        "import json, sys\n"
        "from geometry.model.architectures import NAMES\n"
        "from geometry.oracle.architectures import oracle_architecture\n"
        "for kind in NAMES: oracle_architecture(kind)\n"
        "print(json.dumps(sorted(m for m in ('vllm', 'torch') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_every_product_module_is_registered_under_its_own_name():
    import geometry.model.architectures as product_architectures

    modules = {m.name for m in pkgutil.iter_modules(product_architectures.__path__)}
    assert modules == set(NAMES)
    for name in modules:
        module = __import__(f"geometry.model.architectures.{name}", fromlist=["ARCHITECTURE"])
        assert module.ARCHITECTURE.kind == name
        assert BY_KIND[name] is module.ARCHITECTURE
