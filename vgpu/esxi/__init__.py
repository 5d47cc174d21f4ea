"""VMware ESXi 8: whole GPUs by DirectPath I/O through the vSphere API (pyVmomi). How ESXi does each
thing vgpu does, in one place, beside the Linux/KVM implementation (vgpu/host, vgpu/provision.py):

- connect.py: URL, credentials, TLS (CA, pinned thumbprint, --insecure), login, version and host checks;
- host.py: reading the host (PCI devices, passthrough state, VMs) and the three changes vgpu makes;
- specs.py: the VM reconfigurations, built in one place (golden SOAP files in tests/esxi/golden);
- planner.py: pure planning (inventory, problems, steps, pending reboot);
- steps.py: apply/undo per step type, for the shared executor and journal;
- service.py: plan/provision/status/release/export, the vgpu.platform.Platform for an ESXi host.

docs/esxi.md is the operator's guide.
"""
