#!/usr/bin/env bash
# `make demo`: the whole flow on a simulated host, no GPU needed.
# discover -> readiness -> define 2 VMs -> plan -> provision mi300x-4vf (VFs attached to the VMs) -> status
# -> plan again (in sync)
# -> the refusal on standard firmware (TotalVFs=1) -> validate simulated guests -> reports
# -> a fleet roll-out over 3 simulated hosts: canary, waves gated on their guests, a wave that fails, resume
# -> the same commands on a simulated ESXi 8 host (the vSphere API): discover, plan, provision, status, release.
set -euo pipefail
venv=${1:-.venv}
vgpu="$venv/bin/vgpu"
demo_dir=${VGPU_DEMO_DIR:-.sim/demo}
export VGPU_SIM_DIR="$demo_dir/host"
# A demo host built by a vgpu from before simulator directories carried their .vgpu-sim marker is refused
# like any directory vgpu did not mark; the demo's own default directory is replaced instead.
if [ -z "${VGPU_DEMO_DIR:-}" ] && [ -f "$VGPU_SIM_DIR/state.json" ] && [ ! -e "$VGPU_SIM_DIR/.vgpu-sim" ]; then
  echo "demo: replacing $VGPU_SIM_DIR, built by an older vgpu (no .vgpu-sim marker)"
  rm -rf -- "$VGPU_SIM_DIR"
fi
reports="${VGPU_DEMO_REPORTS:-reports/demo}"

step() { printf '\n\033[1;36m==> %s\033[0m\n$ %s\n' "$1" "${*:2}"; }
expect() {  # expect CODE CMD...: run CMD, fail the demo unless it exits with CODE
  local want=$1; shift
  set +e; "$@"; local got=$?; set -e
  if [ "$got" != "$want" ]; then echo "demo: '$*' exited $got, expected $want" >&2; exit 1; fi
}

step "Build a simulated host: 8 x MI300X on 2 NUMA nodes, plus NICs, NVMe, bridges, a BMC VGA" \
     vgpu sim reset --machine 8xmi300x
"$vgpu" sim reset --machine 8xmi300x

step "Discover the GPUs (drivers, NUMA, IOMMU groups, BARs, partitions)" vgpu discover --simulate
"$vgpu" discover --simulate

step "Check host readiness" vgpu host check --simulate
expect 0 "$vgpu" host check --simulate

step "The shipped profiles" vgpu profiles list
"$vgpu" profiles list

step "Define two VMs in the host's (simulated) libvirt, shut off: provision cold-plugs their VFs" \
     vgpu sim vm gpu-vm-00 gpu-vm-01
"$vgpu" sim vm gpu-vm-00 gpu-vm-01

step "Plan mi300x-4vf: what changes, what it disrupts (exit 3: changes pending)" \
     vgpu plan --profile mi300x-4vf --simulate
expect 3 "$vgpu" plan --profile mi300x-4vf --simulate

step "Provision it: gim config + reload, VFs to vfio-pci, attach to the VMs, boot persistence, verified by read-back" \
     vgpu provision --profile mi300x-4vf --simulate --yes
"$vgpu" provision --profile mi300x-4vf --simulate --yes

step "Status: the host against its recorded profile, item by item" vgpu status --simulate
expect 0 "$vgpu" status --simulate

step "Plan again: in sync, zero steps (exit 0)" vgpu plan --profile mi300x-4vf --simulate
expect 0 "$vgpu" plan --profile mi300x-4vf --simulate

step "Standard firmware (TotalVFs=1): the same profile is refused before anything is touched (exit 4)" \
     vgpu plan --profile mi300x-4vf --simulate 8xmi300x-fw1 --sim-dir "$demo_dir/fw1"
expect 4 "$vgpu" plan --profile mi300x-4vf --simulate 8xmi300x-fw1 --sim-dir "$demo_dir/fw1"

step "Validate simulated guests (driver, ROCm 7.0, partition, HIP, FP8) and write reports" \
     vgpu validate --simulate --report-dir "$reports"
set +e; "$vgpu" validate --simulate --report-dir "$reports"; rc=$?; set -e
[ "$rc" -le 1 ] || { echo "demo: validate exited $rc" >&2; exit 1; }

# --- a fleet roll-out: canary, then waves, each gated on validating its guests against a baseline -------------
fleet_dir="$demo_dir/fleet"
step "A simulated fleet: 3 KVM hosts (8 x MI300X each), one guest each behind a real sshd (strict host keys)" \
     vgpu sim fleet create --dir "$fleet_dir" --hosts 3
"$vgpu" sim fleet create --dir "$fleet_dir" --hosts 3
trap '"$vgpu" sim fleet stop --dir "$fleet_dir" >/dev/null 2>&1 || true' EXIT
inv="$fleet_dir/inventory.yml"

step "The baseline: validate the guests before the change (in a real migration: on ROCm 6.4)" \
     vgpu validate --inventory "$inv" --limit gpu_guests --profile mi300x-1vf --report-dir "$fleet_dir/baseline"
# (host keys checked against the inventory's validate_known_hosts, as the validate role does)
expect 0 "$vgpu" validate --inventory "$inv" --limit gpu_guests --profile mi300x-1vf \
  --report-dir "$fleet_dir/baseline" --quiet

rollout=(-i "$inv" --profile mi300x-1vf --state-dir "$fleet_dir/rollout" --serial 1 --max-unavailable 1
         --baseline "$fleet_dir/baseline")
step "The roll-out's plan: the canary, then waves of one host; nothing is changed (--dry-run)" \
     vgpu rollout run -i "$inv" --profile mi300x-1vf ... --dry-run
expect 0 "$vgpu" rollout run "${rollout[@]}" --dry-run

step "Make wave 3's guest slow (FP8 and HBM far below the baseline), then roll out: it stops at wave 3 (exit 1)" \
     vgpu rollout run -i "$inv" --profile mi300x-1vf --state-dir ... --baseline ...
"$vgpu" sim fleet guest --dir "$fleet_dir" vm-3 slow
expect 1 "$vgpu" rollout run "${rollout[@]}"

step "Fix the guest and resume: wave 3 runs again and the roll-out is done" \
     vgpu rollout resume --state-dir "$fleet_dir/rollout"
"$vgpu" sim fleet guest --dir "$fleet_dir" vm-3 healthy
expect 0 "$vgpu" rollout resume --state-dir "$fleet_dir/rollout"
"$vgpu" sim fleet stop --dir "$fleet_dir" >/dev/null

# --- the same commands on a VMware ESXi 8 host, through the vSphere API -------------------------------------
esxi_dir="$demo_dir/esxi"
rm -rf -- "$esxi_dir"
export VGPU_STATE_DIR="$esxi_dir/state"  # the controller-side lock, journal and record of the demo's ESXi host
step "Start a simulated ESXi 8 host (govmomi's vSphere API simulator, 8 x MI300X) with two powered-off VMs" \
     vgpu sim esxi --dir "$esxi_dir" --vm gpu-vm-00 --vm gpu-vm-01
"$vgpu" sim esxi --dir "$esxi_dir" --vm gpu-vm-00 --vm gpu-vm-01 &
esxi_pid=$!
trap 'kill "$esxi_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do [ -s "$esxi_dir/esxi.env" ] && break; sleep 0.1; done
[ -s "$esxi_dir/esxi.env" ] || { echo "demo: the simulated ESXi host did not start" >&2; exit 1; }
url=$(sed -n 's/^VGPU_ESXI_URL=//p' "$esxi_dir/esxi.env")
user=$(sed -n 's/^VGPU_ESXI_USER=//p' "$esxi_dir/esxi.env")
esxi=(--esxi "$url" --esxi-user "$user" --esxi-ca "$esxi_dir/ca.pem" --esxi-password-file "$esxi_dir/password")

step "Discover its GPUs through the vSphere API (TLS verified against its CA)" vgpu discover --esxi "$url" ...
"$vgpu" discover "${esxi[@]}"

step "Plan mi300x-esxi-passthrough: passthrough on, each VM gets a whole GPU, EFI, memory reserved, MMIO sized" \
     vgpu plan --profile mi300x-esxi-passthrough --esxi "$url" ...
expect 3 "$vgpu" plan --profile mi300x-esxi-passthrough "${esxi[@]}"

step "Provision it, verified by read-back" vgpu provision --profile mi300x-esxi-passthrough --esxi "$url" ... --yes
"$vgpu" provision --profile mi300x-esxi-passthrough "${esxi[@]}" --yes

step "Status and plan again: in sync" vgpu status --esxi "$url" ...
expect 0 "$vgpu" status "${esxi[@]}"
expect 0 "$vgpu" plan --profile mi300x-esxi-passthrough "${esxi[@]}"

step "Release: the VMs get back exactly their previous configuration, passthrough off" vgpu release --esxi "$url" ... --yes
"$vgpu" release "${esxi[@]}" --yes
kill "$esxi_pid" 2>/dev/null || true
wait "$esxi_pid" 2>/dev/null || true

printf '\n\033[1;32mDemo complete.\033[0m Reports: %s/validation-report.html (open in a browser), validation-report.json, validation-report.junit.xml\n' "$reports"
