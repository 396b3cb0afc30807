"""Chunked, double-buffered staging of the ``cuda`` device's transfers.

Owns: ``CHUNK`` and ``ASYNC_CHUNK`` (the bytes of one staging buffer on the synchronous
queue and on an asynchronous one) and the staged transfers of more than one chunk, called by ``cuda_transfers.HostTransfer``: ``upload_now``/``download_now`` (on
the synchronous queue: the host side packed or unpacked on the calling thread) and
``upload_async``/``download_async`` (on an asynchronous queue: the host copies are host
functions in stream order). A transfer of one chunk or less is one piece: one buffer, its
copy and its DMA one after the other (on an asynchronous queue, both on the queue's
stream); a longer one alternates two buffers, and on an asynchronous queue its host
copies run on the queue's ``staging_stream``.

Why pieces: a staged transfer is a CPU copy into page-locked memory and a DMA. In one
piece the two run one after the other, and the staging buffer is as large as the
transfer (a 1 GiB update held a 1 GiB pinned buffer). In pieces of at most ``CHUNK``
(``ASYNC_CHUNK``) bytes through two buffers, the CPU copy of one piece overlaps the DMA
of the piece before it, and a transfer holds two buffers of pinned memory whatever its
size.
The pieces follow the transfer's block order (``cuda_layout.Packing.pieces``): piece
``k`` is the block's bytes ``[begin, end)`` and the host elements ``host[index]``.

Order (OpenACC 3.3 §2.16.1): on an asynchronous queue the host array is read (upload)
or written (download) when the transfer runs in the queue's stream order, never at
enqueue time. The staging stream starts an upload's first copy after an event recorded
on the queue's stream, and each DMA waits for the copy that filled its buffer; a
download's copies wait for the DMA that filled their buffer, and the queue's stream
waits for the last copy before anything after the download. So when the queue's stream
has passed a transfer, the staging stream has passed its host copies: ``defer`` on the
queue's stream releases the buffers, and ``synchronize`` covers the host writes.
Buffer reuse: piece ``k + 2`` uses piece ``k``'s buffer only after the event that
marks piece ``k``'s DMA (upload) or host copy (download) done.
"""

from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["CHUNK", "ASYNC_CHUNK", "upload_now", "download_now", "upload_async", "download_async", "CopyInto"]

#: bytes of one staging buffer of the synchronous queue (the calling thread packs): at
#: ~10 GB/s of host copy ~0.8 ms a piece, so the per-piece cost (an event, a memcpy call,
#: tens of µs) stays within a few %
CHUNK = 8 << 20
#: bytes of one staging buffer of an asynchronous queue: each piece's host copy is a host
#: function, which must take the GIL from the program's thread (up to the interpreter's
#: 5 ms switch interval while that thread runs Python), so its pieces are larger: at most
#: 16 hand-offs per GiB, and 128 MiB of pinned memory per transfer
ASYNC_CHUNK = 64 << 20


class CopyInto:
    """``np.copyto(destination, source)``: a host function of a transfer."""

    __slots__ = ("destination", "source")

    def __init__(self, destination: np.ndarray, source: np.ndarray):
        self.destination, self.source = destination, source

    def __call__(self) -> None:
        destination, source = self.destination, self.source
        self.destination = self.source = None  # release the host array once it has run
        np.copyto(destination, source, casting="no")


def _buffers(backend, pieces) -> list:
    """The two staging buffers of a transfer in ``pieces`` (one when there is one piece),
    each as large as its largest piece."""
    largest = max(end - begin for _, begin, end in pieces)
    return [backend.pinned(largest) for _ in range(min(2, len(pieces)))]


class _Piece:
    """Piece ``k`` of a staged transfer: its host elements, its staging bytes and its
    place in the device block."""

    __slots__ = ("host", "staged", "buffer", "address", "slot")

    def __init__(self, host: np.ndarray, packing, buffers: list, piece, address: int, k: int):
        index, begin, end = piece
        self.slot = k % 2
        self.host = host[index + (Ellipsis,)]  # a view, also of a 0-d array: nothing moves here
        self.buffer = buffers[self.slot][:end - begin]
        self.staged = packing.staged(self.buffer, self.host.shape)
        self.address = address + begin


def _split(backend, host, packing, address: int, kept: list, limit: int) -> list:
    """The pieces of at most ``limit`` bytes of a transfer, their staging buffers appended
    to ``kept`` first (the caller holds them until the stream has passed every DMA that
    may touch them, also when enqueueing fails halfway)."""
    pieces = packing.pieces(limit)
    buffers = _buffers(backend, pieces)
    kept.extend(buffers)
    return [_Piece(host, packing, buffers, piece, address, k) for k, piece in enumerate(pieces)]


@contextlib.contextmanager
def _covered(backend, stream, helper):
    """The queue's ``stream`` waits for everything enqueued on the staging stream
    ``helper`` in the block, also when enqueueing fails halfway (then at best effort,
    the failure propagating): once the queue's stream has passed the transfer, no host
    copy of it can still run (a download's would write the host array after the wait
    that reports the failure)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            backend.wait_event(stream, backend.record_event(helper))
        raise
    backend.wait_event(stream, backend.record_event(helper))


# -- the synchronous queue: host copies on the calling thread --------------------------------
def upload_now(backend, stream, host: np.ndarray, packing, address: int, kept: list) -> None:
    """Enqueue on ``stream`` (the synchronous queue's) the upload of ``host`` to the
    block at ``address``: each piece packed on the calling thread while the DMA of the
    piece before it runs; the staging buffers go to ``kept``."""
    pieces = _split(backend, host, packing, address, kept, CHUNK)
    read = [None, None]  # per buffer: the event after the DMA that last read it
    for k, piece in enumerate(pieces):
        if read[piece.slot] is not None:
            backend.synchronize_event(read[piece.slot])
        np.copyto(piece.staged, piece.host, casting="no")
        backend.memcpy_htod(piece.address, piece.buffer, stream)
        if k + 2 < len(pieces):  # piece k + 2 refills this buffer
            read[piece.slot] = backend.record_event(stream)


def download_now(backend, stream, host: np.ndarray, packing, address: int, kept: list) -> None:
    """Download the block at ``address`` into ``host`` through ``stream`` (the
    synchronous queue's; what must precede the DMAs is already enqueued): each piece
    unpacked on the calling thread while the DMA of the next one runs; the staging
    buffers go to ``kept``. Complete on return."""
    pieces = _split(backend, host, packing, address, kept, CHUNK)
    filled = [None, None]  # per buffer: the event after the DMA that last filled it

    def fill(k: int) -> None:
        piece = pieces[k]
        backend.memcpy_dtoh(piece.buffer, piece.address, stream)
        filled[piece.slot] = backend.record_event(stream)

    for k in range(min(2, len(pieces))):
        fill(k)
    for k, piece in enumerate(pieces):
        backend.synchronize_event(filled[piece.slot])
        np.copyto(piece.host, piece.staged, casting="no")
        if k + 2 < len(pieces):
            fill(k + 2)


# -- an asynchronous queue: host copies as host functions on the staging stream ---------------
def upload_async(backend, queue, host: np.ndarray, packing, address: int, kept: list) -> None:
    """Enqueue on ``queue`` (a ``CudaQueue``) the upload of ``host`` to the block at
    ``address``, the host read in stream order (module docstring); the staging buffers go
    to ``kept``, to release once the queue's stream has passed the transfer."""
    pieces = _split(backend, host, packing, address, kept, ASYNC_CHUNK)
    stream = queue.stream
    if len(pieces) == 1:  # the copy and the DMA one after the other on the queue's stream
        piece = pieces[0]
        queue.host_func(CopyInto(piece.staged, piece.host))
        backend.memcpy_htod(piece.address, piece.buffer, stream)
        return
    helper = queue.staging_stream
    backend.wait_event(helper, backend.record_event(stream))  # after what precedes it
    read = [None, None]  # per buffer: the event after the DMA that last read it
    with _covered(backend, stream, helper):
        for piece in pieces:
            if read[piece.slot] is not None:
                backend.wait_event(helper, read[piece.slot])
            queue.host_func(CopyInto(piece.staged, piece.host), stream=helper)
            backend.wait_event(stream, backend.record_event(helper))
            backend.memcpy_htod(piece.address, piece.buffer, stream)
            read[piece.slot] = backend.record_event(stream)


def download_async(backend, queue, host: np.ndarray, packing, address: int, kept: list) -> None:
    """Enqueue on ``queue`` (a ``CudaQueue``) the download of the block at ``address``
    into ``host``, the host written in stream order (module docstring); what must precede
    the DMAs is already enqueued; the staging buffers go to ``kept``, to release once the
    queue's stream has passed the transfer."""
    pieces = _split(backend, host, packing, address, kept, ASYNC_CHUNK)
    stream = queue.stream
    if len(pieces) == 1:  # the DMA and the copy one after the other on the queue's stream
        piece = pieces[0]
        backend.memcpy_dtoh(piece.buffer, piece.address, stream)
        queue.host_func(CopyInto(piece.host, piece.staged))
        return
    helper = queue.staging_stream
    emptied = [None, None]  # per buffer: the event after the host copy that last read it
    with _covered(backend, stream, helper):  # the queue passes it once the host is written
        for piece in pieces:
            if emptied[piece.slot] is not None:
                backend.wait_event(stream, emptied[piece.slot])
            backend.memcpy_dtoh(piece.buffer, piece.address, stream)
            backend.wait_event(helper, backend.record_event(stream))
            queue.host_func(CopyInto(piece.host, piece.staged), stream=helper)
            emptied[piece.slot] = backend.record_event(helper)
