"""The host-device transfers (transfers.py): the ring of pinned buffers small host -> device
copies go through. On a CPU the ring is unpinned and its events are recorded here, so
the reuse rule (a buffer is refilled only after the transfer that read it) is tested
without a GPU."""

from __future__ import annotations

import numpy as np
import torch

from ttsfleet_runtime.transfers import PinnedStaging, array_to_device, ids_on


class RecordedEvent:
    """Stands in for torch.cuda.Event: logs its records and waits."""

    def __init__(self, log: list[tuple[str, int]]):
        self.log = log
        self.id = len(log)  # distinct per event as they are made in order
        log.append(("made", self.id))

    def record(self):
        self.log.append(("record", self.id))

    def synchronize(self):
        self.log.append(("wait", self.id))


def ring(slots=2, slot_bytes=64):
    log: list[tuple[str, int]] = []
    staging = PinnedStaging(slots, slot_bytes, pin=False, event=lambda: RecordedEvent(log))
    log.clear()  # the events made with the ring
    return staging, log


def test_copies_hold_the_data_even_when_the_source_changes_after():
    staging, _ = ring()
    host = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    out = staging.copy(host, torch.device("cpu"))
    host += 100
    assert out.shape == (2, 3) and out.dtype == torch.int64
    assert out.tolist() == [[0, 1, 2], [3, 4, 5]]
    flags = staging.copy(torch.tensor([True, False, True]), torch.device("cpu"))
    assert flags.tolist() == [True, False, True]


def test_a_buffer_is_refilled_only_after_the_transfer_that_read_it():
    staging, log = ring(slots=2)
    cpu = torch.device("cpu")
    staging.copy(torch.ones(4), cpu)  # buffer 0, event 0
    staging.copy(torch.ones(4), cpu)  # buffer 1, event 1
    assert log == [("record", 0), ("record", 1)]  # a first lap waits for nothing
    out = staging.copy(torch.full((4,), 7.0), cpu)  # buffer 0 again
    assert log[2:] == [("wait", 0), ("record", 0)]  # waited for its last reader first
    assert out.tolist() == [7.0] * 4


def test_copies_larger_than_a_buffer_are_left_to_the_caller():
    staging, _ = ring(slot_bytes=64)
    assert staging.copy(torch.zeros(17, dtype=torch.float32), torch.device("cpu")) is None
    assert staging.copy(torch.zeros(16, dtype=torch.float32), torch.device("cpu")) is not None


def test_empty_tensors_take_no_buffer():
    staging, log = ring(slots=1)
    out = staging.copy(torch.zeros(0, 3), torch.device("cpu"))
    assert out.shape == (0, 3) and log == []


def test_a_copy_into_a_given_tensor_writes_it_in_place():
    """The CUDA graph inputs' way (speech_tokenizer/rate12/streaming.py): no new tensor."""
    staging, _ = ring()
    target = torch.full((3,), -1, dtype=torch.int64)
    out = staging.copy(torch.tensor([4, 5, 6]), torch.device("cpu"), target)
    assert out is target and target.tolist() == [4, 5, 6]


def test_arrays_are_copied_by_numpy_into_the_same_ring():
    """`copy_array` (ids, flags, the prefill's rows): the data arrives in the shape and
    dtype torch gives the array, and its buffer obeys the same reuse rule."""
    staging, log = ring(slots=2, slot_bytes=64)
    cpu = torch.device("cpu")
    ids = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64)
    out = staging.copy_array(ids, cpu)  # buffer 0
    ids += 100
    assert out.dtype == torch.int64 and out.tolist() == [[1, 2, 3], [4, 5, 6]]
    flags = staging.copy_array(np.array([True, False, True]), cpu)  # buffer 1
    assert flags.dtype == torch.bool and flags.tolist() == [True, False, True]
    target = torch.zeros(2, dtype=torch.float32)
    assert staging.copy_array(np.array([0.5, -2.0], dtype=np.float32), cpu, target) is target
    assert target.tolist() == [0.5, -2.0]
    assert log == [("record", 0), ("record", 1), ("wait", 0), ("record", 0)]
    assert staging.copy_array(np.zeros(9, dtype=np.int64), cpu) is None  # 72 bytes > 64


def test_a_tensor_and_an_array_may_share_a_buffer_in_turn():
    """The buffer's typed views are kept per dtype: an int64 copy after a float32 one
    in the same buffer reads its own bytes, not the float view's."""
    staging, _ = ring(slots=1, slot_bytes=64)
    cpu = torch.device("cpu")
    assert staging.copy(torch.tensor([1.5, 2.5]), cpu).tolist() == [1.5, 2.5]
    assert staging.copy_array(np.array([7, 8], dtype=np.int64), cpu).tolist() == [7, 8]
    assert staging.copy(torch.tensor([[3.0], [4.0]]), cpu).tolist() == [[3.0], [4.0]]


def test_ids_on_the_cpu_are_a_copy_of_their_own():
    ids = [3, 1, 4]
    out = ids_on(ids, "cpu")
    assert out.dtype == torch.int64 and out.tolist() == ids
    array = np.array(ids, dtype=np.int64)
    copied = array_to_device(array, torch.device("cpu"))
    array[0] = 9
    assert copied.tolist() == ids
