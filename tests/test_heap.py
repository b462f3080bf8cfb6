import gc
import threading

from kiln import heap


def test_frozen_is_reentrant_and_unfreezes_at_the_outermost_exit():
    held = [object() for _ in range(10)]
    assert gc.get_freeze_count() == 0
    with heap.frozen():
        frozen = gc.get_freeze_count()
        assert frozen >= len(held)
        with heap.frozen():
            assert gc.get_freeze_count() == frozen     # nested: nothing more frozen
        assert gc.get_freeze_count() == frozen         # inner exit keeps the outer's freeze
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
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with heap.frozen():
            pass
        assert gc.get_freeze_count() == count
    finally:
        gc.unfreeze()
