"""ClickHouse's HTTP interface in front of the embedded engine, for tests of the server path.

No ClickHouse server this project can install speaks the exporter's schema (Map columns
need 21.1 or later), and chdb has no server mode. So the real client (clickhouse-connect)
talks HTTP to this small front on 127.0.0.1, which answers as a server does and runs each
query in the real engine (a chdb session):

* the query from the ``query`` URL parameter, the body, or a form field (in that order of
  concatenation, as the server does); a trailing ``FORMAT X`` (or ``default_format``) picks
  the output format, which chdb writes itself (Native, JSON, TabSeparated ...);
* ``param_NAME`` values bound to ``{NAME:Type}`` placeholders by the engine, in ClickHouse's
  escaped text form;
* any other URL parameter that is not a transport one is a setting, applied for that query
  only (SET, then the previous value back);
* ``database`` (URL parameter or X-ClickHouse-Database) as the current database;
* the user from Basic auth, X-ClickHouse-User/X-ClickHouse-Key or ``user``/``password``:
  a wrong password is refused as the server refuses it (HTTP 403, code 516);
* errors as HTTP 500 with X-ClickHouse-Exception-Code and ClickHouse's error text.

Every request is recorded (:attr:`Front.requests`), so a test asserts on what reached the
server rather than on what the client meant to send.
"""

from __future__ import annotations

import base64
import hmac
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

# Transport parameters of the HTTP interface: anything else in the URL is a setting.
_TRANSPORT = {
    "query",
    "database",
    "user",
    "password",
    "default_format",
    "session_id",
    "session_timeout",
    "session_check",
    "query_id",
    "compress",
    "decompress",
    "quota_key",
    "buffer_size",
    "wait_end_of_query",
    "client_protocol_version",
    "enable_http_compression",
    "send_progress_in_http_headers",
    "http_headers_progress_interval_ms",
}
_FORMAT = re.compile(r"\s+FORMAT\s+(\w+)\s*;?\s*$", re.I)
_CODE = re.compile(r"Code: (\d+)\.")


@dataclass
class Received:
    """One request as the server saw it."""

    user: str
    query: str
    params: dict[str, str]
    settings: dict[str, str]
    database: str | None
    output: str
    seconds: float = 0.0
    """How long the engine took to answer."""


@dataclass
class Front:
    """The HTTP front of ``session`` (a chdb session) for ``user`` / ``password``."""

    session: Any
    user: str = "default"
    password: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Users whose credentials the front refused."""

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/ping", lambda _: PlainTextResponse("Ok.\n")),
                Route("/", self.handle, methods=["GET", "POST"]),
            ]
        )

    async def handle(self, request: Request) -> Response:
        url = dict(request.query_params)
        form: dict[str, str] = {}
        body = b""
        if request.headers.get("content-type", "").startswith(
            ("multipart/form-data", "application/x-www-form-urlencoded")
        ):
            form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        else:
            body = await request.body()
        user, password = self._credentials(request, url)
        if user != self.user or not hmac.compare_digest(password.encode(), self.password.encode()):
            self.refused.append(user)
            return _error(
                516,
                f"{user}: Authentication failed: password is incorrect, or there is no user "
                "with such name. (AUTHENTICATION_FAILED)",
                status=403,
            )
        query = "\n".join(
            part for part in (url.get("query", ""), body.decode(), form.get("query", "")) if part
        )
        values = {**url, **form}
        params = {k[6:]: v for k, v in values.items() if k.startswith("param_")}
        settings = {
            k: v for k, v in url.items() if k not in _TRANSPORT and not k.startswith("param_")
        }
        database = request.headers.get("x-clickhouse-database") or url.get("database")
        output = url.get("default_format", "TabSeparated")
        found = _FORMAT.search(query)
        if found:
            output, query = found.group(1), query[: found.start()]
        received = Received(user, query, params, settings, database, output)
        self.requests.append(received)
        started = time.perf_counter()
        try:
            data = self._run(query, output, params, settings, database)
        except Exception as e:
            text = str(e).strip()
            code = _CODE.search(text)
            return _error(int(code.group(1)) if code else 1001, text, status=500)
        finally:
            received.seconds = time.perf_counter() - started
        return Response(
            data,
            headers={
                "X-ClickHouse-Format": output,
                "X-ClickHouse-Timezone": "UTC",
                "X-ClickHouse-Query-Id": url.get("query_id", ""),
            },
        )

    def _credentials(self, request: Request, url: dict[str, str]) -> tuple[str, str]:
        auth = request.headers.get("authorization", "")
        if auth.startswith("Basic "):
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            return user, password
        if "x-clickhouse-user" in request.headers:
            return request.headers["x-clickhouse-user"], request.headers.get("x-clickhouse-key", "")
        return url.get("user", "default"), url.get("password", "")

    def _run(
        self,
        query: str,
        output: str,
        params: dict[str, str],
        settings: dict[str, str],
        database: str | None,
    ) -> bytes:
        with self.lock:
            before = {}
            try:
                for name, value in settings.items():
                    before[name] = self._setting(name)
                    self.session.query(f"SET {name} = {_quote(value)}")
                if database:
                    self.session.query(f"USE {_ident(database)}")
                result = self.session.query(query, output, params=params)
                return bytes(result.bytes()) if result is not None else b""
            finally:
                for name, value in before.items():
                    self.session.query(f"SET {name} = {_quote(value)}")
                if database:
                    self.session.query("USE default")

    def _setting(self, name: str) -> str:
        text = self.session.query(
            "SELECT value FROM system.settings WHERE name = {n:String}",
            "TSVRaw",
            params={"n": name},
        ).bytes()
        return bytes(text).decode().strip()


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ident(name: str) -> str:
    return "`" + name.replace("`", "\\`") + "`"


def _error(code: int, text: str, *, status: int) -> Response:
    body = text if text.startswith("Code:") else f"Code: {code}. DB::Exception: {text}"
    return PlainTextResponse(
        body + "\n", status_code=status, headers={"X-ClickHouse-Exception-Code": str(code)}
    )


class Serving:
    """``front`` on 127.0.0.1 in a thread of this process, until :meth:`stop`."""

    def __init__(self, front: Front) -> None:
        self.front = front
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = uvicorn.Config(
            front.app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the ClickHouse front did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
