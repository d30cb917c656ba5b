"""`dscore serve` through a real HTTP client (Python's http.client, in
threads), against itself and against transformers.

  (a) a byte-level GPT that dscore trains here (40 steps on the quickstart
      text) served with --batch-size 4: 32 requests (greedy and seeded
      sampling, 8 to 24 tokens, half streamed) sent at once complete with
      the texts they get one at a time, and a stream's chunks add up to
      the whole completion;
  (b) bad requests: a body that is not JSON, a negative max_tokens, an
      unknown field, an unknown path: 400/404 with the reason;
  (c) a client that disconnects mid-stream: the server goes on serving;
  (d) a full queue (--batch-size 1 --max-queue 1): extra requests get 429
      naming the queue, the rest complete;
  (e) --hf on a tiny random transformers Llama folder: greedy completions of
      token prompts equal transformers' generate(do_sample=False);
  and SIGTERM stops each server with exit code 0.
Prints check_* lines; exits non-zero on the first failure.
Usage: python check_serve.py <dscore binary> <scratch dir>
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

DSCORE = os.path.abspath(sys.argv[1])
SCRATCH = os.path.abspath(sys.argv[2])
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def fail(msg):
    print("check_serve FAILED: " + msg)
    sys.exit(1)


def path(*parts):
    return os.path.join(SCRATCH, *parts)


class Server:
    def __init__(self, *args):
        self.log = open(path("serve_%d.log" % int(time.time() * 1000)), "w+")
        self.proc = subprocess.Popen([DSCORE, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, cwd=SCRATCH)
        line = self.proc.stdout.readline()
        m = re.search(r"127\.0\.0\.1:(\d+)/", line)
        if not m:
            self.log.seek(0)
            fail("dscore serve %s did not start: %r\n%s" % (" ".join(args), line, self.log.read()))
        self.port = int(m.group(1))

    def request(self, method, target, body=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request(method, target, body=body if body is None or isinstance(body, str)
                  else json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode()
        c.close()
        return r.status, data

    def complete(self, body):
        status, data = self.request("POST", "/v1/completions", body)
        if status != 200:
            fail("completion %s: %d %s" % (body, status, data))
        if body.get("stream"):
            chunks = [json.loads(line[6:]) for line in data.split("\n\n")
                      if line.startswith("data: ") and line != "data: [DONE]"]
            if not data.rstrip().endswith("data: [DONE]"):
                fail("a stream did not end with [DONE]: %r" % data[-200:])
            choice = {"text": "".join(c["choices"][0]["text"] for c in chunks),
                      "tokens": [t for c in chunks for t in c["choices"][0]["tokens"]],
                      "finish_reason": chunks[-1]["choices"][0]["finish_reason"]}
            return choice
        return json.loads(data)["choices"][0]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        out = self.proc.stdout.read()
        if code != 0 or "stopped" not in out:
            fail("SIGTERM: exit %d, %r" % (code, out))


def train_gpt():
    config = {"train_batch_size": 16, "train_steps": 40, "seed": 3,
              "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
              "model": {"type": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 64,
                        "vocab_size": 256},
              "data": {"type": "text", "path": os.path.join(REPO, "configs/data/quickstart.txt")},
              "checkpoint_dir": path("gpt"), "save_interval": 40}
    with open(path("gpt.json"), "w") as f:
        json.dump(config, f)
    r = subprocess.run([DSCORE, "run", "--config", path("gpt.json")], capture_output=True, text=True)
    if r.returncode != 0:
        fail("training the gpt: %s" % r.stderr)


def requests_32():
    words = ["Once", "The cat", "In the", "She said", "A long time ago", "Then", "He", "It was"]
    out = []
    for i in range(32):
        body = {"prompt": words[i % 8] + " " * (i // 8), "max_tokens": 8 + (i % 5) * 4}
        if i % 3 == 0:
            body.update(temperature=0)
        else:
            body.update(temperature=0.9, top_p=0.9, top_k=40, seed=100 + i, repetition_penalty=1.1)
        if i % 2 == 1:
            body["stream"] = True
        out.append(body)
    return out


def check_concurrent(server):
    bodies = requests_32()
    alone = [server.complete(b) for b in bodies]
    with ThreadPoolExecutor(32) as pool:
        together = list(pool.map(server.complete, bodies))
    for b, a, t in zip(bodies, alone, together):
        if (a["text"], a["tokens"], a["finish_reason"]) != (t["text"], t["tokens"], t["finish_reason"]):
            fail("request %s: alone %r, with 31 others %r" % (b, a, t))
        if len(a["tokens"]) != b["max_tokens"] or a["finish_reason"] != "length":
            fail("request %s: %d tokens, finish_reason %s" % (b, len(a["tokens"]), a["finish_reason"]))
    for b, a in zip(bodies, alone):
        if b.get("stream"):
            whole = server.complete({k: v for k, v in b.items() if k != "stream"})
            if (whole["text"], whole["tokens"]) != (a["text"], a["tokens"]):
                fail("a stream's chunks %r != the whole completion %r" % (a, whole))
    print("check_serve_concurrent: 32 requests at once (16 streamed) complete with the texts they "
          "get alone")


def check_bad_requests(server):
    cases = [("POST", "/v1/completions", "not json", 400, "the request body"),
             ("POST", "/v1/completions", {"prompt": "a", "max_tokens": -1}, 400, "max_tokens"),
             ("POST", "/v1/completions", {"prompt": "a", "logit_bias": {}}, 400, "logit_bias"),
             ("POST", "/v1/completions", {"max_tokens": 3}, 400, "prompt"),
             ("GET", "/v2/nothing", None, 404, "/v2/nothing"),
             ("GET", "/v1/completions", None, 405, "not allowed")]
    for method, target, body, want, needle in cases:
        status, data = server.request(method, target, body)
        if status != want or needle not in json.loads(data)["error"]["message"]:
            fail("%s %s %r: %d %s (wanted %d naming %r)" % (method, target, body, status, data,
                                                           want, needle))
    print("check_serve_bad_requests: %d bad requests answered 400/404/405 with the reason" % len(cases))


def check_client_leaves(server):
    s = socket.create_connection(("127.0.0.1", server.port))
    body = json.dumps({"prompt": "Once", "max_tokens": 500, "stream": True, "temperature": 0})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
               % (len(body), body)).encode())
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    s.close()
    time.sleep(0.3)
    if server.proc.poll() is not None:
        fail("the server exited after a client left mid-stream")
    a = server.complete({"prompt": "Then", "max_tokens": 6, "temperature": 0})
    if len(a["tokens"]) != 6:
        fail("after a client left: %r" % a)
    print("check_serve_client_leaves: a client gone mid-stream, the server serves the next request")


def check_full_queue():
    server = Server("--checkpoint", path("gpt"), "--batch-size", "1", "--max-queue", "1")
    body = {"prompt": "Once", "max_tokens": 60, "temperature": 0}
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: server.request("POST", "/v1/completions", body), range(6)))
    full = [d for s, d in results if s == 429]
    done = [d for s, d in results if s == 200]
    if not full or not done or len(full) + len(done) != 6 or \
            "queue is full" not in json.loads(full[0])["error"]["message"]:
        fail("6 requests at a queue of 1: %s" % [(s, d[:80]) for s, d in results])
    server.stop()
    print("check_serve_full_queue: %d of 6 requests got 429 (queue full), %d completed"
          % (len(full), len(done)))


def check_hf_llama():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=176,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=64)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.save_pretrained(path("llama"))
    server = Server("--hf", path("llama"), "--batch-size", "3")
    prompts = [[5, 17, 3], [101, 7, 7, 250, 33, 9], [299, 0, 18, 40, 40, 8, 1], [8, 9]]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda p: server.complete({"prompt": p, "max_tokens": 16,
                                                        "temperature": 0}), prompts))
    for p, g in zip(prompts, got):
        with torch.no_grad():
            want = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                  max_new_tokens=16, do_sample=False)[0, len(p):].tolist()
        if g["tokens"] != want:
            fail("--hf llama, prompt %s: dscore %s, transformers %s" % (p, g["tokens"], want))
    server.stop()
    print("check_serve_hf_llama: 4 concurrent greedy completions equal transformers' generate()")


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    train_gpt()
    server = Server("--checkpoint", path("gpt"), "--batch-size", "4", "--max-queue", "64")
    check_concurrent(server)
    check_bad_requests(server)
    check_client_leaves(server)
    server.stop()
    check_full_queue()
    check_hf_llama()


if __name__ == "__main__":
    main()
