"""Value types under their ExecutionKit 0.4 import path.

``from executionkit.types import PatternResult, TokenUsage`` keeps working; new
code can import the same classes from ``executionkit``.
"""

from __future__ import annotations

from executionkit._types import PatternResult, TokenUsage

__all__ = ["PatternResult", "TokenUsage"]
