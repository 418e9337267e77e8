"""An OpenAI body becomes a task shape by one rule (routing.core.openai_shapes.request_shape),
for live requests (routing.compat.params) and batch lines (routing.batches.validation):
`instructions` count in both, a null `max_completion_tokens` falls back in both, and the
default output is the same."""

import pytest

from routing.batches import validation
from routing.compat import params
from routing.core import openai_shapes
from routing.core.limits import MAX_TASK_TOKENS
from routing.core.openai_shapes import CHAT, RESPONSES, ShapeError, request_shape

MESSAGES = [{"role": "user", "content": "x" * 40}]

BODIES = [
    (CHAT, {"messages": MESSAGES}),
    (CHAT, {"messages": MESSAGES, "max_completion_tokens": 7}),
    (CHAT, {"messages": MESSAGES, "max_tokens": 9}),
    (CHAT, {"messages": MESSAGES, "max_completion_tokens": None, "max_tokens": 9}),
    (CHAT, {"messages": MESSAGES, "max_completion_tokens": None}),
    (RESPONSES, {"input": "y" * 30}),
    (RESPONSES, {"input": "y" * 30, "instructions": "z" * 50, "max_output_tokens": 5}),
    (RESPONSES, {"input": MESSAGES, "max_output_tokens": None}),
]


def live(endpoint, body):
    read = params.chat_request if endpoint == CHAT else params.responses_request
    req = read({"model": "sol", **body}, {})
    return req.input_tokens, req.output_tokens


@pytest.mark.parametrize(("endpoint", "body"), BODIES)
def test_a_live_request_and_a_batch_line_have_the_same_shape(endpoint, body):
    batch = validation._task_shape(endpoint, body)
    assert batch == (*live(endpoint, body), 1, 0.0)


def test_the_rules():
    assert request_shape(CHAT, {"messages": MESSAGES}).output_tokens == 1024
    assert openai_shapes.DEFAULT_OUTPUT_TOKENS == 1024
    assert (
        request_shape(
            CHAT, {"messages": MESSAGES, "max_completion_tokens": None, "max_tokens": 3}
        ).output_tokens
        == 3
    )
    with_instructions = request_shape(RESPONSES, {"input": "y" * 40, "instructions": "z" * 40})
    assert with_instructions.input_tokens == 20 and with_instructions.prompt == "z" * 40 + "y" * 40


@pytest.mark.parametrize(
    ("endpoint", "body", "param"),
    [
        (CHAT, {"messages": MESSAGES, "max_completion_tokens": 0}, "max_completion_tokens"),
        (CHAT, {"messages": MESSAGES, "max_tokens": MAX_TASK_TOKENS + 1}, "max_tokens"),
        (CHAT, {"messages": []}, "messages"),
        (RESPONSES, {"input": "y", "instructions": 3}, "instructions"),
        (RESPONSES, {"input": "y", "max_output_tokens": True}, "max_output_tokens"),
    ],
)
def test_a_bad_field_is_named_in_both(endpoint, body, param):
    with pytest.raises(ShapeError) as live_error:
        request_shape(endpoint, body)
    assert live_error.value.param == param and str(live_error.value).startswith(param)
    with pytest.raises(ValueError, match=rf"^body\.{param}"):
        validation._task_shape(endpoint, body)
