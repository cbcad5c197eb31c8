"""The launched app through its public API (/race), with the real gradio_client.

The embedded pair will be replaced by a trained one, so nothing here depends on the generated text;
only on behaviour: both lanes agree token for token, limits hold, bad input gets an error that names
the problem, and the app keeps serving afterwards.
"""

from __future__ import annotations

import re
import time

import pytest
from gradio_client.exceptions import ValidationError

from app_server import app_server  # noqa: F401  (the fixture)

CODE_PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
STAT_KEYS = {
    "new_tokens",
    "target_forwards",
    "drafted_tokens",
    "accepted_tokens",
    "seconds",
    "tokens_per_second",
    "tokens_per_forward",
    "acceptance_rate",
}


@pytest.fixture(scope="module")
def client(app_server):
    return app_server.client()


def race(client, prompt, max_new_tokens):
    return client.predict(prompt, max_new_tokens, api_name="/race")


def assert_serving(client):
    """A normal request right after the one under test succeeds."""
    result = race(client, CODE_PROMPT, 4)
    assert result["vanilla"]["token_ids"] == result["ouroboros"]["token_ids"]
    assert 1 <= result["vanilla"]["stats"]["new_tokens"] <= 4


def committed(steps: list[dict]) -> list[dict]:
    """The tokens the steps committed, in order: each step's accepted drafts, then the target's own
    token."""
    return [
        t
        for step in steps
        for t in step["accepted"] + ([step["target_token"]] if step["target_token"] else [])
    ]


def test_race_returns_identical_lanes_with_stats(client):
    result = race(client, CODE_PROMPT, 24)

    assert set(result) == {"vanilla", "ouroboros"}
    # float32, the embedded pair's dtype: identical on this prompt.
    assert result["ouroboros"].pop("verdict") == {
        "kind": "identical",
        "first_difference": None,
        "margin": None,
        "spread": None,
    }
    for method, lane in result.items():
        assert lane["sampling"] is None, method  # greedy
        assert isinstance(lane["text"], str), method
        assert all(isinstance(t, int) for t in lane["token_ids"]), method
        stats = lane["stats"]
        assert STAT_KEYS <= set(stats), f"{method} stats lack {STAT_KEYS - set(stats)}"
        assert stats["new_tokens"] == len(lane["token_ids"]), method
        assert 1 <= stats["new_tokens"] <= 24, method
        assert stats["seconds"] > 0 and stats["tokens_per_second"] > 0, method
        assert stats["target_forwards"] >= 1, method
        assert 0.0 <= stats["acceptance_rate"] <= 1.0, method
        assert lane["stop_reason"] in {"max_new_tokens", "eos"}, method
    vanilla, ouroboros = result["vanilla"], result["ouroboros"]
    assert ouroboros["token_ids"] == vanilla["token_ids"]
    assert ouroboros["text"] == vanilla["text"]
    # the race's own figures, as the page shows them
    speed = ouroboros.pop("speedup")
    by_clock = ouroboros["stats"]["tokens_per_second"] / vanilla["stats"]["tokens_per_second"]
    assert speed == pytest.approx(by_clock, abs=1e-3)
    forwards = vanilla["stats"]["target_forwards"] / ouroboros["stats"]["target_forwards"]
    assert ouroboros.pop("forward_ratio") == pytest.approx(forwards, abs=1e-3)
    assert 0.0 <= ouroboros.pop("repeats") <= 1.0
    # Vanilla is one forward per token and drafts nothing; Ouroboros never needs more forwards than
    # that.
    assert vanilla["stats"]["target_forwards"] == vanilla["stats"]["new_tokens"]
    assert vanilla["stats"]["tokens_per_forward"] == 1.0
    assert vanilla["stats"]["drafted_tokens"] == 0
    assert ouroboros["stats"]["target_forwards"] <= vanilla["stats"]["target_forwards"]
    assert ouroboros["stats"]["accepted_tokens"] <= ouroboros["stats"]["drafted_tokens"]
    # Each lane's steps, accepted drafts then the target's own token, add up to exactly its token
    # ids.
    for method, lane in result.items():
        steps = lane["steps"]
        assert [step["index"] for step in steps] == list(range(lane["stats"]["target_forwards"])), (
            method
        )
        assert [t["id"] for t in committed(steps)] == lane["token_ids"], method
        assert "".join(t["text"] for t in committed(steps)) == lane["text"], method
    assert all(step["drafted"] == [] for step in vanilla["steps"])
    assert any(step["accepted"] for step in ouroboros["steps"]), (
        "the race should accept some drafts"
    )


def test_race_respects_one_token(client):
    result = race(client, CODE_PROMPT, 1)
    for lane in result.values():
        assert len(lane["token_ids"]) == 1
        assert lane["stats"]["new_tokens"] == 1


@pytest.mark.parametrize(
    "prompt, max_new_tokens, expected",
    [
        ("", 16, "prompt is empty"),
        ("   \n\t ", 16, "prompt is empty"),
        (None, 16, "prompt is empty"),
        ("x" * 32001, 16, "32,000"),
        # fits the character cap, not the context
        ("def f():\n" * 1000, 128, "leaves room for 1,920"),
        (CODE_PROMPT, 0, "max new tokens"),
        (CODE_PROMPT, -5, "max new tokens"),
        (CODE_PROMPT, 10**9, "max new tokens"),
        (CODE_PROMPT, 2.5, "max new tokens"),
        (CODE_PROMPT, "many", "max new tokens"),
        (CODE_PROMPT, None, "max new tokens"),
        (CODE_PROMPT, "inf", "max new tokens"),
        (CODE_PROMPT, "nan", "max new tokens"),
    ],
    ids=[
        "empty",
        "blank",
        "none-prompt",
        "prompt-too-long",
        "prompt-over-context",
        "zero",
        "negative",
        "huge",
        "fractional",
        "not-a-number",
        "none-tokens",
        "infinite",
        "nan",
    ],
)
def test_bad_input_gets_a_clear_error(client, prompt, max_new_tokens, expected):
    with pytest.raises(ValidationError) as error:
        race(client, prompt, max_new_tokens)
    assert expected in str(error.value).lower()
    assert_serving(client)


def test_prompt_longer_than_the_context_is_refused(client):
    # Well under the character cap, but one token per CJK character overflows any small model's
    # context.
    prompt = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(7900))
    with pytest.raises(ValidationError) as error:
        race(client, prompt, 256)
    message = str(error.value).lower()
    assert "prompt" in message and "tokens" in message and "context" in message
    assert_serving(client)


def test_cancelled_job_ends_its_race_and_leaves_the_app_serving(client, app_server):
    # Cancel once the race streams: gradio_client can only tell the server which job to cancel once
    # the server has named it (a cancel sent sooner, as a loaded machine made a fixed 0.3 s wait do,
    # is lost in the client, and the race then ran all 512 tokens).
    job = client.submit(CODE_PROMPT, 512, api_name="/race")
    deadline = time.monotonic() + 120
    while not job.outputs() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.outputs(), "the race never streamed"
    job.cancel()
    assert_serving(client)
    if hasattr(
        app_server, "log_text"
    ):  # the server itself stopped the race short of its 512 tokens
        ended = [
            re.findall(r"(\w+) (\d+) tokens (\w+)", line)
            for line in app_server.log_text().splitlines()
            if "race api:" in line
        ]
        assert ended and all(
            int(tokens) < 512 and how != "length" for _, tokens, how in ended[-2]
        ), ended[-2:]


def test_html_prompt_is_just_text(client):
    prompt = "<script>window.__pwned = 1</script><b>bold?</b>\n" + CODE_PROMPT
    result = race(client, prompt, 8)
    assert result["vanilla"]["token_ids"] == result["ouroboros"]["token_ids"]
    assert result["vanilla"]["text"] == result["ouroboros"]["text"]
    assert_serving(client)


def test_a_sampled_race_is_identical_repeats_with_its_seed_and_differs_from_greedy(client):
    def sampled(seed):
        return client.predict(
            CODE_PROMPT, 48, None, None, None, None, 0.8, 0.95, seed, api_name="/race"
        )

    greedy = race(client, CODE_PROMPT, 48)
    first, again, other = sampled(7), sampled(7), sampled(8)
    for result in (first, again, other):
        assert result["vanilla"]["token_ids"] == result["ouroboros"]["token_ids"]
        assert result["ouroboros"]["verdict"]["kind"] == "identical"
        for lane in ("vanilla", "ouroboros"):
            assert [t["id"] for t in committed(result[lane]["steps"])] == result[lane]["token_ids"]
    assert (
        first["vanilla"]["sampling"]
        == first["ouroboros"]["sampling"]
        == {"temperature": 0.8, "top_p": 0.95, "seed": 7}
    )
    assert greedy["ouroboros"]["sampling"] is None
    assert first["vanilla"]["token_ids"] == again["vanilla"]["token_ids"]
    assert first["vanilla"]["token_ids"] != greedy["vanilla"]["token_ids"]
    assert first["vanilla"]["token_ids"] != other["vanilla"]["token_ids"]
    # No seed: the race picks one, reports it, and that seed repeats the race.
    unseeded = client.predict(
        CODE_PROMPT, 48, None, None, None, None, 0.8, 0.95, None, api_name="/race"
    )
    seed = unseeded["ouroboros"]["sampling"]["seed"]
    assert isinstance(seed, int)
    assert sampled(seed)["ouroboros"]["token_ids"] == unseeded["ouroboros"]["token_ids"]


@pytest.mark.parametrize(
    "temperature,top_p,seed,expected",
    [
        (-0.1, 1.0, 1, "Temperature must be a number from 0 to 2"),
        (0.8, 0.0, 1, "Top-p must be a number from 0.05 to 1"),
        (0.8, 1.0, -1, "Seed must be a whole number from 0 to 2147483647"),
        (0.8, 1.0, 1.5, "Seed must be a whole number"),
    ],
)
def test_bad_sampling_settings_get_a_clear_error(client, temperature, top_p, seed, expected):
    with pytest.raises(ValidationError, match=expected):
        client.predict(
            CODE_PROMPT, 8, None, None, None, None, temperature, top_p, seed, api_name="/race"
        )


def test_the_idle_app_uses_under_one_percent_of_a_core(app_server):
    psutil = pytest.importorskip("psutil")
    process = getattr(app_server, "process", None)
    if process is None:
        pytest.skip(
            "the app at $OUROBOROS_APP_URL runs elsewhere: its CPU cannot be read from here"
        )
    server = psutil.Process(process.pid)
    time.sleep(2)  # a race cancelled by the test before winds down
    before, started = server.cpu_times(), time.monotonic()
    time.sleep(10)
    after, wall = server.cpu_times(), time.monotonic() - started
    used = (after.user + after.system - before.user - before.system) / wall
    assert used < 0.01, f"idle server used {used:.1%} of a core"


def running_race(client, job=None):
    """A 512-token race that has begun streaming and holds the device: `job` while it still runs,
    else a new one."""
    if job is not None and not job.done():
        return job
    job = client.submit(CODE_PROMPT, 512, api_name="/race")
    deadline = time.monotonic() + 120
    while not job.outputs() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.outputs(), "the race should begin streaming"
    return job


def test_a_bad_call_is_refused_at_once_while_a_race_holds_the_device(client):
    """Calls are checked when they arrive, not when the device frees: with a race running, an
    empty prompt is refused within 2 s (stretched by the measured load), naming the parameter. A
    refusal counts only where the race still ran when it came back (on a fast machine a race may
    end first: another one starts and the call is made again)."""
    from pace import scaled

    job = None
    for args, message in (
        (("",), "prompt: Prompt is empty"),
        ((["def f():"], 8), "prompt: Prompt must be text (a string), got list"),
        (
            (CODE_PROMPT, 8, None, None, None, None, 0.8, 1.0, 1.5),
            "seed: Seed must be a whole number",
        ),
    ):
        for _ in range(5):
            job = running_race(client, job)
            started = time.perf_counter()
            with pytest.raises(ValidationError, match=re.escape(message)):
                client.predict(*args, api_name="/race")
            took = time.perf_counter() - started
            if not job.done():
                break  # the race held the device all the while
        assert not job.done(), "five races ended before one refusal came back"
        assert took < scaled(2.0), (message, took)
    job.cancel()
