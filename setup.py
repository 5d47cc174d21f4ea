"""Packaging hook (the metadata is in pyproject.toml): the wheel carries the Ansible content `vgpu playbook`
runs - playbooks/, the vgpu.instinct collection and ansible.cfg - as the package data vgpu/ansible_content/, so
`vgpu playbook list` and `run` work from a wheel install (vgpu.automation.playbooks.content_dir). An editable
install reads them from the checkout instead."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CONTENT = ["playbooks", "collections/ansible_collections/vgpu/instinct", "ansible.cfg"]
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.tar.gz", "output")  # output: ansible-test's


class BuildPyWithAnsibleContent(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "vgpu" / "ansible_content"
        for rel in CONTENT:
            src, out = HERE / rel, dest / rel
            if src.is_dir():
                shutil.rmtree(out, ignore_errors=True)
                shutil.copytree(src, out, ignore=SKIP)
            else:
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, out)


setup(cmdclass={"build_py": BuildPyWithAnsibleContent})
