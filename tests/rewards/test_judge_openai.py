"""The `openai` judge backend against a real HTTP server on 127.0.0.1 (started here, bounded to 200
requests and 60 s): request body, key header, order of replies, retries with backoff on 500 / timeouts /
malformed JSON, no retry on 400, the concurrency limit, caching (zero requests the second time), on_fail."""

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from covey.rewards import get_reward
from covey.rewards.judge.backends import JudgeRequest, OpenAIBackend

MAX_REQUESTS = 200


class Server:
    """Replies by the last word of the user message: "yes"/"no" answer it; "flaky" fails with 500 on the first
    try; "slow" sleeps past the client timeout on the first try; "garbled" sends malformed JSON on the first try;
    "rejected" always answers 400; "down" always 500; "babble" answers something no parser reads."""

    def __init__(self):
        self.seen, self.bodies, self.headers = {}, [], []
        self.inflight = self.max_inflight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    word = body["messages"][-1]["content"].split()[-1]
                    tries = server.seen[word] = server.seen.get(word, 0) + 1
                    server.inflight += 1
                    server.max_inflight = max(server.max_inflight, server.inflight)
                    over = len(server.bodies) > MAX_REQUESTS
                try:
                    time.sleep(0.05)
                    if over or word == "down" or (word == "flaky" and tries == 1):
                        return self._send(500, b'{"error": "server error"}')
                    if word == "rejected":
                        return self._send(400, b'{"error": "bad request"}')
                    if word == "slow" and tries == 1:
                        time.sleep(1.5)
                    if word == "garbled" and tries == 1:
                        return self._send(200, b'{"choices": [')
                    text = {"babble": "hmm, hard to say"}.get(word, "NO" if word == "no" else "YES")
                    self._send(200, json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode())
                finally:
                    with server.lock:
                        server.inflight -= 1

            def _send(self, code, data):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.timer = threading.Timer(60.0, self.httpd.shutdown)  # stops by itself if a test hangs

    def __enter__(self):
        self.thread.start()
        self.timer.start()
        return self

    def __exit__(self, *exc):
        self.timer.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test-123")
    with Server() as s:
        yield s


def backend(server, **kw):
    params = dict(base_url=server.url, model="judge-1", api_key_env="JUDGE_TEST_KEY", timeout_s=1.0, retries=2,
                  backoff_s=0.01)
    params.update(kw)
    return OpenAIBackend(**params)


def req(word, **kw):
    return JudgeRequest((("system", "be fair"), ("user", f"is it {word}")), **kw)


def test_request_body_headers_and_order(server):
    words = ["yes", "no", "yes", "no", "no", "yes"]
    replies = backend(server, concurrency=3).complete([req(w, max_new_tokens=4, stop=("\n",), seed=7) for w in words])
    assert [r.text for r in replies] == ["NO" if w == "no" else "YES" for w in words]  # request order, not finish order
    body = server.bodies[0]
    assert body["model"] == "judge-1" and body["max_tokens"] == 4 and body["temperature"] == 0.0
    assert body["stop"] == ["\n"] and body["seed"] == 7 and body["messages"][0] == {"role": "system", "content": "be fair"}
    assert server.headers[0]["Authorization"] == "Bearer sk-test-123"
    assert 1 < server.max_inflight <= 3


def test_retries_then_success_and_no_retry_on_400(server):
    b = backend(server)
    flaky, slow, garbled, rejected, down = b.complete([req(w) for w in ("flaky", "slow", "garbled", "rejected", "down")])
    assert (flaky.text, flaky.http_errors) == ("YES", 1)
    assert (slow.text, slow.http_errors) == ("YES", 1)  # the first try timed out (1 s), the retry answered
    assert (garbled.text, garbled.http_errors) == ("YES", 1)
    assert rejected.text is None and "HTTP 400" in rejected.error and server.seen["rejected"] == 1
    assert down.text is None and "HTTP 500" in down.error and server.seen["down"] == 3  # 1 + retries=2


def test_judge_reward_caches_counts_failures_and_applies_on_fail(server, tmp_path):
    params = dict(backend={"kind": "openai", "base_url": server.url, "model": "judge-1", "retries": 1, "backoff_s": 0.01,
                           "timeout_s": 2.0},
                  template="Answer {answer}: is it {completion}", parser="yes_no", parse_retries=1,
                  cache_file=str(tmp_path / "judge_cache.sqlite"))
    reward = get_reward("judge", **params)
    completions = ["yes", "no", "babble", "down", "yes"]
    out = reward(prompts=["q"] * 5, completions=completions, answer=["a"] * 5)
    assert out.scores[:3] == [1.0, 0.0, pytest.approx(math.nan, nan_ok=True)] and math.isnan(out.scores[3])
    assert out.scores[4] == 1.0
    assert out.metrics["parse_fail_frac"] == [0, 0, 1, 0, 0] and out.metrics["backend_error_frac"] == [0, 0, 0, 1, 0]
    assert server.seen["babble"] == 2  # asked again once (parse_retries=1), at the retry temperature
    assert [b["temperature"] for b in server.bodies if b["messages"][-1]["content"].endswith("babble")] == [0.0, 0.7]
    n = len(server.bodies)
    assert n == 2 + 2 + 2  # yes (twice the same prompt: asked once), no, babble x2, down x2 (1 + retries=1)

    again = get_reward("judge", **params)  # a new process would start like this: the SQLite file serves the hits
    out2 = again(prompts=["q"] * 3, completions=["yes", "no", "yes"], answer=["a"] * 3)
    assert out2.scores == [1.0, 0.0, 1.0] and len(server.bodies) == n and out2.metrics["cache_hit_frac"] == [1.0] * 3

    for on_fail, want in (("zero", 0.0), ("tie", 0.5)):
        r = get_reward("judge", **{**params, "on_fail": on_fail, "cache_file": None})
        assert r(prompts=["q"], completions=["babble"], answer=["a"]).scores == [want]


def test_config_errors_before_any_request(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="no base_url.*no default host"):
        get_reward("judge", backend={"kind": "openai", "model": "m"})
    with pytest.raises(ValueError, match="http"):
        get_reward("judge", backend={"kind": "openai", "model": "m", "base_url": "127.0.0.1:8000"})
    with pytest.raises(ValueError, match="only the local backend"):
        get_reward("judge", backend={"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:9"}, parser="yes_no_logits")
    with pytest.raises(ValueError, match="unexpected keyword"):
        get_reward("judge", backend={"kind": "openai", "model": "m", "base_url": "http://x", "hots": 1})
    with pytest.raises(ValueError, match="judge backend policy.*unexpected keyword"):
        get_reward("judge", backend={"kind": "policy", "model": "m"})  # the policy judges: it takes no model
    with pytest.raises(ValueError, match="on_fail"):
        get_reward("judge", backend={"kind": "openai", "model": "m", "base_url": "http://x"}, on_fail="skip")
    with pytest.raises(ValueError, match="no meaning for parser 'boxed_int'"):
        get_reward("judge", backend={"kind": "openai", "model": "m", "base_url": "http://x"}, parser="boxed_int",
                   template="step_error_index", on_fail="tie")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert get_reward("judge", backend={"kind": "openai", "model": "m"}).judge.backend.base_url == "http://127.0.0.1:9/v1"


class Hostile:
    """A server that redirects (to `other_url`), trickles, floods or nests, as `mode` says."""

    def __init__(self, other_url=""):
        self.hits = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.hits.append(dict(self.headers))
                word = self.path.rsplit("/", 1)[-1] if "evil" in self.path else ""
                body = json.dumps({"choices": [{"message": {"content": "YES"}}]}).encode()
                if word == "evil":  # the other origin: a verdict of its own
                    return self._reply(200, body)
                mode = outer.mode
                if mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", other_url + "/evil")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif mode == "trickle_body":  # one byte every 0.3 s: never a socket timeout
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    for b in body:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(0.3)
                elif mode == "trickle_head":
                    for b in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 200:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(0.3)
                elif mode == "flood":  # no Content-Length, 3 MB
                    self.send_response(200)
                    self.end_headers()
                    for _ in range(48):
                        self.wfile.write(b" " * 65536)
                elif mode == "declared":
                    self.send_response(200)
                    self.send_header("Content-Length", str(4 << 30))
                    self.end_headers()
                elif mode == "deep":
                    self._reply(200, b"[" * 100_000 + b"]" * 100_000)

            def _reply(self, code, data):
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.mode = ""
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_hostile_servers_cost_one_deadline_and_never_get_the_key(monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test-123")
    evil = Hostile()
    host = Hostile(other_url=evil.url)
    try:
        b = OpenAIBackend(base_url=host.url, model="m", api_key_env="JUDGE_TEST_KEY", timeout_s=1.5, retries=1,
                          backoff_s=0.01, max_reply_bytes=1 << 20)
        want = {"redirect": "RedirectRefused: HTTP 302 redirect to " + evil.url.rsplit("/", 1)[0] + " refused",
                "trickle_body": "DeadlineExceeded: no complete reply within 1.5 s",
                "trickle_head": "DeadlineExceeded: no complete reply within 1.5 s",
                "flood": "BodyTooLarge: reply longer than max_reply_bytes=1048576",
                "declared": f"BodyTooLarge: reply of {4 << 30} bytes (max_reply_bytes=1048576)",
                "deep": "RecursionError"}
        for mode, error in want.items():
            host.mode, t0 = mode, time.monotonic()
            (reply,) = b.complete([req("x")])
            took = time.monotonic() - t0
            assert reply.text is None and reply.error.startswith(error), (mode, reply.error)
            retried = mode not in ("redirect", "flood", "declared")
            assert reply.http_errors == 1 + retried, mode
            assert took < (1.5 + 0.5) * (1 + retried), (mode, took)  # one deadline per attempt, not per byte
        assert evil.hits == []  # the other origin never saw a request, let alone the key
        assert all(h.get("Authorization") == "Bearer sk-test-123" for h in host.hits)
    finally:
        host.close()
        evil.close()


def test_the_cache_key_holds_everything_that_changes_the_verdict():
    from covey.rewards.judge.backends import LocalBackend
    from covey.rewards.judge.core import Judge

    def key(backend):
        judge = Judge(backend, template="score_0_10", parser="number_in_range")
        return judge._key(judge._request({"prompt": "q", "completion": "c", "answer": ""}, 0.0, 0))

    plain = OpenAIBackend(base_url="http://127.0.0.1:9/v1", model="m")
    thinking = OpenAIBackend(base_url="http://127.0.0.1:9/v1", model="m", extra_body={"reasoning_effort": "high"})
    again = OpenAIBackend(base_url="http://127.0.0.1:9/v1", model="m", extra_body={"reasoning_effort": "high"})
    assert key(plain) != key(thinking) == key(again)
    fp32, bf16 = LocalBackend("tiny-llama", dtype="fp32", device="cpu"), LocalBackend("tiny-llama", dtype="bf16", device="cpu")
    assert key(fp32) != key(bf16) and key(fp32) == key(LocalBackend("tiny-llama", dtype="float32", device="cpu"))
