"""VLLMTeacher against a tiny local OpenAI-compatible server (127.0.0.1, a thread; no external network)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

from damc.teacher.backends import TeacherServerError, VLLMTeacher


class FakeVLLM(BaseHTTPRequestHandler):
    """Echoes each prompt as 4-character tokens with log-prob -(token index + 1) / 10."""

    mode = "ok"           # ok | no_logprobs | prompt_logprobs | bad_request
    fail_first = 0        # answer 503 to this many requests first
    requests: list = []

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        if type(self).fail_first > 0:
            type(self).fail_first -= 1
            return self._send(503, {"error": "overloaded"})
        if self.mode == "bad_request":
            return self._send(400, {"error": "model not found"})
        choices = []
        for i, prompt in enumerate(body["prompt"]):
            toks = [prompt[j:j + 4] for j in range(0, len(prompt), 4)]
            lps = [None] + [-(j + 1) / 10 for j in range(1, len(toks))]
            offs = list(range(0, len(prompt), 4))
            ch = {"index": i, "text": prompt + "x"}
            if self.mode == "ok":
                ch["logprobs"] = {"tokens": toks, "token_logprobs": lps, "text_offset": offs}
            elif self.mode == "prompt_logprobs":
                ch["logprobs"] = None
                ch["prompt_logprobs"] = [None] + [{str(j): {"logprob": lp, "decoded_token": t}}
                                                  for j, (t, lp) in enumerate(zip(toks[1:], lps[1:]))]
            else:
                ch["logprobs"] = None
            choices.append(ch)
        self._send(200, {"choices": list(reversed(choices))})  # out of order on purpose

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def server():
    FakeVLLM.mode, FakeVLLM.fail_first, FakeVLLM.requests = "ok", 0, []
    srv = HTTPServer(("127.0.0.1", 0), FakeVLLM)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Where is order 88412?"}]


def expected(prompt_len: int, action: str) -> np.ndarray:
    """Log-probs the fake server gives the tokens starting inside the action."""
    starts = [o for o in range(0, prompt_len + len(action), 4) if prompt_len <= o < prompt_len + len(action)]
    return np.array([-(o // 4 + 1) / 10 for o in starts])


def test_request_and_action_boundary_by_text_offset(server):
    t = VLLMTeacher(url=server, model="big-teacher", batch_size=2, retries=0)
    variants = [["<s>abc", "defgh"], ["<s>abc"], ["xy"]]
    action = 'get_order(order_id="88412")'
    lps, stats = t.score_segment_variants(variants, action)
    path, body = FakeVLLM.requests[0]
    assert path == "/v1/completions" and body["model"] == "big-teacher"
    assert body["echo"] is True and body["logprobs"] == 1 and body["max_tokens"] == 1
    assert body["prompt"] == ["<s>abcdefgh" + action, "<s>abc" + action]
    assert len(FakeVLLM.requests) == 2  # batch_size 2 → two requests for three variants
    for v, lp in zip(variants, lps):
        np.testing.assert_allclose(lp, expected(len("".join(v)), action))
    assert stats.n_forward == 3
    # the chat-message interface goes through the same path (plain template without a tokenizer)
    assert t.log_prob(MSGS, "ok(x=1)").shape[0] >= 1


def test_retries_after_503_with_backoff(server):
    FakeVLLM.fail_first = 2
    t = VLLMTeacher(url=server + "/v1", model="m", retries=3, backoff=0.01)
    lps, _ = t.score_segment_variants([["hello world "]], "answer")
    assert len(FakeVLLM.requests) == 3 and len(lps[0]) > 0


def test_gives_up_after_retries(server):
    FakeVLLM.fail_first = 10
    t = VLLMTeacher(url=server, model="m", retries=1, backoff=0.01)
    with pytest.raises(TeacherServerError, match="failed after 2 attempts.*503"):
        t.score_segment_variants([["p"]], "a")


def test_missing_prompt_logprobs_is_a_clear_error(server):
    FakeVLLM.mode = "no_logprobs"
    t = VLLMTeacher(url=server, model="m", retries=0)
    with pytest.raises(TeacherServerError, match="no prompt log-probabilities"):
        t.score_segment_variants([["prompt "]], "action")


def test_vllm_prompt_logprobs_extension(server):
    FakeVLLM.mode = "prompt_logprobs"
    t = VLLMTeacher(url=server, model="m", retries=0)
    lps, _ = t.score_segment_variants([["abcdefgh"]], "ijkl")
    np.testing.assert_allclose(lps[0], [-0.3])


def test_client_error_is_not_retried(server):
    FakeVLLM.mode = "bad_request"
    t = VLLMTeacher(url=server, model="m", retries=3, backoff=0.01)
    with pytest.raises(TeacherServerError, match="HTTP 400"):
        t.score_segment_variants([["p"]], "a")
    assert len(FakeVLLM.requests) == 1


def test_connection_refused_retries_then_fails():
    t = VLLMTeacher(url="http://127.0.0.1:9", model="m", retries=1, backoff=0.01, timeout=2)
    with pytest.raises(TeacherServerError, match="ConnectionError"):
        t.score_segment_variants([["p"]], "a")
