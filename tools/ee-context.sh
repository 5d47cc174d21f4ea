#!/usr/bin/env bash
# Render the AWX execution environment's build context (docs/awx.md) without building an image:
# vgpu's wheel and the vgpu.instinct collection tarball into DIST, then `ansible-builder create` into CONTEXT.
#   tools/ee-context.sh [PYTHON] [DIST] [CONTEXT]   (defaults: .venv/bin/python awx/dist awx/context)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
DIST=$(realpath -m "${2:-awx/dist}")
CONTEXT=$(realpath -m "${3:-awx/context}")
BIN=$(dirname "$PY")
src=$(mktemp -d)
stage=$(mktemp -d)
trap 'rm -rf "$src" "$stage"' EXIT
mkdir -p "$DIST"
# the wheel from a copy of the sources: setuptools leaves build/ and *.egg-info beside them
# (setup.py puts playbooks/, the collection and ansible.cfg into it: `vgpu playbook` works in the image)
cp -r pyproject.toml setup.py MANIFEST.in README.md ansible.cfg vgpu playbooks "$src/"
mkdir -p "$src/collections/ansible_collections/vgpu"
cp -r collections/ansible_collections/vgpu/instinct "$src/collections/ansible_collections/vgpu/"
find "$src" \( -name __pycache__ -o -name output \) -prune -exec rm -rf {} +
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DIST" "$src"
"$BIN/ansible-galaxy" collection build -f --output-path "$DIST" collections/ansible_collections/vgpu/instinct >/dev/null
# ansible-builder copies additional_build_files relative to the definition: render from a staged copy
cp awx/execution-environment.yml awx/requirements.yml awx/requirements.txt awx/bindep.txt awx/constraints.txt "$stage/"
ln -s "$DIST" "$stage/dist"
"$BIN/ansible-builder" create -f "$stage/execution-environment.yml" -c "$CONTEXT" --output-filename Containerfile >/dev/null
echo "ee-context: $CONTEXT (wheel and collection from $DIST)"
