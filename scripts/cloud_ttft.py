#!/usr/bin/env python3
"""Cloud lane vs curl against one loopback server streaming a fixed answer.

Starts a small OpenAI-compatible SSE server on 127.0.0.1 (stdlib only), then
alternates N runs of `edgecloud cloud` and N runs of curl against it and
prints medians and ratios (edgecloud / curl) of:

  * outside view, the same for both: wall time from spawning the process to
    the first answer text on its stdout (time to first token) and to its exit
    (total). edgecloud streams the text to stdout; curl prints the raw
    events, and its first token is when the first piece of text shows up.
  * inside view: edgecloud's own ttft_ms / total_ms (from --json) against
    curl's time_starttransfer / time_total (-w). curl's figure is first
    byte, not first token; the server sends a role-only chunk first and the
    first text right after it, so the two are within microseconds.

Usage:
  scripts/cloud_ttft.py [--bin PATH] [--runs 50] [--pieces 64] [--token-delay-ms 0]

PATH defaults to $CARGO_TARGET_DIR/release/edgecloud (or target/release).
"""

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIRST_PIECE = "Once"


def pieces(n):
    words = [FIRST_PIECE] + [" upon", " a", " time", ",", " there", " was", " a", " lane"] * n
    return words[:n]


def chunk(obj):
    return json.dumps(obj, separators=(",", ":"))


def make_events(n):
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "bench"}
    out = [chunk({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})]
    for p in pieces(n):
        out.append(chunk({**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}))
    out.append(chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out.append(chunk({**base, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}}))
    out.append("[DONE]")
    return [f"data: {e}\n\n".encode() for e in out]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    events = []
    delay = 0.0

    def setup(self):
        super().setup()
        # Small writes must leave at once (no Nagle stalls against delayed ACKs).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        head = (
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        ).encode()
        framed = [b"%x\r\n%s\r\n" % (len(e), e) for e in self.events]
        # Headers, the role-only chunk and the first text go out together.
        self.wfile.write(head + framed[0] + framed[1])
        for f in framed[2:]:
            if self.delay:
                time.sleep(self.delay)
            self.wfile.write(f)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that exits right after [DONE] may reset the kept-alive
        # connection; that is not an error worth a traceback here.
        pass


def timed(cmd, first_marker):
    """Wall seconds to the first stdout bytes holding first_marker, and to exit."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    fd = p.stdout.fileno()
    seen, first = b"", None
    while True:
        data = os.read(fd, 65536)
        if not data:
            break
        seen += data
        if first is None:
            if first_marker in seen:
                first = time.perf_counter() - t0
    p.wait()
    total = time.perf_counter() - t0
    if p.returncode != 0 or first is None:
        sys.exit(f"run failed (exit {p.returncode}): {' '.join(cmd)}")
    return first, total, seen


def med(xs):
    return statistics.median(xs) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    ap.add_argument("--bin", default=os.path.join(target, "release", "edgecloud"))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--pieces", type=int, default=64)
    ap.add_argument("--token-delay-ms", type=float, default=0.0)
    args = ap.parse_args()
    curl = shutil.which("curl")
    if not curl:
        sys.exit("curl not found")

    Handler.events = make_events(args.pieces)
    Handler.delay = args.token_delay_ms / 1e3
    server = QuietServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 256, "stream": True, "stream_options": {"include_usage": True}})

    ec = [args.bin, "cloud", "--base-url", base, "--cloud-model", "bench", "--prompt", "hi",
          "--api-key-env", "EDGECLOUD_BENCH_NO_KEY"]
    cu = [curl, "-sN", "--no-buffer", "-X", "POST", "-H", "content-type: application/json",
          "--data", body, base + "/chat/completions"]
    expected = "".join(pieces(args.pieces))

    # Warm-up (page cache, first-run costs), not measured.
    for _ in range(3):
        timed(ec, FIRST_PIECE.encode())
        timed(cu, FIRST_PIECE.encode())

    out = {k: [] for k in ("ec_first", "ec_total", "cu_first", "cu_total",
                           "ec_in_ttft", "ec_in_total", "cu_in_ttfb", "cu_in_total",
                           "ec_in_connect", "cu_in_connect", "ec_in_ttfb", "cu_in_pretransfer")}
    for _ in range(args.runs):
        f, t, text = timed(ec, FIRST_PIECE.encode())
        if text.decode().strip() != expected:
            sys.exit("edgecloud printed an unexpected answer")
        out["ec_first"].append(f)
        out["ec_total"].append(t)
        f, t, _ = timed(cu, f'"content":"{FIRST_PIECE}"'.encode())
        out["cu_first"].append(f)
        out["cu_total"].append(t)
        r = json.loads(subprocess.run(ec + ["--json"], capture_output=True, check=False).stdout)
        if r["status"] != "completed" or r["text"] != expected:
            sys.exit(f"edgecloud --json: {r}")
        out["ec_in_ttft"].append(r["ttft_ms"] / 1e3)
        out["ec_in_total"].append(r["total_ms"] / 1e3)
        out["ec_in_connect"].append((r.get("connect_ms") or 0.0) / 1e3)
        out["ec_in_ttfb"].append((r.get("ttfb_ms") or 0.0) / 1e3)
        w = subprocess.run(cu + ["-o", "/dev/null", "-w",
                                 "%{time_starttransfer} %{time_total} %{time_connect} %{time_pretransfer}"],
                           capture_output=True, text=True, check=True).stdout.split()
        out["cu_in_ttfb"].append(float(w[0]))
        out["cu_in_total"].append(float(w[1]))
        out["cu_in_connect"].append(float(w[2]))
        out["cu_in_pretransfer"].append(float(w[3]))
    # Inside one long-lived process (where the harness runs): the lane's
    # own example against curl fetching many URLs in one invocation (one
    # kept-alive connection).
    inproc = os.path.join(os.path.dirname(args.bin), "examples", "cloud_ttft_inprocess")
    inproc_out = None
    if os.path.exists(inproc):
        inproc_out = subprocess.run([inproc, base, str(args.runs)], capture_output=True,
                                    text=True, check=True).stdout
        urls = []
        for _ in range(args.runs + 1):
            urls += ["-o", "/dev/null", base + "/chat/completions"]
        w = subprocess.run(cu[:-1] + ["-w", "%{time_starttransfer}\n"] + urls,
                           capture_output=True, text=True, check=True).stdout.split()
        out["cu_pooled_ttfb"] = [float(x) for x in w[1:]]
    server.shutdown()

    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cpus; "
          f"runs: {args.runs} each, interleaved; response: {args.pieces} pieces, "
          f"token delay {args.token_delay_ms} ms")
    print(f"{'median ms':<34}{'edgecloud':>10}{'curl':>10}{'ratio':>8}")
    rows = [
        ("process: spawn -> first token", "ec_first", "cu_first"),
        ("process: spawn -> exit", "ec_total", "cu_total"),
        ("in-process: first token (curl: byte)", "ec_in_ttft", "cu_in_ttfb"),
        ("in-process: total", "ec_in_total", "cu_in_total"),
    ]
    for label, a, b in rows:
        ma, mb = med(out[a]), med(out[b])
        print(f"{label:<34}{ma:>10.3f}{mb:>10.3f}{ma / mb:>8.2f}")
    # Where the in-process time goes, stage by stage (medians; the stages
    # are not quite the same events on both sides: edgecloud's connect ends
    # when its connector has the socket, curl's when the TCP handshake is
    # done; curl's pretransfer is "about to send", which edgecloud does not
    # report).
    print("in-process stages (median ms)     edgecloud      curl")
    print(f"  connected                       {med(out['ec_in_connect']):>10.3f}{med(out['cu_in_connect']):>10.3f}")
    print(f"  request ready to send           {'-':>10}{med(out['cu_in_pretransfer']):>10.3f}")
    print(f"  first byte / headers            {med(out['ec_in_ttfb']):>10.3f}{med(out['cu_in_ttfb']):>10.3f}")
    print(f"  first token                     {med(out['ec_in_ttft']):>10.3f}{'-':>10}")
    if inproc_out:
        print(inproc_out.rstrip())
        print(f"curl, one process, kept-alive connection: first byte median "
              f"{med(out['cu_pooled_ttfb']):.3f} ms")
        pooled = dict(kv.split("=") for kv in inproc_out.strip().splitlines()[-1].split()[1:])
        print(f"RESULT2 pooled_ttft_ms={pooled['pooled_ttft_ms']} curl_pooled_ttfb_ms="
              f"{med(out['cu_pooled_ttfb']):.4f} first_ttft_ms={pooled['first_ttft_ms']} "
              f"fresh_ttft_ms={pooled['fresh_ttft_ms']} "
              f"reqwest_pooled_ttft_ms={pooled.get('reqwest_pooled_ttft_ms', 'nan')} "
              f"raw_pooled_ttft_ms={pooled.get('raw_pooled_ttft_ms', 'nan')}")
    ttft, ttfb = sorted(out["ec_in_ttft"]), sorted(out["cu_in_ttfb"])
    p90 = lambda v: v[min(len(v) - 1, int(0.9 * len(v)))] * 1e3
    print(f"RESULT cloud_ttft_ms={med(out['ec_in_ttft']):.4f} curl_ttfb_ms={med(out['cu_in_ttfb']):.4f} "
          f"ratio={med(out['ec_in_ttft']) / med(out['cu_in_ttfb']):.4f} "
          f"cloud_ttft_p90_ms={p90(ttft):.4f} curl_ttfb_p90_ms={p90(ttfb):.4f} "
          f"cloud_connect_ms={med(out['ec_in_connect']):.4f} curl_connect_ms={med(out['cu_in_connect']):.4f} "
          f"cloud_ttfb_ms={med(out['ec_in_ttfb']):.4f} runs={args.runs}")


if __name__ == "__main__":
    main()
