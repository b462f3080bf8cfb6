import gc
import threading

from kiln import heap


def test_frozen_is_reentrant_and_unfreezes_at_the_outermost_exit():
    held = [object() for _ in range(10)]
    assert gc.get_freeze_count() == 0
    with heap.frozen():
        assert gc.get_freeze_count() >= len(held)
        with heap.frozen():
            pass
        # the inner exit keeps the outer's freeze (frozen objects may die meanwhile: the
        # count can only fall, and unfreezing would make it 0)
        assert gc.get_freeze_count() >= len(held)
    assert gc.get_freeze_count() == 0


def test_frozen_unfreezes_after_an_error_and_from_threads():
    try:
        with heap.frozen():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.get_freeze_count() == 0

    def work():
        for _ in range(50):
            with heap.frozen():
                pass
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gc.get_freeze_count() == 0


def test_a_heap_the_application_froze_stays_frozen():
    held = [object() for _ in range(10)]
    gc.freeze()
    try:
        with heap.frozen():
            pass
        assert gc.get_freeze_count() >= len(held)      # kiln did not unfreeze it
    finally:
        gc.unfreeze()
