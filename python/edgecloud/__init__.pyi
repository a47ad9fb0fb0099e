import os
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Optional, Union

__version__: str

Messages = Union[str, List[Dict[str, Any]]]

class Error(Exception):
    kind: str
    field: Optional[str]

class ConfigError(Error): ...
class ModelError(Error): ...
class BusyError(Error): ...
class RequestError(Error): ...
class DeadlineError(Error): ...
class AbortedError(Error): ...
class LaneError(Error): ...
class InternalError(Error): ...

class Decision:
    reason: str
    decided_by: Optional[str]
    scores: Dict[str, Optional[float]]

class LaneReport:
    raw: Dict[str, Any]
    lane: str
    status: str
    error: Optional[str]
    error_kind: Optional[str]
    started_ms: Optional[float]
    ttft_ms: Optional[float]
    total_ms: Optional[float]
    prompt_tokens: Optional[int]
    completion_tokens: Optional[int]
    finish_reason: Optional[str]
    score: Optional[float]
    signals: Dict[str, float]
    text: Optional[str]

class Outcome:
    status: str
    winner: Optional[str]
    text: Optional[str]
    error: Optional[str]
    tool_calls: List[Dict[str, Any]]
    decision: Decision
    lanes: Dict[str, LaneReport]
    callbacks: List[Dict[str, Any]]
    elapsed_ms: float
    deadline_ms: float
    late_workers: int
    cost: Dict[str, Any]
    @property
    def ok(self) -> bool: ...
    def to_dict(self) -> Dict[str, Any]: ...

class Delta:
    raw: Dict[str, Any]
    content: Optional[str]
    tool_calls: Optional[List[Dict[str, Any]]]
    def __init__(self, d: Dict[str, Any]) -> None: ...

class Run:
    def __iter__(self) -> Iterator[Delta]: ...
    def wait(self) -> Outcome: ...
    def abort(self) -> None: ...

class Harness:
    def __init__(
        self,
        model: Optional[Union[str, os.PathLike[str]]] = None,
        base_url: Optional[str] = None,
        cloud_model: Optional[str] = None,
        policy: str = "fallback",
        deadline_ms: Optional[int] = None,
        threads: Optional[int] = None,
        parallel: int = 1,
        api_key_env: str = "OPENAI_API_KEY",
        config: Optional[Union[str, os.PathLike[str], Dict[str, Any]]] = None,
        *,
        scorer: Optional[Callable[[Dict[str, Any], str], float]] = None,
        arbiter: Optional[Callable[[List[Dict[str, Any]]], Optional[int]]] = None,
        compressor: Optional[Callable[[List[Dict[str, Any]]], List[Dict[str, Any]]]] = None,
    ) -> None: ...
    @classmethod
    def from_config(cls, path: Union[str, os.PathLike[str]], **kwargs: Any) -> Harness: ...
    def __enter__(self) -> Harness: ...
    def __exit__(self, *exc: Any) -> None: ...
    def close(self) -> None: ...
    def start(self, prompt_or_messages: Messages, *, stream: bool = False, **kw: Any) -> Run: ...
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
    ) -> Outcome: ...
    def stream(self, prompt_or_messages: Messages, **kw: Any) -> Iterator[Delta]: ...
    async def arun(self, prompt_or_messages: Messages, **kw: Any) -> Outcome: ...
    def astream(self, prompt_or_messages: Messages, **kw: Any) -> AsyncIterator[Delta]: ...
