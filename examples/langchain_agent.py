"""Launch the packaged example: `python -m saga_runtime.examples langchain_agent`."""

import runpy

runpy.run_module("saga_runtime.examples.langchain_agent", run_name="__main__", alter_sys=True)
