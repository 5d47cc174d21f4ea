"""vgpu: provision AMD Instinct MI300-family GPUs for VMs and prove each VM works."""

__version__ = "0.1.0"
