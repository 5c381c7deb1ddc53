# Sourced by run-tests.sh and run-bench.sh: strict mode, the repository as working
# directory, the venv's Python, the services' state and cache directories, and sudo
# only when not root.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
PY="${PYTHON_VENV:-$repo/.venv/bin/python}"
[[ -x "$PY" ]] || PY="$(command -v python3)"
# The state directory services.sh uses ($INFRA_STATE_DIR, else its default).
export INFRA_STATE_DIR="${INFRA_STATE_DIR:-$(bash "$here/services.sh" env | sed -n 's/^INFRA_STATE_DIR=//p')}"
export INFRA_CACHE_DIR="${INFRA_CACHE_DIR:-$repo/.cache/infra}"
SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo -E"
