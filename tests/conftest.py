"""Fixtures shared by every test module: one PostgreSQL server for the whole session.

Defined here, not imported into each module, so that pytest starts the server
once: a session fixture imported into several modules is a separate fixture in
each, and would start a server per module.
"""

from __future__ import annotations

from pg_fixture import pg_server, pg_uri

__all__ = ["pg_server", "pg_uri"]
