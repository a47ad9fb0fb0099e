#!/usr/bin/env python3
"""The official `openai` Python client against a real `edgecloud serve`.

Starts `edgecloud serve` on a free loopback port with a real model
(local-only), then calls, through the official client, each endpoint the
client has for it, whole and streamed, and checks what the client parsed:

  * client.completions.create (a raw prompt, `logprobs`, `echo`)
  * client.embeddings.create (strings and token arrays; float and the
    client's default, base64), when the server has /v1/embeddings
  * client.responses.create (a string input, items with a function call
    and its output, a function tool, `text.format` json_schema), when the
    server has /v1/responses
  * the OpenAI Agents SDK (`openai-agents`, when installed): an agent with
    a function tool on the Responses API; the tool must be called and the
    run must end with an answer

It prints one line per check and exits 1 if one failed. Without the
`openai` package it says so and exits 0 (skipped): `pip install openai`.

Usage:
  scripts/openai-client-check.py [--bin PATH] [--model GGUF]

PATH defaults to $CARGO_TARGET_DIR/release/edgecloud (or target/release);
GGUF to the SmolLM2 the tests fetch (target/models/), else `edgecloud
model fetch` into that folder.
"""

import argparse
import json
import os
import subprocess
import sys

try:
    import openai
except ImportError:
    print("openai-client-check: skipped: the `openai` package is not installed "
          "(pip install openai)")
    sys.exit(0)

FAILED = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    if not ok:
        FAILED.append(name)


def embeddings(client):
    texts = ["The cat sat on the mat.", "A cat was sitting on the mat.",
             "Quarterly revenue grew by eight percent."]
    # The client asks for base64 by default and decodes it.
    out = client.embeddings.create(model="edgecloud", input=texts)
    vecs = [d.embedding for d in out.data]
    width = len(vecs[0]) if vecs else 0
    check("embeddings: one vector per input, in order",
          len(vecs) == 3 and [d.index for d in out.data] == [0, 1, 2], f"width {width}")
    norms = [sum(x * x for x in v) ** 0.5 for v in vecs]
    check("embeddings: unit vectors", all(abs(n - 1) < 1e-4 for n in norms), str(norms))

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b))
    check("embeddings: similar texts closer than unrelated ones",
          cos(vecs[0], vecs[1]) > cos(vecs[0], vecs[2]),
          f"{cos(vecs[0], vecs[1]):.4f} vs {cos(vecs[0], vecs[2]):.4f}")
    check("embeddings: usage", out.usage.prompt_tokens > 0
          and out.usage.total_tokens == out.usage.prompt_tokens, str(out.usage))
    floats = client.embeddings.create(model="edgecloud", input=texts[0],
                                      encoding_format="float")
    check("embeddings: float equals base64",
          cos(floats.data[0].embedding, vecs[0]) > 0.9999)
    tokens = client.embeddings.create(model="edgecloud", input=[[1, 2, 3], [4, 5]])
    check("embeddings: token arrays", len(tokens.data) == 2
          and tokens.usage.prompt_tokens == 5, str(tokens.usage))
    try:
        client.embeddings.create(model="edgecloud", input="x", dimensions=8)
        check("embeddings: dimensions refused", False, "accepted")
    except openai.BadRequestError as e:
        check("embeddings: dimensions refused", "dimensions" in str(e), str(e)[:80])


def start_server(binary, model):
    proc = subprocess.Popen(
        [binary, "serve", "-m", model, "--policy", "local-only", "--listen",
         "127.0.0.1:0", "--parallel", "1", "--deadline-ms", "60000"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        sys.exit(f"openai-client-check: serve did not start: {line!r}")
    url = line.split("listening on ")[1].split(" ")[0]
    return proc, url


def completions(client):
    whole = client.completions.create(
        model="edgecloud", prompt="The capital of France is", max_tokens=8,
        temperature=0, logprobs=2)
    c = whole.choices[0]
    check("completions whole: text_completion", whole.object == "text_completion",
          repr(c.text))
    lp = c.logprobs
    n = len(lp.tokens) if lp else 0
    check("completions whole: legacy logprobs",
          lp is not None and n > 0 and len(lp.token_logprobs) == n
          and len(lp.top_logprobs) == n and len(lp.text_offset) == n,
          f"{n} tokens, top {lp.top_logprobs[0] if n else None}")
    check("completions whole: usage", whole.usage.completion_tokens > 0,
          str(whole.usage))
    echo = client.completions.create(
        model="edgecloud", prompt="The capital of France is", max_tokens=8,
        temperature=0, echo=True)
    check("completions echo", echo.choices[0].text == "The capital of France is" + c.text,
          repr(echo.choices[0].text))
    text, finish, n_chunks = "", None, 0
    for chunk in client.completions.create(
            model="edgecloud", prompt="The capital of France is", max_tokens=8,
            temperature=0, stream=True):
        n_chunks += 1
        for ch in chunk.choices:
            text += ch.text
            finish = ch.finish_reason or finish
    check("completions stream: same text as whole", text == c.text,
          f"{n_chunks} chunks, finish {finish}, {text!r}")
    try:
        client.completions.create(model="edgecloud", prompt="x", suffix="y")
        check("completions suffix refused", False, "no error")
    except openai.BadRequestError as e:
        check("completions suffix refused", e.body.get("param") == "suffix", str(e.body))


def responses(client):
    whole = client.responses.create(
        model="edgecloud", input="What is the capital of France?",
        instructions="Answer in one word.", max_output_tokens=8, temperature=0)
    check("responses whole: output_text", whole.status in ("completed", "incomplete")
          and isinstance(whole.output_text, str), f"{whole.status} {whole.output_text!r}")
    check("responses whole: usage", whole.usage.output_tokens > 0, str(whole.usage))
    kinds, text, done = [], "", None
    for event in client.responses.create(
            model="edgecloud", input="What is the capital of France?",
            instructions="Answer in one word.", max_output_tokens=8, temperature=0,
            stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type in ("response.completed", "response.incomplete"):
            done = event.response
    seq_ok = kinds[:2] == ["response.created", "response.in_progress"] and done is not None
    check("responses stream: event sequence", seq_ok, " ".join(dict.fromkeys(kinds)))
    check("responses stream: same text as whole",
          done is not None and text == whole.output_text == done.output_text, repr(text))
    with client.responses.stream(
            model="edgecloud", input="Say hi.", max_output_tokens=40, temperature=0) as s:
        final = s.get_final_response()
    check("responses.stream helper: final response", final.id.startswith("resp"),
          repr(final.output_text))
    tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}]
    called = client.responses.create(
        model="edgecloud", input="Weather in Oslo?", tools=tools, tool_choice="required",
        max_output_tokens=40, temperature=0)
    calls = [o for o in called.output if o.type == "function_call"]
    check("responses tool call", len(calls) == 1 and calls[0].name == "get_weather",
          f"{[(o.type, getattr(o, 'arguments', None)) for o in called.output]}")
    if calls:
        follow = client.responses.create(
            model="edgecloud", max_output_tokens=16, temperature=0, tools=tools,
            input=[{"role": "user", "content": "Weather in Oslo?"},
                   {"type": "function_call", "call_id": calls[0].call_id,
                    "name": calls[0].name, "arguments": calls[0].arguments},
                   {"type": "function_call_output", "call_id": calls[0].call_id,
                    "output": "12 C and sunny"}])
        check("responses function_call_output", follow.status in ("completed", "incomplete"),
              repr(follow.output_text))
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}
    js = client.responses.create(
        model="edgecloud", input="Name a city in France as JSON.", max_output_tokens=30,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "city", "schema": schema,
                         "strict": True}})
    try:
        ok = isinstance(json.loads(js.output_text).get("city"), str)
    except ValueError:
        ok = False
    check("responses text.format json_schema", ok, repr(js.output_text))
    try:
        client.responses.create(model="edgecloud", input="x", previous_response_id="resp_1")
        check("responses previous_response_id refused", False, "no error")
    except openai.BadRequestError as e:
        check("responses previous_response_id refused",
              e.body.get("param") == "previous_response_id", str(e.body))


def agents_check(url):
    try:
        import asyncio
        from agents import (Agent, ModelSettings, OpenAIResponsesModel, Runner,
                            function_tool, set_tracing_disabled)
    except ImportError:
        print("skip agents: the `openai-agents` package is not installed")
        return
    set_tracing_disabled(True)
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"12 C and sunny in {city}"

    model = OpenAIResponsesModel(
        model="edgecloud",
        openai_client=openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0))
    agent = Agent(name="weather", instructions="Answer with the tool's result.",
                  tools=[get_weather], model=model,
                  model_settings=ModelSettings(tool_choice="required", temperature=0,
                                               max_tokens=60))

    async def both():
        whole = await Runner.run(agent, "What is the weather in Oslo?", max_turns=4)
        before = len(calls)
        run = Runner.run_streamed(agent, "What is the weather in Paris?", max_turns=4)
        async for _ in run.stream_events():
            pass
        return whole.final_output, before, run.final_output

    whole, before, streamed = asyncio.run(both())
    check("agents: the function tool was called", before >= 1, repr(calls[:before]))
    check("agents: the run ended with an answer", isinstance(whole, str), repr(whole))
    check("agents streamed: the tool was called and the run ended with an answer",
          len(calls) > before and isinstance(streamed, str),
          f"{calls[before:]} {streamed!r}")


def main():
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(target, "release", "edgecloud"))
    ap.add_argument("--model")
    args = ap.parse_args()
    model = args.model
    if model is None:
        cache = os.path.join(target, "models")
        model = subprocess.run([args.bin, "model", "fetch", "smollm2-135m-instruct", "--dir", cache],
                               check=True,
                               capture_output=True, text=True).stdout.strip()
    print(f"openai-client-check: openai {openai.__version__}, model {model}")
    proc, url = start_server(args.bin, model)
    try:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        completions(client)
        try:
            embeddings(client)
        except openai.NotFoundError:
            print("skip embeddings: this server has no /v1/embeddings")
        try:
            responses(client)
            agents_check(url)
        except openai.NotFoundError:
            print("skip responses: this server has no /v1/responses")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if FAILED:
        print(f"openai-client-check: {len(FAILED)} failed: {', '.join(FAILED)}")
        sys.exit(1)
    print("openai-client-check: all passed")


if __name__ == "__main__":
    main()
