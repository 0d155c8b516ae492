"""Running a workflow: the one layer where asyncio lives.

The run loop, attempts, policies, maps, sub-workflows, the checkpointer, the
running step's host, claims and signals (see docs/code-layout.md).
"""
