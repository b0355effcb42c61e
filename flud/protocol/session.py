"""Sans-I/O connection state: frames in, events out; calls in, frames out.

A Session knows request ids, which side may use which, what is open in each
direction and the in-flight bound. It knows nothing of sockets, TLS or
Twisted: the glue feeds it plaintext bytes and writes what `take_outbound()`
returns. Request/response bodies are decoded here, so a handler only ever sees
typed messages.
"""
import collections
import enum
from dataclasses import dataclass

from flud.protocol import messages
from flud.protocol.codec import (FLAG_END, FrameParser, FrameType, Op,
                                 frame_header)
from flud.protocol.errors import ErrorCode, FrameError, RemoteError

MAX_INFLIGHT = 256
# Ids we cancelled whose late frames we silently drop. Ids are never reused,
# so remembering the most recent ones is enough.
CANCELLED_MEMORY = 1024
SMALL_FRAME = 64 * 1024


class State(enum.Enum):
    AWAIT_HELLO = "await-hello"
    READY = "ready"
    CLOSED = "closed"


@dataclass(slots=True)
class HelloReceived:
    hello: messages.Hello


@dataclass(slots=True)
class RequestReceived:
    request_id: int
    op: int
    message: object
    end: bool


@dataclass(slots=True)
class RequestData:
    request_id: int
    data: bytes
    end: bool


@dataclass(slots=True)
class RequestCancelled:
    request_id: int


@dataclass(slots=True)
class ResponseReceived:
    request_id: int
    op: int
    message: object
    end: bool


@dataclass(slots=True)
class ResponseData:
    request_id: int
    data: bytes
    end: bool


@dataclass(slots=True)
class ErrorReceived:
    request_id: int
    error: RemoteError


class Session:
    def __init__(self, tls_client: bool, max_inflight: int = MAX_INFLIGHT):
        self.state = State.AWAIT_HELLO
        self._parser = FrameParser()
        self._outbound = []
        self._max_inflight = max_inflight
        self._next_id = 1 if tls_client else 2
        self._peer_parity = 0 if tls_client else 1
        self._inbound = {}            # rid -> op, requests the peer opened
        self._inbound_streaming = set()
        self._rejected_streams = collections.OrderedDict()  # refused mid-stream: drop their DATA
        self._outbound_requests = {}  # rid -> op, requests we opened
        self._outbound_streaming = set()
        self._streaming_responses = set()  # our requests answered in DATA
        self._cancelled = collections.OrderedDict()

    # ---- sending -----------------------------------------------------------

    def send_hello(self, hello: messages.Hello) -> None:
        self._emit(FrameType.HELLO, 0, FLAG_END, 0, hello.encode())

    def send_request(self, op: int, body: bytes, end: bool = True) -> int:
        rid = self._next_id
        self._next_id += 2
        self._outbound_requests[rid] = op
        if not end:
            self._outbound_streaming.add(rid)
        self._emit(FrameType.REQUEST, op, FLAG_END if end else 0, rid, body)
        return rid

    def send_request_data(self, rid: int, data, end: bool) -> None:
        if rid not in self._outbound_streaming:
            return  # cancelled or answered early: nothing more to send
        if end:
            self._outbound_streaming.discard(rid)
        self._emit(FrameType.DATA, 0, FLAG_END if end else 0, rid, data)

    def send_response(self, rid: int, body: bytes, end: bool = True) -> bool:
        op = self._inbound.get(rid)
        if op is None:
            return False  # cancelled by the peer meanwhile
        if end:
            if rid in self._inbound_streaming:
                # Answered before its END: drop the DATA still on its way.
                self._reject_stream(rid)
            self._finish_inbound(rid)
        self._emit(FrameType.RESPONSE, op, FLAG_END if end else 0, rid, body)
        return True

    def send_response_data(self, rid: int, data, end: bool) -> bool:
        if rid not in self._inbound:
            return False
        if end:
            self._finish_inbound(rid)
        self._emit(FrameType.DATA, 0, FLAG_END if end else 0, rid, data)
        return True

    def send_error(self, rid: int, code, message: str) -> bool:
        """Answer `rid` with an ERROR (code: an ErrorCode or a wire integer)."""
        if rid not in self._inbound:
            return False
        if rid in self._inbound_streaming:
            # The peer may still be sending DATA for it: drop that quietly.
            self._reject_stream(rid)
        self._finish_inbound(rid)
        self._emit(FrameType.ERROR, 0, FLAG_END, rid,
                   messages.ErrorBody(code, message).encode())
        return True

    def cancel(self, rid: int) -> None:
        if self._outbound_requests.pop(rid, None) is None:
            return
        self._outbound_streaming.discard(rid)
        self._remember_cancelled(rid)
        self._emit(FrameType.CANCEL, 0, FLAG_END, rid, b"")

    def take_outbound(self) -> list:
        """Frames to write, with small neighbours joined into one buffer."""
        out, self._outbound = self._outbound, []
        if len(out) <= 1:
            return out
        merged, small = [], []
        for chunk in out:
            if len(chunk) < SMALL_FRAME:
                small.append(chunk)
                continue
            if small:
                merged.append(b"".join(small))
                small = []
            merged.append(chunk)
        if small:
            merged.append(b"".join(small))
        return merged

    @property
    def open_inbound(self) -> int:
        return len(self._inbound)

    @property
    def open_outbound(self) -> int:
        return len(self._outbound_requests)

    def _emit(self, frame_type, op, flags, rid, payload) -> None:
        self._outbound.append(frame_header(frame_type, op, flags, rid, len(payload)))
        if payload:
            self._outbound.append(payload)

    # ---- receiving ---------------------------------------------------------

    def receive(self, data) -> list:
        """Parse bytes into events. Raises FrameError: close the connection."""
        if self.state is State.CLOSED:
            return []
        events = []
        for frame in self._parser.feed(data):
            event = self._on_frame(frame)
            if event is not None:
                events.append(event)
        return events

    def data_due(self):
        """(request_id, length, buffered) while the DATA payload of a streamed
        answer to one of our requests is arriving: the caller may divert() it
        and put it in place itself (see FrameParser.divert)."""
        due = self._parser.data_due()
        if due is None or due[0] not in self._streaming_responses:
            return None
        return due

    def divert(self) -> list:
        return self._parser.divert()

    def placed(self, n: int) -> list:
        """Events once the diverted payload is whole (its ResponseData carries
        a Placed payload)."""
        if self.state is State.CLOSED:
            return []
        frames = self._parser.placed(n)
        return [event for event in map(self._on_frame, frames) if event is not None]

    def close(self) -> None:
        self.state = State.CLOSED

    def _on_frame(self, frame):
        if self.state is State.AWAIT_HELLO:
            if frame.type != FrameType.HELLO:
                raise FrameError(ErrorCode.PROTOCOL, "expected HELLO first")
            try:
                hello = messages.Hello.decode(frame.payload)
            except RemoteError as err:  # nobody to answer yet: close
                raise FrameError(err.wire_code, err.message) from None
            if hello.version != messages.PROTOCOL_VERSION:
                raise FrameError(ErrorCode.VERSION,
                                 f"protocol version {hello.version} is not "
                                 f"supported (this node speaks "
                                 f"{messages.PROTOCOL_VERSION})")
            self.state = State.READY
            return HelloReceived(hello)
        handler = _HANDLERS.get(frame.type)
        if handler is None:
            raise FrameError(ErrorCode.PROTOCOL, "a second HELLO")
        return handler(self, frame)

    def _on_request(self, frame):
        rid = frame.request_id
        if rid % 2 != self._peer_parity:
            raise FrameError(ErrorCode.PROTOCOL, f"request id {rid} has the wrong parity")
        if rid in self._inbound or rid in self._rejected_streams:
            raise FrameError(ErrorCode.PROTOCOL, f"request id {rid} is already open")
        streaming = not frame.end
        self._inbound[rid] = frame.op
        if streaming:
            self._inbound_streaming.add(rid)
        if len(self._inbound) > self._max_inflight:
            self.send_error(rid, ErrorCode.BUSY,
                            f"more than {self._max_inflight} requests open on "
                            f"this connection; retry later")
            return None
        if streaming and frame.op not in messages.STREAMING_REQUESTS:
            raise FrameError(ErrorCode.PROTOCOL, f"op {frame.op} cannot stream")
        try:
            message = messages.decode_request(frame.op, frame.payload)
        except RemoteError as err:
            self.send_error(rid, err.wire_code, err.message)
            return None
        return RequestReceived(rid, frame.op, message, frame.end)

    def _on_data(self, frame):
        rid = frame.request_id
        if rid in self._inbound_streaming:
            if frame.end:
                self._inbound_streaming.discard(rid)
            return RequestData(rid, frame.payload, frame.end)
        if rid in self._rejected_streams:
            if frame.end:
                self._rejected_streams.pop(rid, None)
            return None
        if rid in self._streaming_responses:
            if frame.end:
                self._finish_outbound(rid)
            return ResponseData(rid, frame.payload, frame.end)
        if rid in self._cancelled:
            return None
        raise FrameError(ErrorCode.PROTOCOL, f"DATA for request id {rid}, which is not open")

    def _on_response(self, frame):
        rid = frame.request_id
        op = self._outbound_requests.get(rid)
        if op is None:
            if rid in self._cancelled:
                return None
            raise FrameError(ErrorCode.PROTOCOL, f"RESPONSE for request id {rid}, which is not open")
        if frame.op != op:
            raise FrameError(ErrorCode.PROTOCOL, f"RESPONSE op {frame.op} answers op {op}")
        if not frame.end and op not in messages.STREAMING_RESPONSES:
            raise FrameError(ErrorCode.PROTOCOL, f"op {op} cannot stream a response")
        try:
            message = messages.decode_response(op, frame.payload)
        except RemoteError as err:  # a bad body fails its request only
            if frame.end:
                self._finish_outbound(rid)
            else:
                self.cancel(rid)  # and drops the DATA that would follow
            return ErrorReceived(rid, err)
        if frame.end:
            self._finish_outbound(rid)
        else:
            self._streaming_responses.add(rid)
        return ResponseReceived(rid, op, message, frame.end)

    def _on_error(self, frame):
        rid = frame.request_id
        if self._outbound_requests.get(rid) is None:
            if rid in self._cancelled:
                return None
            raise FrameError(ErrorCode.PROTOCOL, f"ERROR for request id {rid}, which is not open")
        self._finish_outbound(rid)
        try:
            body = messages.ErrorBody.decode(frame.payload)
        except RemoteError as err:
            return ErrorReceived(rid, err)
        return ErrorReceived(rid, RemoteError(body.code, body.message))

    def _on_cancel(self, frame):
        rid = frame.request_id
        if rid not in self._inbound:
            return None  # already answered: the cancel crossed our answer
        if rid in self._inbound_streaming:
            self._reject_stream(rid)
        self._finish_inbound(rid)
        return RequestCancelled(rid)

    # ---- bookkeeping -------------------------------------------------------

    def _reject_stream(self, rid: int) -> None:
        """Drop the rest of a stream we answered early. The set is bounded: a
        peer that leaves more than MAX_INFLIGHT of them unfinished has its
        oldest forgotten, and DATA for a forgotten id closes the connection."""
        self._rejected_streams[rid] = None
        while len(self._rejected_streams) > self._max_inflight:
            self._rejected_streams.popitem(last=False)

    def _finish_inbound(self, rid: int) -> None:
        self._inbound.pop(rid, None)
        self._inbound_streaming.discard(rid)

    def _finish_outbound(self, rid: int) -> None:
        self._outbound_requests.pop(rid, None)
        self._outbound_streaming.discard(rid)
        self._streaming_responses.discard(rid)

    def _remember_cancelled(self, rid: int) -> None:
        self._cancelled[rid] = None
        self._streaming_responses.discard(rid)
        while len(self._cancelled) > CANCELLED_MEMORY:
            self._cancelled.popitem(last=False)


_HANDLERS = {
    FrameType.REQUEST: Session._on_request,
    FrameType.DATA: Session._on_data,
    FrameType.RESPONSE: Session._on_response,
    FrameType.ERROR: Session._on_error,
    FrameType.CANCEL: Session._on_cancel,
}
