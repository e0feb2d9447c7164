"""Launch the packaged example: `python -m saga_runtime.examples mcp_session`."""

import runpy

runpy.run_module("saga_runtime.examples.mcp_session", run_name="__main__", alter_sys=True)
