"""The guest agent. Standard library only, Python >= 3.8: it is shipped to guests as one zipapp.

vgpu.guest.bundle.build_agent() packs this package (parsers and the HIP source included) into
``vgpu-agent.pyz``; ``python3 vgpu-agent.pyz --expect EXPECT.json`` runs main.main(). Nothing in
here may import outside the standard library or outside this package.
"""

# Kept equal to vgpu.__version__ (tests/unit/test_agent_bundle.py checks it); the agent cannot
# import vgpu/__init__.py's siblings on a guest.
__version__ = "0.1.0"
