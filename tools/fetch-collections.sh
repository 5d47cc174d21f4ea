#!/usr/bin/env bash
# Unpack the Ansible collections the vgpu.instinct roles and their tests use into .cache/collections
# (ansible.cfg's collections_path). Galaxy is not reachable from every build machine, so they come from
# the `ansible` wheel on PyPI, which bundles them. Idempotent and offline-safe: does nothing when they
# are already there.
#   tools/fetch-collections.sh [PYTHON]     (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
ANSIBLE_VERSION=12.3.0
DEST=.cache/collections
WANT=(community/general ansible/posix awx/awx)  # awx.awx: tests check awx/controller.yml against its modules

missing=()
for c in "${WANT[@]}"; do
    [ -f "$DEST/ansible_collections/$c/MANIFEST.json" ] || missing+=("$c")
done
[ ${#missing[@]} -eq 0 ] && exit 0

wheel_dir=.cache/wheels
wheel="$wheel_dir/ansible-$ANSIBLE_VERSION-py3-none-any.whl"
if [ ! -f "$wheel" ]; then
    mkdir -p "$wheel_dir"
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$wheel_dir" "ansible==$ANSIBLE_VERSION"
fi
mkdir -p "$DEST"
tmp=$(mktemp -d "$DEST/.unpack.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$PY" - "$wheel" "$tmp" "${missing[@]}" <<'PYEOF'
import sys, zipfile
wheel, dest, *wanted = sys.argv[1:]
prefixes = tuple(f"ansible_collections/{c}/" for c in wanted)
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith(prefixes)])
PYEOF
for c in "${missing[@]}"; do
    rm -rf "${DEST:?}/ansible_collections/$c"
    mkdir -p "$DEST/ansible_collections/$(dirname "$c")"
    mv "$tmp/ansible_collections/$c" "$DEST/ansible_collections/$c"
    echo "fetch-collections: $c from ansible $ANSIBLE_VERSION -> $DEST"
done
