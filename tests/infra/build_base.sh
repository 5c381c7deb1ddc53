#!/usr/bin/env bash
# Thin wrapper: tests/infra/build_base.sh --arch amd64|arm64 | --wrong-version | --all [--force]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${INFRA_PYTHON:-python3}" "$here/build_base.py" "$@"
