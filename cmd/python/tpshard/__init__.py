"""tpshard's Python API: the ``tpshard`` executable, driven through its ``--json`` reports.

Each function runs one CLI command (the binary this distribution installed, or $TPSHARD_BIN)
and returns a typed result (results.py); any failure raises the exception class of its exit
code (errors.py), carrying the CLI's message and, for check and verify, the JSON report::

    import tpshard
    shards = tpshard.split("model.safetensors", tp=2, out="tp2/")
    tpshard.check("tp2/").ok                        # True, else MismatchError
    r = tpshard.verify("tp2/", backend="cpu")       # VerifyResult; .layers[i].passed
    try:
        tpshard.verify("bad/")
    except tpshard.MismatchError as e:
        print(e.message, e.result.layers[0].rank)

``progress=`` takes a callable (called with :class:`Progress` updates) or True (a progress
line on sys.stderr); the default shows nothing.  Any other CLI option passes as a keyword:
``split(src, tp=8, out="o/", max_shard_size="5GB", only_rank=[0, 1])``.  ``python -m
tpshard ARGS`` is the CLI itself.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional, Union

from ._cli import ProgressArg, binary, option_args, run
from .errors import (BackendUnavailable, BinaryNotFound, Interrupted, InvalidInputError, IOFailure, MismatchError,
                     TpshardError, UsageError, error_for_exit_code)
from .results import (CheckCoverage, CheckResult, InspectResult, LayerResult, MergeResult, PlanResult, Progress,
                      ShardSet, StageResult, VerifyResult, WholeModelResult)

__version__ = "0.1.0"

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "__version__", "binary", "version", "inspect", "plan", "split", "reshard", "merge", "check", "verify",
    "TpshardError", "MismatchError", "UsageError", "InvalidInputError", "IOFailure", "BackendUnavailable",
    "Interrupted", "BinaryNotFound", "error_for_exit_code",
    "Progress", "InspectResult", "PlanResult", "ShardSet", "MergeResult", "CheckCoverage", "CheckResult",
    "StageResult", "LayerResult", "WholeModelResult", "VerifyResult",
]


def version() -> str:
    """The executable's version (``tpshard --version``), e.g. "0.1.0"."""
    import subprocess
    out = subprocess.run([binary(), "--version"], stdout=subprocess.PIPE, check=True).stdout.decode()
    return out.split()[-1]


def inspect(path: PathLike, **options: Any) -> InspectResult:
    """Tensors, dtypes, shapes and totals of a checkpoint (from headers only), or a shard set's
    manifest.  Raises InvalidInputError for a missing or malformed file."""
    _, _, report = run("inspect", [os.fspath(path), "--json"] + option_args(options), want_json=True)
    return InspectResult.from_json(report or {})


def plan(source: PathLike, tp: int, *, preset: Optional[str] = None, layout: Optional[PathLike] = None,
         config: Optional[PathLike] = None, dtype: Optional[str] = None, **options: Any) -> PlanResult:
    """How ``split`` would cut each tensor at ``tp``, writing nothing; every problem at once
    (InvalidInputError: the message lists them and the tp values that would fit)."""
    args = [os.fspath(source), "--tp", str(tp), "--json"]
    args += option_args(dict(preset=preset, layout=layout, config=config, dtype=dtype, **options))
    _, _, report = run("plan", args, want_json=True)
    return PlanResult.from_json(report or {})


def _shard_set(out: PathLike) -> ShardSet:
    path = os.fspath(out)
    manifest = None
    try:
        with open(os.path.join(path, "tpshard.json"), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        pass
    return ShardSet(path=path, tp=manifest.get("tp") if manifest else None,
                    files=list(manifest.get("files", [])) if manifest else [], manifest=manifest)


def split(source: PathLike, tp: int = 8, out: Optional[PathLike] = None, *, target: Optional[str] = None,
          preset: Optional[str] = None, layout: Optional[PathLike] = None, config: Optional[PathLike] = None,
          dtype: Optional[str] = None, force: bool = False, progress: ProgressArg = None,
          **options: Any) -> ShardSet:
    """Splits a checkpoint into ``tp`` ranks in the directory ``out`` (one safetensors file a
    rank and ``tpshard.json``; ``target="vllm"``/``"sglang"``/``"megatron"`` for an engine's
    layout).  Without preset/layout the layout comes from the config.json beside the source.
    Returns the set written, with its manifest."""
    args = [os.fspath(source), "--tp", str(tp)]
    if out is not None:
        args += ["-o", os.fspath(out)]
    args += option_args(dict(target=target, preset=preset, layout=layout, config=config, dtype=dtype, force=force,
                             **options))
    run("split", args, progress=progress)
    return _shard_set(out if out is not None else ".")


def reshard(source: PathLike, tp: int, out: Optional[PathLike] = None, *, target: Optional[str] = None,
            force: bool = False, progress: ProgressArg = None, **options: Any) -> ShardSet:
    """Re-cuts a shard set (tpshard's, an engine's, a Megatron-LM checkpoint) into ``tp`` ranks
    in ``out``, from the shards alone; every byte is checked against the manifest as it is
    copied (MismatchError when one differs; nothing is published then)."""
    args = [os.fspath(source), "--tp", str(tp)]
    if out is not None:
        args += ["-o", os.fspath(out)]
    args += option_args(dict(target=target, force=force, **options))
    run("reshard", args, progress=progress)
    return _shard_set(out if out is not None else ".")


def merge(source: PathLike, out: PathLike, *, target: Optional[str] = None, force: bool = False,
          progress: ProgressArg = None, **options: Any) -> MergeResult:
    """Merges a shard set back into the full checkpoint: ``out`` ending in .safetensors is one
    file, else a directory; bit-exact, padding stripped, replicas compared."""
    args = [os.fspath(source), "-o", os.fspath(out)]
    args += option_args(dict(target=target, force=force, **options))
    run("merge", args, progress=progress)
    return MergeResult(path=os.fspath(out))


def _with_result(e: TpshardError, parse: Any) -> TpshardError:
    """Attaches the typed result to a mismatch (its report is the whole result)."""
    if isinstance(e.report, dict):
        try:
            e.result = parse(e.report)  # type: ignore[attr-defined]
        except (TypeError, ValueError, KeyError):
            pass
    return e


def check(path: PathLike, source: Optional[PathLike] = None, *, junit: Optional[PathLike] = None,
          progress: ProgressArg = None, **options: Any) -> CheckResult:
    """Proves a shard set intact from its manifest: every file's size and CRC-32, every
    element covered once, replicas equal (and, with ``source``, every tensor equal to it).
    ``junit=FILE`` also writes a JUnit XML report.  Findings raise MismatchError, whose
    ``report`` (dict) and ``result`` (CheckResult) list them."""
    args = [os.fspath(path), "--json"] + option_args(dict(source=source, junit=junit, **options))
    try:
        _, _, report = run("check", args, want_json=True, progress=progress)
    except MismatchError as e:
        findings = e.report.get("findings", []) if isinstance(e.report, dict) else []
        if findings:  # --json prints the findings in the report only: the message says them
            e.message = f"{os.fspath(path)}: {len(findings)} finding{'s' if len(findings) != 1 else ''}: {findings[0]}"
            e.args = (e.message,)
        raise _with_result(e, CheckResult.from_json)
    return CheckResult.from_json(report or {})


def verify(path: PathLike, layers: Union[str, int] = "all", whole_model: bool = False, backend: str = "cpu", *,
           source: Optional[PathLike] = None, junit: Optional[PathLike] = None, progress: ProgressArg = None,
           **options: Any) -> VerifyResult:
    """Runs the layers the tensor-parallel way (each rank with only its slices, all-reduces
    between) on ``backend`` ("cpu"; "devsim"; "cuda" and "mpi" where built: BackendUnavailable
    otherwise) and compares with the unsharded layer in float64.  ``layers``: "all" or one
    layer number; ``whole_model=True`` compares the logits of the whole model.  A mismatch
    raises MismatchError; its ``result`` (VerifyResult) names the layer, stage and rank."""
    args = [os.fspath(path), "--json", "--backend", backend]
    if whole_model:
        args.append("--whole-model")
        if layers != "all":
            args += ["--layer", str(layers)]  # the CLI refuses the pair: UsageError
    elif layers != "all":
        args += ["--layer", str(layers)]
    args += option_args(dict(source=source, junit=junit, **options))
    try:
        _, _, report = run("verify", args, want_json=True, progress=progress)
    except MismatchError as e:
        raise _with_result(e, VerifyResult.from_json)
    return VerifyResult.from_json(report or {})
