"""Engine calls from the app run on one device thread (one OpenMP team on a CPU), and a race the
visitor leaves is closed there too; on ZeroGPU they run where they are made."""

from __future__ import annotations

import asyncio
import threading

from gradio.utils import safe_get_lock, safe_get_stop_event

import app
from ui.guard import RaceRequest
from ui.threads import DeviceThread, GradioLoops, Latest


def recording(names: list, closed: list):
    try:
        for i in range(5):
            names.append(threading.current_thread().name)
            yield i
    finally:
        closed.append(threading.current_thread().name)


def test_every_step_runs_on_the_one_device_thread_and_a_left_race_is_closed_there():
    device = DeviceThread(inline=False)
    names, closed = [], []
    assert list(device.iterate(recording(names, closed))) == [0, 1, 2, 3, 4]
    assert len(set(names)) == 1 and names[0].startswith("device") and closed == names[:1]
    names, closed = [], []
    left = device.iterate(recording(names, closed))
    next(left)
    next(left)
    left.close()  # the visitor went away
    assert closed == [names[0]] and names[0].startswith("device")
    assert device.call(lambda: threading.current_thread().name) == names[0]


def test_a_call_made_on_the_device_thread_runs_there_at_once():
    """A call from inside a call (the app's get_engine() in a measurement run on the device thread)
    would wait for the thread it runs on: it runs in place instead."""
    device = DeviceThread(inline=False)
    done = threading.Event()

    def outer():
        inner = device.call(threading.current_thread)
        done.set()
        return inner, threading.current_thread()

    worker = threading.Thread(target=lambda: device.call(outer), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done.is_set(), "a call from the device thread deadlocked"
    inner, outer_thread = device.call(outer)
    assert inner is outer_thread and inner.name.startswith("device")


def test_on_zero_gpu_calls_run_where_they_are_made():
    device = DeviceThread(inline=True)
    names, closed = [], []
    assert list(device.iterate(recording(names, closed))) == [0, 1, 2, 3, 4]
    assert set(names) == {threading.current_thread().name}


def test_the_app_loads_and_races_on_its_device_thread():
    assert app.DEVICE.executor is not None  # no `spaces` module here
    engine = app.get_engine()
    seen = []
    original = engine.stream

    def stream(*args, **kwargs):
        events = original(*args, **kwargs)

        def watched():
            for event in events:
                seen.append(threading.current_thread().name)
                yield event

        return watched()

    engine.stream = stream
    try:
        greedy = RaceRequest("def f():\n", 8, options={}, sampling={}, seed_drawn=False, raw=False)
        for _ in app.RACING.run(greedy, ["vanilla", "ouroboros"]):
            pass
    finally:
        del engine.stream
    assert seen and {name.split("_")[0] for name in seen} == {"device"}


def test_latest_keeps_the_last_item_given():
    items = Latest(iter([1, 2, 3]))
    assert next(items) == 1 and items.value == 1
    assert list(items) == [2, 3] and items.value == 3


def test_gradio_loops_closes_the_event_loops_gradio_discards_and_keeps_the_threads_own():
    loops, made, restored = GradioLoops(), [], []
    new_event_loop = asyncio.new_event_loop

    def build():  # on a thread of its own, as gradio sets the thread's event loop
        with loops.closing():
            for _ in range(3):
                safe_get_lock()
                made.append(asyncio.get_event_loop())
        restored.append(asyncio.new_event_loop is new_event_loop)
        with loops.closing():
            safe_get_stop_event()
            made.append(asyncio.get_event_loop())

    thread = threading.Thread(target=build)
    thread.start()
    thread.join()
    assert restored == [True] and asyncio.new_event_loop is new_event_loop
    assert len(set(made)) == 4
    # the first use's last loop stayed the thread's own until the second use replaced it
    assert [loop.is_closed() for loop in made] == [True, True, True, False]
    made[-1].close()
