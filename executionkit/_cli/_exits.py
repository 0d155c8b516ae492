"""Exit codes of the command line, and the error that stands for bad input."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SUSPENDED = 3  # waiting for answers to its questions (Step.ask); what completed is saved
EXIT_CLAIMED = 4  # another process owns the run, or saved it since it was loaded: nothing ran
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command killed by it
EXIT_TERMINATED = 143  # 128 + SIGTERM: what run_sync exits with once it has checkpointed


class CliError(Exception):
    """Bad input: reported as one ``executionkit: error:`` line, exit code 2."""
