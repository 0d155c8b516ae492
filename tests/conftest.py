"""Fixtures shared by every test module: one PostgreSQL server, one browser, for the session.

Defined here, not imported into each module, so that pytest starts each once: a
session fixture imported into several modules is a separate fixture in each. The
browser tests run last (`pytest_collection_modifyitems`).

The browser is Debian's ``chromium`` (``bash .ci/ensure-chromium`` installs it);
playwright's own download is not used. A missing browser fails the browser
tests: it never skips them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_fixture import pg_server, pg_uri

__all__ = ["base_url", "browser_type_launch_args", "pg_server", "pg_uri"]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the browser tests last, after pytest has grouped tests by session parameters.

    Playwright's sync API keeps an event loop marked running in the main thread
    from the first browser test to the end of the session; an ``async def`` test
    after it would fail to start its own loop. With pytest-xdist, ``--dist load``
    (as the check command runs) hands tests out in this order, so each worker
    runs its browser tests last too; ``--dist loadfile`` would not (it sends the
    largest files first).
    """
    browser = [item for item in items if "playwright" in getattr(item, "fixturenames", ())]
    moved = {id(item) for item in browser}
    items[:] = [item for item in items if id(item) not in moved] + browser


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """Launch the system's chromium, once for every browser test of the session."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install it with `bash .ci/ensure-chromium`")
    return {
        **browser_type_launch_args,
        "executable_path": str(CHROMIUM),
        "headless": True,
        "args": list(CHROMIUM_ARGS),
    }


@pytest.fixture(scope="session")
def base_url() -> str | None:
    """No base URL: each browser test serves its own address (and pytest-base-url's own
    fixture, an instance method, warns under pytest 9)."""
    return None
