"""edgecloud: answer one LLM request with a local llama.cpp lane and an
OpenAI-compatible cloud lane under one deadline, in process.

A thin skin over edgecloud's one Rust ``Harness`` (the same policies,
deadline, late-worker rule and outcome JSON as ``edgecloud run --json``).
The GIL is released while the lanes work; Python callbacks (``scorer``,
``arbiter``, ``compressor``) are called on edgecloud's threads with the GIL
held only for the call. An exception in one is reported on the outcome
(``outcome.callbacks``) and the callback's documented default is used.

>>> import edgecloud
>>> with edgecloud.Harness(model="hf:HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
...                        policy="local-only") as h:       # doctest: +SKIP
...     out = h.run("Say hi", max_tokens=16)
...     print(out.winner, out.text)
"""

from __future__ import annotations

import atexit
import json
import os
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Optional, Union

from . import _edgecloud
from ._edgecloud import (
    AbortedError,
    BusyError,
    ConfigError,
    DeadlineError,
    Error,
    InternalError,
    LaneError,
    ModelError,
    RequestError,
)

__all__ = [
    "Harness",
    "Run",
    "Delta",
    "Outcome",
    "LaneReport",
    "Decision",
    "Error",
    "ConfigError",
    "ModelError",
    "BusyError",
    "RequestError",
    "DeadlineError",
    "AbortedError",
    "LaneError",
    "InternalError",
    "__version__",
]

__version__: str = _edgecloud.version()

# After this, a callback that edgecloud would call does not touch Python
# (the interpreter is finalising); it gets its documented default instead.
atexit.register(_edgecloud._interpreter_exiting)

Messages = Union[str, List[Dict[str, Any]]]


class _Default(str):
    """A default argument, told apart from the same value given."""


# `policy`'s default: with a `config`, the configuration's policy wins
# unless `policy` is given, as `--config` without `--policy` does.
_FALLBACK = _Default("fallback")
# `api_key_env`'s default names the variable without asking for a cloud lane.
_OPENAI_KEY = _Default("OPENAI_API_KEY")


class Decision:
    """Why the winner won: ``reason`` in words, ``decided_by``, ``scores``."""

    def __init__(self, d: Dict[str, Any]) -> None:
        self.reason: str = d.get("reason", "")
        self.decided_by: Optional[str] = d.get("decided_by")
        self.scores: Dict[str, Optional[float]] = d.get("scores", {}) or {}

    def __repr__(self) -> str:
        return f"Decision(reason={self.reason!r})"


class LaneReport:
    """One lane's report: ``status``, ``error`` (message or None),
    ``error_kind`` (e.g. ``"timeout"``, ``"busy"``), timings in ms
    (``started_ms``, ``ttft_ms``, ``total_ms``), tokens, ``score`` and
    ``signals``. ``raw`` is the lane's JSON object."""

    def __init__(self, d: Dict[str, Any]) -> None:
        self.raw = d
        self.lane: str = d["lane"]
        self.status: str = d.get("status", "")
        err = d.get("error")
        self.error: Optional[str] = err.get("message") if isinstance(err, dict) else err
        self.error_kind: Optional[str] = err.get("kind") if isinstance(err, dict) else None
        self.started_ms: Optional[float] = d.get("started_ms")
        self.ttft_ms: Optional[float] = d.get("ttft_ms")
        self.total_ms: Optional[float] = d.get("total_ms")
        self.prompt_tokens: Optional[int] = d.get("prompt_tokens")
        self.completion_tokens: Optional[int] = d.get("completion_tokens")
        self.finish_reason: Optional[str] = d.get("finish_reason")
        self.score: Optional[float] = d.get("score")
        self.signals: Dict[str, float] = d.get("signals", {}) or {}
        self.text: Optional[str] = d.get("text")

    def __repr__(self) -> str:
        return f"LaneReport(lane={self.lane!r}, status={self.status!r}, error={self.error!r})"


class Outcome:
    """The settled result of one run: ``text``, ``winner`` (``"local"``,
    ``"cloud"`` or ``None``), ``status``, ``tool_calls``, ``decision``,
    ``lanes["local"]`` / ``lanes["cloud"]`` and ``to_dict()`` (exactly the
    JSON of ``edgecloud run --json``). The headline fields come straight
    from the run; the rest is parsed from the JSON when first read."""

    def __init__(self, head: Any) -> None:
        if isinstance(head, dict):  # an outcome dict, as to_dict() gives
            self._json: Optional[str] = None
            self._d: Optional[Dict[str, Any]] = head
            status, winner, text, error = (head["status"], head.get("winner"), head.get("text"),
                                           head.get("error"))
        else:
            self._json, status, winner, text, error = head
            self._d = None
        self.status: str = status
        self.winner: Optional[str] = winner
        self.text: Optional[str] = text
        self.error: Optional[str] = error

    def _dict(self) -> Dict[str, Any]:
        if self._d is None:
            self._d = json.loads(self._json or "{}")
        return self._d

    @property
    def tool_calls(self) -> List[Dict[str, Any]]:
        """The winner's tool calls (OpenAI's shape); empty when none."""
        completion = self._dict().get("completion") or {}
        return completion.get("tool_calls", []) or []

    @property
    def decision(self) -> Decision:
        """Why the winner won."""
        return Decision(self._dict().get("decision") or {})

    @property
    def lanes(self) -> Dict[str, LaneReport]:
        """Each lane's report, by lane name."""
        return {l["lane"]: LaneReport(l) for l in self._dict().get("lanes", [])}

    @property
    def callbacks(self) -> List[Dict[str, Any]]:
        """The callbacks' reports (an exception in one is reported here)."""
        return self._dict().get("callbacks", []) or []

    @property
    def elapsed_ms(self) -> float:
        """From the run's start to its settlement."""
        return self._dict().get("elapsed_ms", 0.0)

    @property
    def deadline_ms(self) -> float:
        """The run's deadline, from its start."""
        return self._dict().get("deadline_ms", 0.0)

    @property
    def late_workers(self) -> int:
        """Workers still running when the run settled (each keeps its lane)."""
        return self._dict().get("late_workers", 0)

    @property
    def cost(self) -> Dict[str, Any]:
        """What the answer cost and saved (docs/cost.md): the cloud's tokens
        and dollars (provider counts), the local lane's tokens, and the
        estimated cost of the same answer from the cloud alone."""
        return self._dict().get("cost", {})

    @property
    def ok(self) -> bool:
        """Whether a lane won."""
        return self.status == "ok"

    def to_dict(self) -> Dict[str, Any]:
        """The outcome as ``edgecloud run --json`` prints it."""
        return json.loads(self._json) if self._json is not None else json.loads(json.dumps(self._d))

    def __repr__(self) -> str:
        return f"Outcome(status={self.status!r}, winner={self.winner!r}, text={self.text!r})"


def _request_json(prompt_or_messages: Messages, kw: Dict[str, Any]) -> str:
    if isinstance(prompt_or_messages, str):
        messages: Any = [{"role": "user", "content": prompt_or_messages}]
    else:
        messages = list(prompt_or_messages)
    body: Dict[str, Any] = {"messages": messages}
    ext: Dict[str, Any] = {}
    for key in ("deadline_ms", "policy"):
        v = kw.pop(key, None)
        if v is not None:
            ext[key] = v
    for key, v in kw.items():
        if v is not None:
            body[key] = v
    if ext:
        body["edgecloud"] = ext
    return json.dumps(body)


def _scorer_adapter(f: Callable[..., float]) -> Callable[[str], float]:
    def call(arg: str) -> float:
        a = json.loads(arg)
        return float(f(a["candidate"], a["lane"]))

    return call


def _arbiter_adapter(f: Callable[..., Optional[int]]) -> Callable[[str], Optional[int]]:
    def call(arg: str) -> Optional[int]:
        pick = f(json.loads(arg))
        return None if pick is None else int(pick)

    return call


def _compressor_adapter(f: Callable[..., List[Dict[str, Any]]]) -> Callable[[str], str]:
    def call(arg: str) -> str:
        return json.dumps(list(f(json.loads(arg))))

    return call


class Delta:
    """One streamed delta, as ``serve`` streams it in a chunk's ``delta``
    (and as OpenAI's ``ChoiceDelta``): ``content`` for a piece of the
    committed text, or ``tool_calls`` for the winner's calls once the run
    has settled (per call, one delta with ``index``, ``id``, ``type`` and
    the function's ``name``, then one with its ``arguments``). ``str(d)``
    is its text (``""`` for a tool-call delta); ``raw`` its JSON object."""

    __slots__ = ("raw", "content", "tool_calls")

    def __init__(self, d: Dict[str, Any]) -> None:
        self.raw = d
        self.content: Optional[str] = d.get("content")
        self.tool_calls: Optional[List[Dict[str, Any]]] = d.get("tool_calls")

    def __str__(self) -> str:
        return self.content or ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Delta) and other.raw == self.raw

    def __repr__(self) -> str:
        return f"Delta({self.raw!r})"


class Run:
    """One started run (``Harness.start``): ``wait()`` for its outcome,
    ``abort()`` from any thread, iterate for its ``Delta``s (the committed
    text as it comes when started with ``stream=True``, then the winner's
    tool calls)."""

    def __init__(self, native: Any) -> None:
        self._native = native
        self._pending: Any = None

    def __iter__(self) -> Iterator[Delta]:
        while True:
            d = self._native.next_delta()
            if d is None:
                return
            yield Delta(json.loads(d))

    def wait(self) -> Outcome:
        """Blocks (the GIL released) until the run settles."""
        return Outcome(self._native.wait())

    def abort(self) -> None:
        """Aborts the run; idempotent."""
        self._native.abort()


class Harness:
    """Both lanes under one deadline.

    ``model`` takes every form ``edgecloud -m`` takes (a GGUF path,
    ``hf:ORG/REPO[:QUANT]``, ``ollama:NAME[:TAG]``); ``config`` a TOML file
    path or a dict with the keys of ``--config``; keyword arguments win over
    the configuration as the CLI's flags do. ``parallel`` instances serve
    that many runs at once (more at once raise ``BusyError``).
    ``scorer(candidate: dict, lane: str) -> float``,
    ``arbiter(scored: list[dict]) -> int | None`` and
    ``compressor(messages: list[dict]) -> list[dict]`` are called on
    edgecloud's threads.
    """

    def __init__(
        self,
        model: Optional[Union[str, "os.PathLike[str]"]] = None,
        base_url: Optional[str] = None,
        cloud_model: Optional[str] = None,
        policy: str = _FALLBACK,
        deadline_ms: Optional[int] = None,
        threads: Optional[int] = None,
        parallel: int = 1,
        api_key_env: str = _OPENAI_KEY,
        config: Optional[Union[str, "os.PathLike[str]", Dict[str, Any]]] = None,
        *,
        scorer: Optional[Callable[[Dict[str, Any], str], float]] = None,
        arbiter: Optional[Callable[[List[Dict[str, Any]]], Optional[int]]] = None,
        compressor: Optional[Callable[[List[Dict[str, Any]]], List[Dict[str, Any]]]] = None,
    ) -> None:
        toml_text = None
        config_json = None
        if isinstance(config, dict):
            config_json = json.dumps(config)
        elif config is not None:
            try:
                with open(os.fspath(config), encoding="utf-8") as f:
                    toml_text = f.read()
            except OSError as e:
                raise ConfigError(f"reading the config {os.fspath(config)}: {e}") from None
        self._native = _edgecloud.NativeHarness(
            config_toml=toml_text,
            config_json=config_json,
            model=None if model is None else os.fspath(model),
            base_url=base_url,
            cloud_model=cloud_model,
            policy=None if (policy is _FALLBACK and config is not None) else str(policy),
            deadline_ms=deadline_ms,
            threads=threads,
            parallel=parallel,
            api_key_env=None if api_key_env is _OPENAI_KEY else str(api_key_env),
            scorer=None if scorer is None else _scorer_adapter(scorer),
            arbiter=None if arbiter is None else _arbiter_adapter(arbiter),
            compressor=None if compressor is None else _compressor_adapter(compressor),
        )

    @classmethod
    def from_config(cls, path: Union[str, "os.PathLike[str]"], **kwargs: Any) -> "Harness":
        """A harness from a TOML configuration file (its policy included)."""
        return cls(config=path, **kwargs)

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Releases the harness; never blocks (late workers finish on their
        own and keep their lanes until they do)."""
        self._native.close()

    def start(self, prompt_or_messages: Messages, *, stream: bool = False, **kw: Any) -> Run:
        """Starts a run and returns at once (keywords as for ``run``)."""
        return Run(self._native.start(_request_json(prompt_or_messages, kw), stream))

    def run(
        self,
        prompt_or_messages: Messages,
        *,
        max_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        seed: Optional[int] = None,
        deadline_ms: Optional[int] = None,
        response_format: Optional[Dict[str, Any]] = None,
        tools: Optional[List[Dict[str, Any]]] = None,
        tool_choice: Optional[Any] = None,
        logprobs: Optional[bool] = None,
        **kw: Any,
    ) -> Outcome:
        """Runs one request and blocks (the GIL released) until it settles.
        Other keywords are fields of an OpenAI chat request (``top_p``,
        ``stop``, ``top_logprobs``...) or ``policy``. Raises ``RequestError``
        (with ``.field``) for an invalid request; a run that started always
        returns its outcome, failed or not."""
        kw.update(
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
            deadline_ms=deadline_ms,
            response_format=response_format,
            tools=tools,
            tool_choice=tool_choice,
            logprobs=logprobs,
        )
        return Outcome(self._native.run(_request_json(prompt_or_messages, kw)))

    def stream(self, prompt_or_messages: Messages, **kw: Any) -> Iterator[Delta]:
        """Yields the ``Delta``s ``serve`` streams for the run: the
        committed lane's text as it comes (``d.content``), then the
        winner's tool calls (``d.tool_calls``). For the outcome too,
        iterate ``start(..., stream=True)`` and call its ``wait()``.
        Leaving the loop early aborts the run."""
        run = self.start(prompt_or_messages, stream=True, **kw)
        try:
            yield from run
        finally:
            run.abort()

    async def arun(self, prompt_or_messages: Messages, **kw: Any) -> Outcome:
        """``run`` for asyncio: cancelling the task aborts the run (its
        lanes follow the late-worker rule)."""
        import asyncio  # here, not at the top: it costs ~10 MB of RSS to import

        run = self.start(prompt_or_messages, **kw)
        loop = asyncio.get_running_loop()
        # The wait goes on in the executor after a cancellation (shielded):
        # it returns once the aborted run settles, at once.
        run._pending = loop.run_in_executor(None, run.wait)
        try:
            return await asyncio.shield(run._pending)
        except asyncio.CancelledError:
            run.abort()
            raise

    async def astream(self, prompt_or_messages: Messages, **kw: Any) -> AsyncIterator[Delta]:
        """``stream`` for asyncio; cancelling aborts the run."""
        import asyncio  # as in arun

        run = self.start(prompt_or_messages, stream=True, **kw)
        loop = asyncio.get_running_loop()
        try:
            while True:
                d = await asyncio.shield(loop.run_in_executor(None, run._native.next_delta))
                if d is None:
                    return
                yield Delta(json.loads(d))
        finally:
            run.abort()
