"""Connections to ClickHouse: an embedded chdb data directory or a server.

Both answer :meth:`Engine.query` with column names and rows, binding parameters on the
engine's side (``{name:Type}`` in the SQL), so no value is ever formatted into a query.

* ``chdb://PATH``: an embedded ClickHouse whose data lives in the folder PATH (created when
  missing); what the tests use and what a user can try without a server.
* ``clickhouse://HOST:PORT/DATABASE``: a server, through clickhouse-connect (its HTTP
  interface, port 8123 by default; ``clickhouses://`` for HTTPS). The user and password come
  from the environment only (:data:`USER_ENV`, :data:`PASSWORD_ENV`, or ClickHouse's own
  ``CLICKHOUSE_USER`` / ``CLICKHOUSE_PASSWORD``), never from the command line, where other
  users of the machine could read them.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import unquote, urlsplit

from auditor.errors import AuditError
from collector import environment_variables as ev

if TYPE_CHECKING:
    import pyarrow

__all__ = [
    "DEFAULT_DATABASE",
    "DEFAULT_TABLE",
    "PASSWORD_ENV",
    "SCHEMES",
    "USER_ENV",
    "ChdbEngine",
    "Engine",
    "Location",
    "ServerEngine",
    "connect",
    "is_clickhouse_url",
    "parse_url",
]

SCHEMES: Final = ("chdb", "clickhouse", "clickhouses")
"""URL schemes naming a ClickHouse source."""
DEFAULT_DATABASE: Final = "otel"
"""The exporter's default database."""
DEFAULT_TABLE: Final = "otel_traces"
"""The exporter's default traces table."""
USER_ENV: Final = (ev.HANDOFFSCOPE_CLICKHOUSE_USER, "CLICKHOUSE_USER")
"""Environment variables naming the server user, first set wins (default ``default``)."""
PASSWORD_ENV: Final = (ev.HANDOFFSCOPE_CLICKHOUSE_PASSWORD, "CLICKHOUSE_PASSWORD")
"""Environment variables holding the server password, first set wins (default empty)."""
_AUTHENTICATION_FAILED: Final = 516
"""ClickHouse's error code for a refused user or password."""


class Engine(Protocol):
    """What the audit needs from ClickHouse."""

    def query(
        self, sql: str, params: dict[str, Any] | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run one SELECT; its column names and rows."""
        ...

    def command(self, sql: str, params: dict[str, Any] | None = None) -> None:
        """Run one statement that returns nothing."""
        ...

    def insert_arrow(self, table: str, data: pyarrow.Table) -> None:
        """Insert ``data`` (columns named like ``table``'s) into ``table``."""
        ...


@dataclass(frozen=True, slots=True)
class Location:
    """Where a ClickHouse source is: the URL's parts, without any credential."""

    scheme: str
    path: str = ""
    """chdb: the data directory."""
    host: str = "localhost"
    port: int | None = None
    database: str = DEFAULT_DATABASE


def is_clickhouse_url(text: str) -> bool:
    """Whether ``text`` names a ClickHouse source rather than a trace file."""
    return any(text.startswith(f"{scheme}://") for scheme in SCHEMES)


def parse_url(url: str) -> Location:
    """Read ``chdb://PATH`` or ``clickhouse://HOST[:PORT][/DATABASE]``; refuse credentials."""
    scheme, _, rest = url.partition("://")
    if scheme == "chdb":
        if not rest:
            raise AuditError(f"{url}: name the data directory, as in chdb://./traces-db")
        return Location(scheme="chdb", path=unquote(rest))
    if scheme not in SCHEMES:
        raise AuditError(f"{url}: a ClickHouse source starts with chdb:// or clickhouse://")
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise AuditError(
            f"{scheme}://...: credentials do not belong in the URL (other users can read a "
            f"command line); set {USER_ENV[0]} and {PASSWORD_ENV[0]} instead"
        )
    try:
        port = parts.port
    except ValueError as e:
        raise AuditError(f"{url}: the port is not a number") from e
    database = parts.path.strip("/") or DEFAULT_DATABASE
    return Location(scheme=scheme, host=parts.hostname or "localhost", port=port, database=database)


class ChdbEngine:
    """An embedded ClickHouse over a data directory (one chdb session per process)."""

    def __init__(self, path: str) -> None:
        from chdb import session  # optional: the [clickhouse] extra

        self.path = path
        self._session = session.Session(path)

    def query(
        self, sql: str, params: dict[str, Any] | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        import pyarrow as pa  # optional: the [clickhouse] extra

        result = self._session.query(sql, "ArrowStream", params=params or {})
        table = pa.ipc.open_stream(result.bytes()).read_all()
        # Column by column: half the time of a dict per row, over a hundred thousand findings.
        return list(table.column_names), list(
            zip(*(c.to_pylist() for c in table.columns), strict=True)
        )

    def query_arrow(self, sql: str, params: dict[str, Any] | None = None) -> pyarrow.Table:
        """Run one SELECT; its result as an Arrow table (column types kept)."""
        import pyarrow as pa  # optional: the [clickhouse] extra

        result = self._session.query(sql, "ArrowStream", params=params or {})
        return pa.ipc.open_stream(result.bytes()).read_all()

    def command(self, sql: str, params: dict[str, Any] | None = None) -> None:
        self._session.query(sql, params=params or {})

    def insert_arrow(self, table: str, data: pyarrow.Table) -> None:
        import pyarrow.parquet as pq  # optional: the [clickhouse] extra

        # chdb reads a file on the local disk; the Parquet copy goes once it is inserted.
        with tempfile.TemporaryDirectory(prefix="handoffscope-") as folder:
            path = os.path.join(folder, "spans.parquet")
            pq.write_table(data, path)
            columns = ", ".join(f"`{name}`" for name in data.column_names)
            self._session.query(
                f"INSERT INTO {table} ({columns}) SELECT {columns}"
                f" FROM file({_literal(path)}, Parquet)"
            )

    def close(self) -> None:
        """Release the session (its data stays in the directory)."""
        self._session.close()


class ServerEngine:
    """A ClickHouse server, through clickhouse-connect."""

    def __init__(self, location: Location) -> None:
        import clickhouse_connect  # optional: the [clickhouse] extra

        secure = location.scheme == "clickhouses"
        self._client = clickhouse_connect.get_client(
            host=location.host,
            port=location.port or (8443 if secure else 8123),
            username=_env(USER_ENV) or "default",
            password=_env(PASSWORD_ENV) or "",
            database=location.database,
            secure=secure,
        )

    def query(
        self, sql: str, params: dict[str, Any] | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        result = self._client.query(sql, parameters=params or None)
        return list(result.column_names), [tuple(r) for r in result.result_rows]

    def query_arrow(self, sql: str, params: dict[str, Any] | None = None) -> pyarrow.Table:
        """Run one SELECT; its result as an Arrow table (column types kept)."""
        return self._client.query_arrow(sql, parameters=params or None)

    def command(self, sql: str, params: dict[str, Any] | None = None) -> None:
        self._client.command(sql, parameters=params or None)

    def insert_arrow(self, table: str, data: pyarrow.Table) -> None:
        self._client.insert_arrow(table, data)

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()


def connect(location: Location) -> ChdbEngine | ServerEngine:
    """An engine for ``location``; a missing extra or an unreachable server is an AuditError."""
    try:
        if location.scheme == "chdb":
            return ChdbEngine(location.path)
        return ServerEngine(location)
    except ModuleNotFoundError as e:
        raise AuditError(
            f"auditing ClickHouse needs {e.name}: pip install 'handoffscope[clickhouse]'",
            title="missing extra",
        ) from e
    except Exception as e:
        where = location.path if location.scheme == "chdb" else f"{location.host}:{location.port}"
        if getattr(e, "code", None) == _AUTHENTICATION_FAILED:
            raise AuditError(
                f"ClickHouse at {where} refused user {_env(USER_ENV) or 'default'!r}: wrong"
                f" password or no such user; set {USER_ENV[0]} and {PASSWORD_ENV[0]}",
                title="no connection",
            ) from e
        text = " ".join(str(e).split())[:500]
        raise AuditError(f"cannot open ClickHouse at {where}: {text}", title="no connection") from e


def _env(names: tuple[str, ...]) -> str | None:
    for name in names:
        # Ours through the registry; ClickHouse's own (CLICKHOUSE_USER ...) as they are.
        value = ev.read(name) if name in ev.ALL else os.environ.get(name)
        if value:
            return value
    return None


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
