"""Connections to ClickHouse: an embedded chdb data directory or a server.

Both answer :meth:`Engine.query` with column names and rows, binding parameters on the
engine's side (``{name:Type}`` in the SQL), so no value is ever formatted into a query.

* ``chdb://PATH``: an embedded ClickHouse whose data lives in the folder PATH; what the tests
  use and what a user can try without a server. :func:`connect` opens only a folder that
  holds chdb data (an audit never creates one); :class:`ChdbEngine` creates it when missing,
  which is how a folder is filled from trace files.
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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import unquote, urlsplit

from auditor.errors import AuditError, first_line
from collector import environment_variables as ev

if TYPE_CHECKING:
    import pyarrow

__all__ = [
    "DEFAULT_DATABASE",
    "DEFAULT_PORTS",
    "DEFAULT_TABLE",
    "PASSWORD_ENV",
    "SCHEMES",
    "USER_ENV",
    "ChdbEngine",
    "Engine",
    "Location",
    "ServerEngine",
    "check_folder",
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
DEFAULT_PORTS: Final = {"clickhouse": 8123, "clickhouses": 8443}
"""The HTTP(S) port of a server URL that names none, as clickhouse-connect's defaults."""
FILL_HINT: Final = (
    "fill one from trace files as docs/deployment.md shows (ChdbEngine(PATH), create_table,"
    " fill), or audit the trace files themselves: handoffscope audit FILE..."
)
"""How to make a chdb data folder, for messages about a missing one."""
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
    """As the URL gives it; None when it names none (:attr:`server_port` applies)."""
    database: str = DEFAULT_DATABASE

    @property
    def server_port(self) -> int:
        """The port the client connects to: the URL's, or the scheme's HTTP(S) default."""
        return self.port or DEFAULT_PORTS.get(self.scheme, DEFAULT_PORTS["clickhouse"])

    @property
    def where(self) -> str:
        """The source for people, without credentials: ``chdb://PATH``, or
        ``clickhouse://HOST:PORT`` with the port the client uses."""
        if self.scheme == "chdb":
            return f"chdb://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.server_port}"

    @property
    def defaulted(self) -> str:
        """A note on the port when the URL names none, else empty."""
        if self.scheme == "chdb" or self.port is not None:
            return ""
        return f" (no port in the URL: {self.server_port}, the {self.scheme}:// default)"


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
    if parts.query or parts.fragment:
        # Not echoed: a query string may carry a password (?password=...).
        raise AuditError(
            f"{scheme}://...: the URL takes no ?options or #fragment; name the server as"
            f" {scheme}://HOST:PORT/DATABASE, with the user and password in"
            f" {USER_ENV[0]} and {PASSWORD_ENV[0]}"
        )
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
            port=location.server_port,
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


def check_folder(path: str) -> None:
    """Refuse a ``chdb://`` path that is not a chdb data folder, creating nothing: chdb would
    make a missing folder (and write into any folder) only to find no table in it."""
    url = f"chdb://{path}"
    folder = Path(path)
    if folder.is_dir():
        if not (folder / "metadata").is_dir():
            raise AuditError(
                f"{url}: {path} holds no chdb data (no metadata/ folder in it); give the folder"
                f" that holds the traces table, or {FILL_HINT}",
                title="no chdb data",
            )
        return
    if folder.exists():
        raise AuditError(
            f"{url}: {path} is a file, not a chdb data folder; audit a trace file without"
            f" chdb:// (handoffscope audit {path}), or give the folder that holds the traces"
            " table",
            title="no chdb data",
        )
    raise AuditError(
        f"{url}: no folder {path}, and none is created here: {FILL_HINT}",
        title="no chdb data",
    )


def connect(location: Location) -> ChdbEngine | ServerEngine:
    """An engine for ``location``; a missing extra, a path that is not a chdb data folder
    (:func:`check_folder`) or an unreachable server is an AuditError."""
    if location.scheme == "chdb":
        check_folder(location.path)
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
        where = location.where + location.defaulted
        if getattr(e, "code", None) == _AUTHENTICATION_FAILED:
            raise AuditError(
                f"ClickHouse at {where} refused user {_env(USER_ENV) or 'default'!r}: wrong"
                f" password or no such user; set {USER_ENV[0]} and {PASSWORD_ENV[0]}",
                title="no connection",
            ) from e
        cause = _os_error(e)
        if cause is not None and location.scheme != "chdb":
            raise AuditError(
                f"cannot reach ClickHouse at {where}: {_reason(cause)}; check that the server"
                " runs there and that the port is its HTTP interface (8123, or 8443 for"
                " clickhouses://; 9000 is the native protocol, which the audit does not speak)",
                title="no connection",
            ) from e
        text = first_line(e).split("Stack trace")[0].strip(" ,.")
        raise AuditError(f"cannot open ClickHouse at {where}: {text}", title="no connection") from e


def _os_error(error: BaseException) -> OSError | None:
    """The socket error under a client's wrapped exceptions (urllib3 keeps it as ``reason``)."""
    seen: set[int] = set()
    stack: list[object] = [error]
    while stack:
        current = stack.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current
        stack += [current.__cause__, current.__context__, getattr(current, "reason", None)]
    return None


def _reason(error: OSError) -> str:
    """``[Errno 111] Connection refused`` as ``connection refused``."""
    text = error.strerror or str(error)
    return text[:1].lower() + text[1:]


def _env(names: tuple[str, ...]) -> str | None:
    for name in names:
        # Ours through the registry; ClickHouse's own (CLICKHOUSE_USER ...) as they are.
        value = ev.read(name) if name in ev.ALL else os.environ.get(name)
        if value:
            return value
    return None


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
