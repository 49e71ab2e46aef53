"""Typed results of the API's commands: dataclasses with the fields of the ``--json`` reports
(README "Commands"; the JSON is the contract, and ``raw`` keeps all of it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = [
    "Progress",
    "InspectResult",
    "PlanResult",
    "ShardSet",
    "MergeResult",
    "CheckCoverage",
    "CheckResult",
    "StageResult",
    "LayerResult",
    "WholeModelResult",
    "VerifyResult",
]


@dataclass(frozen=True)
class Progress:
    """One progress update: ``verb`` ("split", "check", "verify", ...), bytes ``done`` of
    ``total``, and the tensor (or layer) in flight."""

    verb: str
    done: int
    total: int
    tensor: str

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


@dataclass
class InspectResult:
    """``tpshard inspect --json``: a checkpoint's tensors, or a shard set's manifest."""

    path: str
    format: Optional[str]
    tensors: List[Dict[str, Any]]
    totals: Dict[str, Any]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "InspectResult":
        return cls(path=d.get("path", ""), format=d.get("format"), tensors=list(d.get("tensors", [])),
                   totals=dict(d.get("totals", {})), raw=d)


@dataclass
class PlanResult:
    """``tpshard plan --json``: how split would cut each tensor, and bytes per rank."""

    tp: int
    layout: Any
    tensors: List[Dict[str, Any]]
    skipped: List[Any]
    notes: List[Any]
    rank_bytes: List[int]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "PlanResult":
        return cls(tp=int(d.get("tp", 0)), layout=d.get("layout"), tensors=list(d.get("tensors", [])),
                   skipped=list(d.get("skipped", [])), notes=list(d.get("notes", [])),
                   rank_bytes=list(d.get("rank_bytes", [])), raw=d)


@dataclass
class ShardSet:
    """What ``split`` and ``reshard`` wrote: the directory and its manifest (``tpshard.json``,
    or None for a target that writes none, such as Megatron-LM's layout)."""

    path: str
    tp: Optional[int]
    files: List[Dict[str, Any]]
    manifest: Optional[Dict[str, Any]] = field(repr=False)


@dataclass
class MergeResult:
    """What ``merge`` wrote: one file, or a directory (``--max-shard-size``, ``--target hf``)."""

    path: str


@dataclass
class CheckCoverage:
    ranks: List[int]
    partial: bool
    files: int
    bytes: int
    tensors: int


@dataclass
class CheckResult:
    """``tpshard check --json``: ``ok`` with no findings, else every finding."""

    path: str
    ok: bool
    tp: int
    tensors: int
    files: int
    bytes_read: int
    checked: CheckCoverage
    findings: List[str]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "CheckResult":
        c = d.get("checked", {})
        return cls(path=d.get("path", ""), ok=bool(d.get("ok")), tp=int(d.get("tp", 0)),
                   tensors=int(d.get("tensors", 0)), files=int(d.get("files", 0)),
                   bytes_read=int(d.get("bytes_read", 0)),
                   checked=CheckCoverage(ranks=list(c.get("ranks", [])), partial=bool(c.get("partial")),
                                         files=int(c.get("files", 0)), bytes=int(c.get("bytes", 0)),
                                         tensors=int(c.get("tensors", 0))),
                   findings=list(d.get("findings", [])), raw=d)


@dataclass
class StageResult:
    """One compared stage (attention, mlp, embedding, logits): errors and tolerances."""

    max_abs_err: float
    rel_err: float
    rtol: float
    atol: float
    passed: bool

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "StageResult":
        return cls(max_abs_err=float(d.get("max_abs_err", 0.0)), rel_err=float(d.get("rel_err", 0.0)),
                   rtol=float(d.get("rtol", 0.0)), atol=float(d.get("atol", 0.0)), passed=bool(d.get("pass")))


@dataclass
class LayerResult:
    """One verified layer; on a mismatch, the stage that failed, the rank blamed, why."""

    layer: int
    dtype: str
    seconds: float
    passed: bool
    attention: Optional[StageResult]
    mlp: Optional[StageResult]
    failed_stage: Optional[str] = None
    rank: Optional[int] = None
    detail: Optional[str] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "LayerResult":
        return cls(layer=int(d.get("layer", 0)), dtype=str(d.get("dtype", "")), seconds=float(d.get("seconds", 0.0)),
                   passed=bool(d.get("pass")),
                   attention=StageResult.from_json(d["attention"]) if "attention" in d else None,
                   mlp=StageResult.from_json(d["mlp"]) if "mlp" in d else None,
                   failed_stage=d.get("failed_stage"), rank=d.get("rank"), detail=d.get("detail"))


@dataclass
class WholeModelResult:
    """``verify --whole-model``: the logits compared, top-1 agreement."""

    passed: bool
    tokens: int
    vocab: int
    top1_agree: int
    seconds: float
    embedding: Optional[StageResult]
    logits: Optional[StageResult]
    failed_stage: Optional[str] = None
    rank: Optional[int] = None
    detail: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "WholeModelResult":
        return cls(passed=bool(d.get("pass")), tokens=int(d.get("tokens", 0)), vocab=int(d.get("vocab", 0)),
                   top1_agree=int(d.get("top1_agree", 0)), seconds=float(d.get("seconds", 0.0)),
                   embedding=StageResult.from_json(d["embedding"]) if "embedding" in d else None,
                   logits=StageResult.from_json(d["logits_cmp"]) if "logits_cmp" in d else None,
                   failed_stage=d.get("failed_stage"), rank=d.get("rank"), detail=d.get("detail"), raw=d)


@dataclass
class VerifyResult:
    """``tpshard verify --json``: every layer run, and the whole model when asked."""

    dir: str
    tp: int
    backend: str
    kind: str
    passed: bool
    layers: List[LayerResult]
    whole_model: Optional[WholeModelResult]
    checked: Dict[str, Any]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "VerifyResult":
        wm = d.get("whole_model")
        return cls(dir=d.get("dir", ""), tp=int(d.get("tp", 0)), backend=str(d.get("backend", "")),
                   kind=str(d.get("kind", "")), passed=bool(d.get("pass")),
                   layers=[LayerResult.from_json(x) for x in d.get("layers", [])],
                   whole_model=WholeModelResult.from_json(wm) if isinstance(wm, dict) else None,
                   checked=dict(d.get("checked", {})), raw=d)
