"""An unexpected failure inside the race reaches /race's caller as the app's short message, with
nothing of the exception in any event, and the traceback in the server's log: the app launched
inside the test process by its own main(), its race made to raise."""

from __future__ import annotations

from unittest import mock

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

import app
from app_server import free_port
from ouroboros_core.race import Lane
from test_robustness import CODE_PROMPT, TRACEBACK_MARKS, race, raw_race
from ui import racing

SECRET = "secret detail /srv/models/target.safetensors"


def fail_at_once(*args, **kwargs):
    raise RuntimeError(SECRET)
    yield  # a generator, like ouroboros_core.race.race


def fail_mid_race(*args, **kwargs):
    yield {method: Lane(method) for method in ("vanilla", "ouroboros")}  # one update streams first
    raise RuntimeError(SECRET)


@pytest.fixture
def broken_app(broken, monkeypatch):
    """The app started in this process by its own main() (the queue and launch settings of `python
    app.py`), on a loopback port of its own, with the race made to raise; the engine is never
    loaded."""
    monkeypatch.setattr(racing, "race", broken)
    # main() only reports on it; the race never uses it.
    engine = mock.MagicMock(name="engine", defaults={})
    monkeypatch.setattr(app.RACING, "engine", lambda: engine)
    monkeypatch.setattr(app.demo, "analytics_enabled", False)
    launch = app.demo.launch
    monkeypatch.setattr(app.demo, "launch", lambda **kwargs: launch(**kwargs, quiet=True))
    monkeypatch.setattr(app.demo, "block_thread", lambda: None)  # main() returns, serving
    port = free_port()
    monkeypatch.setenv("PORT", str(port))
    monkeypatch.setenv("OUROBOROS_HOST", "127.0.0.1")
    app.main()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        app.demo.close(verbose=False)


@pytest.mark.parametrize("broken", [fail_at_once, fail_mid_race], ids=["at-once", "mid-race"])
def test_unexpected_server_error_reaches_the_visitor_without_a_traceback(
    broken, broken_app, caplog
):
    client = Client(broken_app, verbose=False, httpx_kwargs={"timeout": 60})
    with pytest.raises(AppError) as error:
        race(client, CODE_PROMPT, 8)
    # The caller gets the app's own short message, and nothing of what went wrong inside.
    assert error.value.message == app.UNEXPECTED
    # Nor does the raw event stream carry any of it, in any event.
    event, payload, stream = raw_race(broken_app, CODE_PROMPT, 8)
    assert event == "error", stream
    assert payload.get("error") == app.UNEXPECTED, payload
    for leak in (*TRACEBACK_MARKS, "RuntimeError", "secret", "/srv/"):
        assert leak not in stream, stream
    if broken is fail_mid_race:
        # The error came after the race had begun streaming.
        assert "event: generating" in stream, stream
    # The host keeps it: the traceback is in the server's log.
    assert SECRET in caplog.text and "Traceback" in caplog.text, caplog.text
