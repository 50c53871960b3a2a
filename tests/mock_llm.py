#!/usr/bin/env python3
"""mock_llm.py: a loopback model server for khlua's tests and benchmark.

Speaks OpenAI Chat Completions (/v1/chat/completions), OpenAI Responses
(/v1/responses) and Anthropic Messages (/v1/messages), always as an SSE stream
(except the "whole" fault), and injects faults chosen by the URL:

    http://127.0.0.1:PORT/m/FAULT/N/TAG/v1/...

FAULT applies to the first N requests seen for (FAULT, N, TAG) (N = 0: to
every request); later ones get a normal reply.  TAG keeps tests apart.
GET /__log/TAG returns the requests seen for TAG (path, headers, body).

Binds 127.0.0.1 only, on an OS-chosen port; prints "PORT PID" on stdout's
first line.  Exits by itself after --lifetime seconds or --max-requests
requests, or on GET /__shutdown.  Python standard library only.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
COUNTS = {}
LOGS = {}
SEEN = [0]
ARGS = None

FAULTS = {
    "ok", "429ra", "429ms", "500", "502", "503load", "529", "quota", "midstream",
    "midstream_fatal", "truncate", "slowfirst", "drip", "malformed", "bytewise", "echokey",
    "noretry500", "retry400", "400", "whole", "vllm", "vllm_old", "length", "code", "big",
    "badutf8", "ladder", "401", "fail_after_probe",
}

# The model probe a run sends before its first round (policies/lib/models.lua
# M.PROBE_TEXT).  Under "ladder" it is answered without advancing the ladder
# (a 404 when no family has the model's name, like an unknown model); under
# "fail_after_probe" it is answered and every other request gets a 400.
PROBE_TEXT = "Reply with the single word OK."

# "ladder": replies from --ladder DIR, a folder of model families, each a
# folder of steps (01/, 02/, ...) holding one replay record (reply.json with a
# "text").  The body's model names the family; the k-th request for
# (tag, model) gets step k, the last step repeating (the replay ladder of
# tests/fixtures/replay/ctl, served over HTTP), each after --ladder-delay
# seconds.
LADDER_COUNTS = {}


def ladder_text(tag, model):
    fam = os.path.join(ARGS.ladder or "", model)
    if not ARGS.ladder or not os.path.isdir(fam):
        return None
    steps = sorted(d for d in os.listdir(fam) if os.path.isdir(os.path.join(fam, d)))
    if not steps:
        return None
    with LOCK:
        k = LADDER_COUNTS.get((tag, model), 0)
        LADDER_COUNTS[(tag, model)] = k + 1
    with open(os.path.join(fam, steps[min(k, len(steps) - 1)], "reply.json")) as f:
        return json.load(f)["text"]


def reply_text(dialect, prompt, fault):
    if fault == "code":
        return ("Here is the kernel.\n\n```cuda\n__global__ void k(float *x) { x[0] = 1.0f; }\n"
                "```\n\n```json\n{\"launches\": [{\"kernel\": \"k\", \"grid\": \"1\", "
                "\"block\": \"1\"}]}\n```\n")
    if fault == "big":
        return "0123456789abcdef" * 4096
    return "Hello from %s: %s" % (dialect, prompt[-60:])


def chunks_of(s, n=7):
    return [s[i:i + n] for i in range(0, len(s), n)] or [""]


def prompt_of(dialect, body):
    parts = []
    if dialect == "responses":
        if body.get("instructions"):
            parts.append(body["instructions"])
        for m in body.get("input", []):
            for c in m.get("content", []):
                parts.append(c.get("text", ""))
    else:
        if dialect == "anthropic":
            for b in body.get("system", []) or []:
                parts.append(b.get("text", ""))
        for m in body.get("messages", []):
            c = m.get("content")
            if isinstance(c, str):
                parts.append(c)
            else:
                for b in c or []:
                    parts.append(b.get("text", ""))
    return "".join(parts)


def sse(event, obj):
    data = obj if isinstance(obj, str) else json.dumps(obj)
    if event:
        return "event: %s\ndata: %s\n\n" % (event, data)
    return "data: %s\n\n" % data


def stream_events(dialect, text, n_in, fault):
    """The list of SSE event strings for a normal reply (faults edit it)."""
    pieces = chunks_of(text, 64 if fault == "big" else 7)
    n_out = len(text)
    finish = "length" if fault == "length" else None
    ev = []
    if dialect == "chat":
        ev.append(": keep-alive\n\n")
        ev.append(sse(None, {"object": "chat.completion.chunk",
                             "choices": [{"index": 0, "delta": {"role": "assistant"},
                                          "finish_reason": None}]}))
        if fault in ("vllm", "vllm_old"):
            key = "reasoning" if fault == "vllm" else "reasoning_content"
            ev.append(sse(None, {"choices": [{"index": 0, "delta": {key: "thinking..."}}]}))
        for p in pieces:
            ev.append(sse(None, {"object": "chat.completion.chunk",
                                 "choices": [{"index": 0, "delta": {"content": p},
                                              "finish_reason": None}]}))
        ev.append(sse(None, {"choices": [{"index": 0, "delta": {},
                                          "finish_reason": finish or "stop"}]}))
        usage = {"prompt_tokens": n_in, "completion_tokens": n_out,
                 "total_tokens": n_in + n_out,
                 "prompt_tokens_details": {"cached_tokens": 5},
                 "completion_tokens_details": {"reasoning_tokens": 3}}
        if fault == "vllm":
            ev.append(sse(None, {"choices": None, "usage": usage}))
        else:
            ev.append(sse(None, {"choices": [], "usage": usage}))
        ev.append(sse(None, "[DONE]"))
    elif dialect == "responses":
        ev.append(sse("response.created", {"type": "response.created",
                                           "response": {"status": "in_progress"}}))
        for i, p in enumerate(pieces):
            ev.append(sse("response.output_text.delta",
                          {"type": "response.output_text.delta", "sequence_number": i,
                           "item_id": "m1", "output_index": 0, "content_index": 0,
                           "delta": p}))
        resp = {"status": "incomplete" if finish else "completed",
                "usage": {"input_tokens": n_in, "output_tokens": n_out,
                          "input_tokens_details": {"cached_tokens": 5},
                          "output_tokens_details": {"reasoning_tokens": 3},
                          "total_tokens": n_in + n_out}}
        if finish:
            resp["incomplete_details"] = {"reason": "max_output_tokens"}
        kind = "response.incomplete" if finish else "response.completed"
        ev.append(sse(kind, {"type": kind, "response": resp}))
    else:
        ev.append(sse("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "role": "assistant", "content": [],
            "usage": {"input_tokens": n_in - 7, "cache_read_input_tokens": 5,
                      "cache_creation_input_tokens": 2, "output_tokens": 1}}}))
        ev.append(sse("content_block_start", {"type": "content_block_start", "index": 0,
                                              "content_block": {"type": "text", "text": ""}}))
        ev.append(sse("ping", {"type": "ping"}))
        for p in pieces:
            ev.append(sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "text_delta", "text": p}}))
        ev.append(sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        ev.append(sse("message_delta", {"type": "message_delta",
                                        "delta": {"stop_reason": "max_tokens" if finish
                                                  else "end_turn"},
                                        "usage": {"output_tokens": n_out}}))
        ev.append(sse("message_stop", {"type": "message_stop"}))
    return ev


def error_body(dialect, status, etype, message, code=None):
    if dialect == "anthropic":
        b = {"type": "error", "error": {"type": etype, "message": message},
             "request_id": "req_mock"}
        if code:
            b["error"]["details"] = {"error_code": code}
        return b
    return {"error": {"message": message, "type": etype, "param": None,
                      "code": code if code else etype}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def count_request(self):
        with LOCK:
            SEEN[0] += 1
            if SEEN[0] >= ARGS.max_requests:
                threading.Thread(target=lambda: (time.sleep(0.2), os._exit(0)),
                                 daemon=True).start()

    def send_json(self, status, obj, headers=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self):
        self.count_request()
        if self.path == "/__shutdown":
            self.send_json(200, {"bye": True})
            threading.Thread(target=lambda: (time.sleep(0.1), os._exit(0)), daemon=True).start()
            return
        if self.path.startswith("/__log/"):
            tag = self.path[len("/__log/"):]
            with LOCK:
                self.send_json(200, LOGS.get(tag, []))
            return
        self.send_json(404, {"error": {"message": "not found", "type": "not_found"}})

    def chunk(self, s):
        b = s.encode() if isinstance(s, str) else s
        if not b:
            return
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
        self.wfile.flush()

    def do_POST(self):
        self.count_request()
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        parts = self.path.split("/")
        fault, nfault, tag = "ok", 0, "default"
        if len(parts) > 4 and parts[1] == "m":
            fault, nfault, tag = parts[2], int(parts[3]), parts[4]
        if fault not in FAULTS:
            self.send_json(400, {"error": {"message": "unknown fault " + fault}})
            return
        if self.path.endswith("/chat/completions"):
            dialect = "chat"
        elif self.path.endswith("/responses"):
            dialect = "responses"
        elif self.path.endswith("/messages"):
            dialect = "anthropic"
        else:
            self.send_json(404, {"error": {"message": "no such endpoint", "type": "not_found"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self.send_json(400, error_body(dialect, 400, "invalid_request_error", "bad JSON"))
            return
        with LOCK:
            LOGS.setdefault(tag, []).append({"path": self.path, "body": body,
                                             "headers": {k.lower(): v for k, v in
                                                         self.headers.items()},
                                             "t": time.time()})
            key = (fault, nfault, tag)
            COUNTS[key] = COUNTS.get(key, 0) + 1
            active = nfault == 0 or COUNTS[key] <= nfault
        if not active:
            fault = "ok"
        self.tag = tag
        self.serve(dialect, body, fault)

    def serve(self, dialect, body, fault):
        if fault == "429ra":
            return self.send_json(429, error_body(dialect, 429, "rate_limit_error", "slow down"),
                                  {"retry-after": "1"})
        if fault == "429ms":
            return self.send_json(429, error_body(dialect, 429, "rate_limit_error", "slow down"),
                                  {"retry-after-ms": "300", "retry-after": "30"})
        if fault in ("500", "502"):
            return self.send_json(int(fault), error_body(dialect, 500, "server_error", "boom"))
        if fault == "503load":
            return self.send_json(503, {"error": {"code": 503, "message": "Loading model",
                                                  "type": "unavailable_error"}})
        if fault == "529":
            return self.send_json(529, error_body(dialect, 529, "overloaded_error", "Overloaded"))
        if fault == "quota":
            if dialect == "anthropic":
                return self.send_json(429, error_body(dialect, 429, "rate_limit_error",
                                                      "spend limit reached",
                                                      "enforced_spend_limit_reached"))
            return self.send_json(429, error_body(dialect, 429, "insufficient_quota",
                                                  "You exceeded your current quota",
                                                  "insufficient_quota"))
        if fault == "echokey":
            auth = self.headers.get("Authorization") or self.headers.get("x-api-key") or ""
            return self.send_json(401, error_body(dialect, 401, "authentication_error",
                                                  "Incorrect API key provided: " + auth))
        if fault == "noretry500":
            return self.send_json(500, error_body(dialect, 500, "server_error", "no retry"),
                                  {"x-should-retry": "false"})
        if fault == "retry400":
            return self.send_json(400, error_body(dialect, 400, "invalid_request_error", "odd"),
                                  {"x-should-retry": "true"})
        if fault == "401":
            return self.send_json(401, error_body(dialect, 401, "authentication_error",
                                                  "invalid x-api-key"))
        if fault in ("ladder", "fail_after_probe") and prompt_of(dialect, body).endswith(PROBE_TEXT):
            if fault == "ladder" and not os.path.isdir(os.path.join(ARGS.ladder or "",
                                                                    str(body.get("model", "")))):
                return self.send_json(404, error_body(dialect, 404, "not_found_error",
                                                      "model: " + str(body.get("model", ""))))
            fault = "ok"
        if fault == "fail_after_probe":
            fault = "400"
        if fault == "400":
            return self.send_json(400, error_body(dialect, 400, "invalid_request_error",
                                                  "temperature and top_p cannot both be "
                                                  "specified"))
        prompt = prompt_of(dialect, body)
        text = reply_text(dialect, prompt, fault)
        if fault == "ladder":
            # a model that takes its time (--ladder-delay): the controller's
            # concurrency is measured against it
            time.sleep(ARGS.ladder_delay)
            text = ladder_text(getattr(self, "tag", "default"), str(body.get("model", "")))
            if text is None:
                return self.send_json(404, error_body(dialect, 404, "not_found_error",
                                                      "no ladder family for this model"))
            fault = "ok"
        n_in = len(prompt) + 10  # Anthropic reports 7 of them as cached
        if fault == "whole":
            if dialect == "chat":
                obj = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": n_in, "completion_tokens": len(text)}}
            elif dialect == "responses":
                obj = {"status": "completed", "output": [{"type": "message", "content": [
                    {"type": "output_text", "text": text}]}],
                    "usage": {"input_tokens": n_in, "output_tokens": len(text)}}
            else:
                obj = {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                       "usage": {"input_tokens": n_in, "output_tokens": len(text)}}
            return self.send_json(200, obj, {"x-request-id": "req_whole"})
        events = stream_events(dialect, text, n_in, fault)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("x-request-id" if dialect != "anthropic" else "request-id", "req_mock_1")
        self.send_header("x-ratelimit-remaining-requests", "99")
        self.send_header("anthropic-ratelimit-requests-remaining", "98")
        self.end_headers()
        if fault in ("midstream", "midstream_fatal"):
            etype = "overloaded_error" if fault == "midstream" else "invalid_request_error"
            if dialect == "chat":
                err = sse(None, {"error": {"message": "mid-stream failure", "type": etype}})
            elif dialect == "responses":
                err = sse("error", {"type": "error", "code": etype if fault == "midstream_fatal"
                                    else "server_is_overloaded", "message": "mid-stream failure"})
            else:
                err = sse("error", {"type": "error", "error": {"type": etype,
                                                                "message": "mid-stream failure"}})
            events = events[:3] + [err]
        if fault == "badutf8" and dialect == "chat":
            events = events[:2] + [b'data: {"choices":[{"index":0,"delta":{"content":"bad \xff '
                                   b'byte "}}]}\n\n'] + events[2:]
        if fault == "malformed":
            events = events[:2] + ["data: {not json at all\n\n"] + events[2:]
        if fault == "slowfirst":
            time.sleep(0.6)
        try:
            for i, e in enumerate(events):
                if fault == "truncate" and i == 4:
                    self.chunk(e[:len(e) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if fault == "drip" and i == 2:
                    time.sleep(3)
                if fault == "bytewise":
                    for b in e.encode():
                        self.chunk(bytes([b]))
                else:
                    self.chunk(e)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lifetime", type=float, default=120.0)
    ap.add_argument("--max-requests", type=int, default=100000)
    ap.add_argument("--ladder", default=None, help="folder of reply ladders (fault 'ladder')")
    ap.add_argument("--ladder-delay", type=float, default=0.0,
                    help="seconds before each ladder reply (not the probe's)")
    ARGS = ap.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=lambda: (time.sleep(ARGS.lifetime), os._exit(0)),
                     daemon=True).start()
    sys.stdout.write("%d %d\n" % (srv.server_address[1], os.getpid()))
    sys.stdout.flush()
    srv.serve_forever()


if __name__ == "__main__":
    main()
