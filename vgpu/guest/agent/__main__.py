"""``python -m vgpu.guest.agent --expect EXPECT.json``: the agent run from a source tree."""

import sys

from vgpu.guest.agent.main import main

sys.exit(main())
