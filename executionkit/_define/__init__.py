"""A workflow's shape, pure: steps and their kinds, the graph, conditions, questions, options.

No asyncio here: what is ready, what a condition decides and whether an answer
fits are questions with answers, tested with tables (see docs/code-layout.md).
"""
