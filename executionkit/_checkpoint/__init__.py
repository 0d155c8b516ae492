"""The checkpoint format, pure data: the frozen checkpoint, its fields, the ledger's entries.

The lowest layer above the leaf helpers: it imports nothing of a workflow's
shape, of a run or of the faces (see docs/code-layout.md).
"""
