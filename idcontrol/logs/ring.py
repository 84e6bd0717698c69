"""A single-producer, single-consumer byte ring in shared memory: the tick's hand-off to the log writer.

The daemon appends each packed record with two memory copies and no system call, so no other
process or thread is woken in the tick (a socket send would wake the receiver, and on a busy
2-core machine that wake-up costs tens of µs to milliseconds). The writer process polls the ring.

Layout: a 64-byte header (``written`` and ``read``, u64 running byte totals in the machine's byte order,
each changed by one side only), then ``capacity`` bytes of records, each a u32 length and the bytes,
wrapping around the end. Each total is read and written as one aligned 8-byte access (through a
memoryview of u64), which the other process sees whole: ``struct.pack_into`` zeroes its target before
it writes, so the other side could read 0 in between (the daemon then saw a full ring and dropped a
record; two processes hammering one total read it torn 1.3 million times in 8.9 million reads). A
record that does not fit in the free space is refused (the producer counts it as dropped). The
consumer takes only records committed at least one poll earlier (:meth:`Ring.pop` with an older
``written`` total), so their bytes are visible to it whatever order the processor made the
producer's stores visible in.
"""

from __future__ import annotations

import struct
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

HEADER = 64
_U32 = struct.Struct("<I")
_WRITTEN, _READ, _CAPACITY = 0, 1, 2  # u64 slots of the header


class Ring:
    """One end of a ring: :meth:`create` (the producer) or :meth:`attach` (the consumer)."""

    def __init__(self, shm: SharedMemory, capacity: int) -> None:
        self.shm = shm
        self.name = shm.name
        self.capacity = capacity
        self._buf = shm.buf
        self._totals = shm.buf[:HEADER].cast("Q")  # [written, read, capacity]: whole 8-byte loads and stores
        self._written = self._totals[_WRITTEN]  # the producer's own total
        self._read = self._totals[_READ]  # the consumer's own total

    @classmethod
    def create(cls, capacity: int) -> Ring:
        """A new ring of ``capacity`` bytes, zeroed. Zeroing it touches each of its pages, which the kernel then
        allocates here rather than on the tick that first writes there (during the ring's first lap)."""
        shm = SharedMemory(create=True, size=HEADER + capacity)
        zeros = bytes(1 << 20)  # every page touched now, not on the tick that first writes it (below)
        for start in range(0, HEADER + capacity, len(zeros)):
            n = min(len(zeros), HEADER + capacity - start)
            shm.buf[start : start + n] = zeros[:n]
        with shm.buf[:HEADER].cast("Q") as totals:
            totals[_CAPACITY] = capacity
        return cls(shm, capacity)

    @classmethod
    def attach(cls, name: str) -> Ring:
        shm = SharedMemory(name=name)
        with shm.buf[:HEADER].cast("Q") as totals:
            capacity = totals[_CAPACITY]
        return cls(shm, capacity)

    def forget_name(self) -> None:
        """Remove the ring's name (both mappings stay valid): nothing is left behind whoever dies first."""
        self.shm.unlink()

    def disown(self) -> None:
        """Stop this process's resource tracker from unlinking the name at exit (the other end did)."""
        resource_tracker.unregister(self.shm._name, "shared_memory")  # noqa: SLF001 (the tracker's key)

    # ------------------------------------------------------------------ producer
    def push(self, record: bytes) -> bool:
        """Append one record; False (nothing written) when the free space is too small."""
        n = 4 + len(record)
        read = self._totals[_READ]
        if self._written + n - read > self.capacity:
            return False
        self._put(self._written, _U32.pack(len(record)))
        self._put(self._written + 4, record)
        self._written += n
        self._totals[_WRITTEN] = self._written  # commit: after the bytes
        return True

    def _put(self, position: int, data: bytes) -> None:
        start = position % self.capacity
        first = min(len(data), self.capacity - start)
        view = memoryview(data)
        self._buf[HEADER + start : HEADER + start + first] = view[:first]
        if first < len(data):
            self._buf[HEADER : HEADER + len(data) - first] = view[first:]

    # ------------------------------------------------------------------ consumer
    def committed(self) -> int:
        """The producer's running byte total (pass an earlier value of it to :meth:`pop`)."""
        return self._totals[_WRITTEN]

    def pop(self, upto: int) -> list[bytes]:
        """Every record committed up to the byte total ``upto``, oldest first; their space is freed."""
        out = []
        while self._read < upto:
            (n,) = _U32.unpack(self._get(self._read, 4))
            out.append(self._get(self._read + 4, n))
            self._read += 4 + n
        self._totals[_READ] = self._read
        return out

    def _get(self, position: int, n: int) -> bytes:
        start = position % self.capacity
        first = min(n, self.capacity - start)
        data = bytes(self._buf[HEADER + start : HEADER + start + first])
        if first < n:
            data += bytes(self._buf[HEADER : HEADER + n - first])
        return data

    def close(self) -> None:
        self._totals.release()
        self._buf.release()
        self.shm.close()
