#!/usr/bin/env bash
# ansible-test sanity on the vgpu.instinct collection, with ansible-test's own per-test virtualenvs. The one thing
# those need from outside PyPI, pip's bootstrap script, is replaced by tools/get-pip-offline.py (ensurepip); its
# cache and the virtualenvs live under .cache/ansible-test (HOME for ansible-test), reused by the next run.
#   tools/ansible-sanity.sh [PYTHON_BIN_DIR] [ansible-test sanity options...]   (default .venv/bin)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
bin=$(cd "${1:-.venv/bin}" && pwd); shift || true
home=$repo/.cache/ansible-test
mkdir -p "$home/.ansible/test/cache"
pip_version=$("$bin/python" - <<'PY'
from ansible_test._internal.python_requirements import get_venv_packages
from ansible_test._internal.host_configs import NativePythonConfig
print(get_venv_packages(NativePythonConfig(version="3.11"))["pip"])
PY
)
cp tools/get-pip-offline.py "$home/.ansible/test/cache/get_pip_${pip_version//./_}.py"
cd collections/ansible_collections/vgpu/instinct
HOME=$home "$bin/ansible-test" sanity --python "$("$bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
    --color no "$@"
