"""collector.a2a: its pinned public surface, and what importing it (or not) loads."""

from __future__ import annotations

import collector.a2a
from collector.a2a import extension
from tests.support.imports import loaded_after, within
from tests.support.paths import REPO


def test_importing_collector_loads_no_a2a():
    loaded = loaded_after("collector, collector.http")
    assert within(loaded, ["a2a", "collector.a2a", "google.protobuf"]) == []


def test_the_a2a_package_loads_nothing_of_the_auditor():
    # a2a-sdk's own routes import uvicorn, grpc and the OpenTelemetry SDK when they are
    # installed; what handoffscope adds must stay off the auditor's and dashboard's stacks.
    loaded = loaded_after("collector.a2a")
    assert "a2a" in loaded and "collector.a2a.executor" in loaded
    assert within(loaded, ["duckdb", "streamlit", "pandas", "auditor", "dashboard"]) == []


def test_public_surface_is_pinned():
    assert collector.a2a.__all__ == [
        "EXTENSION_URI",
        "A2AChannel",
        "A2AHandshakeError",
        "ExtensionMissing",
        "HandshakeExecutor",
        "RecentTaskStore",
        "a2a_app",
        "agent_card",
        "declaration",
        "extension",
        "handshake_params",
    ]
    for name in collector.a2a.__all__:
        assert getattr(collector.a2a, name) is not None


def test_the_uri_is_versioned_like_the_wire_protocol():
    from collector.http import wire

    assert (
        extension.EXTENSION_URI
        == f"https://handoffscope.dev/a2a/handshake/v{wire.PROTOCOL_VERSION}"
    )
    assert extension.EXTENSION_URI.startswith(extension.EXTENSION_URI_PREFIX)


def test_the_spec_names_every_constant_it_defines():

    text = (REPO / "docs" / "a2a.md").read_text()
    for value in (
        extension.EXTENSION_URI,
        extension.HEADER_EXTENSIONS,
        extension.ERROR_INVALID_MESSAGE,
        extension.ERROR_EXTENSION_NOT_ACTIVATED,
        extension.ERROR_STORE_UNAVAILABLE,
        extension.ERROR_INTERNAL,
        *extension.STATE_OF_ANSWER.values(),
        *extension.STATE_OF_OUTCOME.values(),
        *extension.STATE_OF_ANSWER,
        *extension.STATE_OF_OUTCOME,
    ):
        assert value in text, value
