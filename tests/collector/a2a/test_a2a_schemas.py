"""The extension's JSON Schemas: valid schemas, matching what the code declares and carries."""

from __future__ import annotations

from typing import Any

import pytest

from collector import Receiver
from collector.a2a import codec, declaration, schemas
from collector.http.schemas import InvalidMessage
from collector.messages import Answer, CommitResult, VoidNotice


@pytest.mark.parametrize("name", schemas.NAMES)
def test_each_schema_is_a_valid_draft_2020_12_schema(name: str):
    assert schemas.validator(name).schema["$id"].endswith(f"/v1/{name}.schema.json")


@pytest.mark.parametrize("produces", [None, ["draft@1", "summary"]])
def test_the_card_params_a_receiver_declares_match_the_schema(produces: Any):
    receiver = Receiver("writer", executor=lambda w: {}, produces=produces)
    params = codec.from_struct(declaration(receiver).params)
    schemas.validate("a2a-extension-params", params)
    assert params["receiver"] == "writer"
    assert ("output_schemas" in params) == (produces is not None)


@pytest.mark.parametrize(
    "reply",
    [
        Answer("h", 1, "w", "accept", eta_ms=10).to_dict(),
        Answer("h", 1, "w", "reject", reason="resource_unavailable").to_dict(),
        CommitResult("h", 1, "w", "executed", result={"n": 1}).to_dict(),
        VoidNotice("h", 1, "gave up").to_dict(),
        {"error": "invalid_message", "detail": "bad", "field": "/attempt"},
    ],
    ids=["accept", "reject", "commit_result", "void", "error"],
)
def test_every_reply_the_executor_carries_matches_the_metadata_schema(reply: dict[str, Any]):
    schemas.validate("a2a-metadata", codec.from_struct(codec.to_struct(reply)))


def test_params_missing_the_receiver_are_refused_naming_it():
    with pytest.raises(InvalidMessage, match="'receiver' is a required property"):
        schemas.validate(
            "a2a-extension-params",
            {"protocol_version": "1", "validation_deadline_ms": 2000, "reason_codes": []},
        )
    with pytest.raises(InvalidMessage, match="validation_deadline_ms"):
        schemas.validate(
            "a2a-extension-params",
            {"protocol_version": "1", "receiver": "w", "validation_deadline_ms": 0,
             "reason_codes": []},
        )  # fmt: skip


def test_integral_numbers_come_back_as_integers_and_floats_stay_floats():
    value = {"a": 1500, "b": 0.5, "c": [1, {"d": -2}], "e": 2**53}
    back = codec.from_struct(codec.to_struct(value))
    assert back == value and isinstance(back["a"], int) and isinstance(back["c"][1]["d"], int)
    assert isinstance(back["b"], float)
