#!/usr/bin/env python3
"""The official `anthropic` and `ollama` Python clients against a real
`edgecloud serve`.

Starts `edgecloud serve` on a free loopback port with a real model
(local-only) behind a bearer token, then calls it through each client as
a new user would, and checks what the client parsed:

  * anthropic: messages.create whole and streamed (the raw events and the
    messages.stream helper), a tool call then a tool_result turn,
    count_tokens (against the usage of the same request), the token sent
    as `x-api-key` (the client's way), an image refused as a 400 and an
    unknown model as a 404 in Anthropic's error shape
  * ollama: list, show (capabilities), ps, chat whole and streamed, chat
    with a Python function as a tool then its result, generate (with a
    system prompt, and raw), embed and the older embeddings, an option of
    the wrong type refused by name, pull refused with what to do instead;
    plus GET /api/version (the client has no call for it)

It prints one line per check and exits 1 if one failed. A client that is
not installed is skipped, saying so: `pip install anthropic ollama`.

Usage:
  scripts/anthropic-ollama-client-check.py [--bin PATH] [--model GGUF]

PATH defaults to $CARGO_TARGET_DIR/release/edgecloud (or target/release);
GGUF to the SmolLM2 the tests fetch (target/models/), else `edgecloud
model fetch` into that folder.
"""

import argparse
import json
from importlib import metadata
import os
import subprocess
import sys
import urllib.request

try:
    import anthropic
except ImportError:
    anthropic = None
try:
    import ollama
except ImportError:
    ollama = None

FAILED = []
TOKEN = "edgecloud-check-token"


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    if not ok:
        FAILED.append(name)


def start_server(binary, model):
    env = dict(os.environ, EDGECLOUD_CHECK_TOKEN=TOKEN)
    proc = subprocess.Popen(
        [binary, "serve", "-m", model, "--policy", "local-only", "--listen",
         "127.0.0.1:0", "--parallel", "1", "--deadline-ms", "60000",
         "--token-env", "EDGECLOUD_CHECK_TOKEN"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        sys.exit(f"anthropic-ollama-client-check: serve did not start: {line!r}")
    url = line.split("listening on ")[1].split(" ")[0]
    return proc, url.removesuffix("/v1")


WEATHER = {"name": "get_weather", "description": "The current weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


def anthropic_checks(root):
    client = anthropic.Anthropic(base_url=root, api_key=TOKEN, max_retries=0)
    # Greedy: anthropic 2.x has no `temperature` argument any more; the
    # server still reads the field (older clients send it).
    greedy = {"temperature": 0}
    asked = dict(model="edgecloud", max_tokens=40, extra_body=greedy,
                 system="You are a helpful assistant. Answer in one short sentence.",
                 messages=[{"role": "user", "content": "What is the capital of France?"}])
    whole = client.messages.create(**asked)
    text = "".join(b.text for b in whole.content if b.type == "text")
    check("anthropic messages.create: a text message",
          whole.type == "message" and whole.role == "assistant" and text != "",
          f"{whole.stop_reason} {text!r}")
    check("anthropic messages.create: stop_reason and usage",
          whole.stop_reason in ("end_turn", "max_tokens") and whole.usage.input_tokens > 0
          and whole.usage.output_tokens > 0, str(whole.usage))
    counted = client.messages.count_tokens(
        model="edgecloud", system=asked["system"], messages=asked["messages"])
    check("anthropic count_tokens: the local tokenizer's count of the same prompt",
          counted.input_tokens == whole.usage.input_tokens,
          f"{counted.input_tokens} vs usage {whole.usage.input_tokens}")

    kinds, streamed = [], ""
    for event in client.messages.create(stream=True, **asked):
        kinds.append(event.type)
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            streamed += event.delta.text
    check("anthropic stream: the event sequence",
          kinds[0] == "message_start" and kinds[-1] == "message_stop"
          and "content_block_start" in kinds and "message_delta" in kinds,
          " ".join(dict.fromkeys(kinds)))
    check("anthropic stream: same text as whole", streamed == text, repr(streamed))
    with client.messages.stream(**asked) as s:
        helper_text = "".join(s.text_stream)
        final = s.get_final_message()
    check("anthropic messages.stream helper: final message",
          final.stop_reason in ("end_turn", "max_tokens") and helper_text == text,
          f"{final.stop_reason} {helper_text!r}")

    called = client.messages.create(
        model="edgecloud", max_tokens=60, extra_body=greedy, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}])
    uses = [b for b in called.content if b.type == "tool_use"]
    check("anthropic tool call: a tool_use block, stop_reason tool_use",
          len(uses) == 1 and uses[0].name == "get_weather" and called.stop_reason == "tool_use",
          f"{called.stop_reason} {[(b.type, getattr(b, 'input', None)) for b in called.content]}")
    with client.messages.stream(
            model="edgecloud", max_tokens=60, extra_body=greedy, tools=[WEATHER],
            tool_choice={"type": "any"},
            messages=[{"role": "user", "content": "What is the weather in Rome?"}]) as s:
        streamed_call = s.get_final_message()
    s_uses = [b for b in streamed_call.content if b.type == "tool_use"]
    check("anthropic tool call streamed: input_json_delta parsed into the block's input",
          len(s_uses) == 1 and isinstance(s_uses[0].input, dict),
          repr([(b.type, getattr(b, "input", None)) for b in streamed_call.content]))
    if uses:
        follow = client.messages.create(
            model="edgecloud", max_tokens=40, extra_body=greedy, tools=[WEATHER],
            messages=[
                {"role": "user", "content": "What is the weather in Oslo?"},
                {"role": "assistant", "content": [b.model_dump() for b in called.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                              "content": "12 C and sunny"}]}])
        check("anthropic tool_result turn: answered",
              follow.stop_reason in ("end_turn", "max_tokens", "tool_use"),
              f"{follow.stop_reason} {[b.type for b in follow.content]}")
    try:
        client.messages.create(
            model="edgecloud", max_tokens=10,
            messages=[{"role": "user", "content": [{"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
        check("anthropic image refused", False, "accepted")
    except anthropic.BadRequestError as e:
        check("anthropic image refused: 400 invalid_request_error naming the block",
              e.body["error"]["type"] == "invalid_request_error"
              and "messages.0.content.0.type" in e.body["error"]["message"],
              e.body["error"]["message"][:90])
    try:
        client.messages.create(model="claude-nope", max_tokens=5,
                               messages=[{"role": "user", "content": "hi"}])
        check("anthropic unknown model refused", False, "accepted")
    except anthropic.NotFoundError as e:
        check("anthropic unknown model: 404 not_found_error",
              e.body["error"]["type"] == "not_found_error", e.body["error"]["message"][:70])
    try:
        anthropic.Anthropic(base_url=root, api_key="wrong", max_retries=0).messages.create(
            model="edgecloud", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        check("anthropic wrong key refused", False, "accepted")
    except anthropic.AuthenticationError as e:
        check("anthropic wrong x-api-key: 401 authentication_error",
              e.body["error"]["type"] == "authentication_error")


def get_weather(city: str) -> str:
    """The current weather in a city.

    Args:
      city: The city's name.
    """
    return f"12 C and sunny in {city}"


def ollama_checks(root):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    client = ollama.Client(host=root, headers=headers)
    req = urllib.request.Request(f"{root}/api/version", headers=headers)
    version = json.load(urllib.request.urlopen(req))
    check("ollama /api/version", isinstance(version.get("version"), str), str(version))
    listed = client.list()
    names = [m.model for m in listed.models]
    first = listed.models[0] if listed.models else None
    check("ollama list: the served models with details",
          "edgecloud" in names and first is not None and first.details.family
          and first.size and (first.digest or "").startswith("sha256:"),
          f"{names} {first.details if first else None} {first.size if first else None}")
    shown = client.show("edgecloud")
    check("ollama show: capabilities completion and tools",
          "completion" in (shown.capabilities or []) and "tools" in (shown.capabilities or []),
          f"{shown.capabilities} {shown.details.quantization_level}")
    ps = client.ps()
    check("ollama ps: the loaded model", any(m.model == "edgecloud" for m in ps.models)
          and ps.models[0].size > 0, f"{[(m.model, m.size, str(m.expires_at)) for m in ps.models]}")

    messages = [{"role": "system", "content": "Answer in one short sentence."},
                {"role": "user", "content": "What is the capital of France?"}]
    opts = {"temperature": 0, "num_predict": 40}
    whole = client.chat(model="edgecloud", messages=messages, stream=False, options=opts)
    check("ollama chat whole: the answer and its timings",
          bool(whole.message.content) and whole.done and whole.eval_count
          and whole.prompt_eval_count and whole.total_duration,
          f"{whole.done_reason} eval {whole.eval_count} in {whole.eval_duration} ns "
          f"{whole.message.content!r}")
    parts = list(client.chat(model="edgecloud", messages=messages, options=opts, stream=True))
    streamed = "".join(p.message.content or "" for p in parts)
    check("ollama chat streamed: NDJSON pieces, the last done",
          len(parts) > 1 and parts[-1].done and streamed == whole.message.content,
          f"{len(parts)} objects {streamed!r}")

    gen = client.generate(model="edgecloud", prompt="What is the capital of Germany?",
                          system="Answer in one word.", options=opts)
    check("ollama generate with a system prompt", bool(gen.response) and gen.done,
          repr(gen.response))
    raw = client.generate(model="edgecloud", prompt="The capital of Italy is", raw=True,
                          options={"temperature": 0, "num_predict": 8})
    check("ollama generate raw", raw.done and raw.eval_count, repr(raw.response))
    emb = client.embed(model="edgecloud", input=["The cat sat on the mat.", "A dog ran."])
    check("ollama embed: one vector per input",
          len(emb.embeddings) == 2 and len(emb.embeddings[0]) > 0,
          f"width {len(emb.embeddings[0]) if emb.embeddings else 0}")
    old = client.embeddings(model="edgecloud", prompt="The cat sat on the mat.")
    check("ollama embeddings (the older call)", len(old.embedding) == len(emb.embeddings[0]))
    try:
        client.chat(model="edgecloud", messages=messages, stream=False,
                    options={"temperature": "hot"})
        check("ollama option of the wrong type refused", False, "accepted")
    except ollama.ResponseError as e:
        check("ollama option of the wrong type: 400 naming it",
              e.status_code == 400 and "options.temperature" in e.error, e.error[:80])
    try:
        client.pull("smollm2")
        check("ollama pull refused", False, "accepted")
    except ollama.ResponseError as e:
        check("ollama pull: refused, saying how edgecloud gets models",
              e.status_code == 501 and "edgecloud model fetch" in e.error, e.error[:90])
    try:
        client.chat(model="nope", messages=messages, stream=False)
        check("ollama unknown model refused", False, "accepted")
    except ollama.ResponseError as e:
        check("ollama unknown model: 404", e.status_code == 404, e.error[:70])


def ollama_tool_checks(root, which):
    """A Python function as a tool, whole and streamed, then its result.
    Ollama's API has no tool_choice: the model decides (`auto`), so this
    runs on a model that calls tools when asked (`which`)."""
    client = ollama.Client(host=root, headers={"Authorization": f"Bearer {TOKEN}"})
    tool_msgs = [{"role": "system",
                  "content": "Call the get_weather tool to answer questions about weather."},
                 {"role": "user", "content": "What is the weather in Oslo?"}]
    called = client.chat(model="edgecloud", messages=tool_msgs, tools=[get_weather],
                         stream=False, options={"temperature": 0, "num_predict": 60})
    calls = called.message.tool_calls or []
    check(f"ollama chat with a Python function as a tool ({which}): a tool call",
          len(calls) >= 1 and calls[0].function.name == "get_weather",
          f"{[(c.function.name, dict(c.function.arguments)) for c in calls]} "
          f"{called.message.content!r}")
    streamed_calls = []
    for part in client.chat(model="edgecloud", messages=tool_msgs, tools=[get_weather],
                            options={"temperature": 0, "num_predict": 60}, stream=True):
        streamed_calls += part.message.tool_calls or []
    check(f"ollama chat streamed with a tool ({which}): the call in the stream",
          len(streamed_calls) >= 1 and streamed_calls[0].function.name == "get_weather",
          f"{[(c.function.name, dict(c.function.arguments)) for c in streamed_calls]}")
    if calls:
        follow = client.chat(
            model="edgecloud", stream=False, tools=[get_weather],
            options={"temperature": 0, "num_predict": 40},
            messages=tool_msgs + [called.message,
                                  {"role": "tool", "tool_name": "get_weather",
                                   "content": get_weather(**calls[0].function.arguments)}])
        check(f"ollama tool result turn ({which}): answered", follow.done,
              f"{follow.done_reason} {follow.message.content!r}")


def main():
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(target, "release", "edgecloud"))
    ap.add_argument("--model")
    ap.add_argument("--tools-model",
                    help="a model for Ollama's tool calls (no tool_choice there: the model must "
                         "choose to call); default: the Qwen2.5-Coder-0.5B the tests fetch, "
                         "else --model")
    args = ap.parse_args()
    if anthropic is None and ollama is None:
        print("anthropic-ollama-client-check: skipped: neither the `anthropic` nor the "
              "`ollama` package is installed (pip install anthropic ollama)")
        sys.exit(0)
    model = args.model
    if model is None:
        cache = os.path.join(target, "models")
        model = subprocess.run([args.bin, "model", "fetch", "smollm2-135m-instruct", "--dir",
                                cache], check=True, capture_output=True, text=True).stdout.strip()
    versions = ", ".join(f"{name} {metadata.version(name)}"
                         for name, m in (("anthropic", anthropic), ("ollama", ollama)) if m)
    print(f"anthropic-ollama-client-check: {versions}, model {model}")
    proc, root = start_server(args.bin, model)
    try:
        if anthropic is None:
            print("skip anthropic: the `anthropic` package is not installed")
        else:
            anthropic_checks(root)
        if ollama is None:
            print("skip ollama: the `ollama` package is not installed")
        else:
            ollama_checks(root)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if ollama is not None:
        tools_model = args.tools_model or next(
            (p for p in [os.path.join(target, "models", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")]
             if os.path.exists(p)), model)
        proc, root = start_server(args.bin, tools_model)
        try:
            ollama_tool_checks(root, os.path.basename(tools_model))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    if FAILED:
        print(f"anthropic-ollama-client-check: {len(FAILED)} failed: {', '.join(FAILED)}")
        sys.exit(1)
    print("anthropic-ollama-client-check: all passed")


if __name__ == "__main__":
    main()
