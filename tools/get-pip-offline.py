"""Stand-in for the pip bootstrap script ansible-test downloads (get-pip-<version>.py from
ci-files.testing.ansible.com, which the build machines cannot reach): pip from the standard library's
ensurepip, then the pip version ansible-test asked for from the package index, as the real script does.
tools/ansible-sanity.sh puts it where ansible-test looks for its cached copy.
    python get-pip-offline.py [PIP OPTIONS] pip==X.Y [--no-setuptools] [--no-wheel]
"""
import ensurepip
import os
import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}  # the real script's own options, not pip's

env = dict(os.environ)
ensurepip.bootstrap()  # sets PIP_CONFIG_FILE=/dev/null in os.environ: the site's pip.conf (index, CA) must apply
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *(a for a in sys.argv[1:] if a not in GET_PIP_ONLY)],
                         env=env))
