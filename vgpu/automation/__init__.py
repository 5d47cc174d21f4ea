"""The Ansible boundary: the only code that runs Ansible's tools.

inventory.py reads Ansible inventories with ansible-inventory (behind vgpu's guards), for `validate
--inventory` and `playbook run`; playbooks.py runs the shipped playbooks through ansible-runner.
"""
