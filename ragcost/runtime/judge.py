"""The pipeline's query-time useful-document judge: built once per loaded pipeline, counted per query.

``judge: calibrated`` reads the calibration file `ragcost eval --write` stored beside the pipeline
and refuses it when it was fit for another configuration; the count is then the expected number of
relevant documents (a float). ``judge: cited`` counts a cited document only where the answer did not
abstain and, when a grounded check ran, only when some answer sentence citing it was supported.
"""

from __future__ import annotations

from typing import Any

from ragcost.cost.calibration import Calibration, calibration_path, check_fingerprint, fingerprint_of, load
from ragcost.records import QueryState


def refit_command(pipe: Any) -> str:
    return f"ragcost eval EVAL_SPEC --write (an eval spec whose pipeline is {pipe.path} and whose grid has its index)"


def final_k(specs: list) -> int:
    """Documents in the final context: the retrieve stage's k, cut by a later re-rank's top_n."""
    k = 10
    for cls, params in specs:
        cut = cls.final_k(params)
        if cut is None:
            continue
        k = cut if cls.fetches_hits else min(k, cut)
    return k


def scoring_of(params: Any) -> dict[str, Any]:
    """A re-rank stage's entry in a calibration's fingerprint (the eval side uses the same, on the grid's stage)."""
    if hasattr(params, "scoring_fingerprint"):
        return params.scoring_fingerprint()
    extra = getattr(params, "model_extra", None) or {}  # a rerank stage from a plugin: its backend and model
    return {"backend": getattr(params, "backend", None), "model": getattr(params, "model", None) or extra.get("model")}


def pipeline_fingerprint(pipe: Any) -> dict[str, Any]:
    """What the pipeline would need a calibration to have been fit on (the eval side builds the same)."""
    cfg, ic = pipe.config, pipe.index_config
    scoring = [scoring_of(params) for cls, params in pipe.loaded.stage_specs if cls.reorders_hits]
    return fingerprint_of(cfg.embed.model, pipe.embedder.fingerprint(), pipe.dim, cfg.embed.precision, pipe._chunking_made_by(),
                          ic.backend, ic.kind, ic.build, ic.search, scoring, final_k(pipe.loaded.stage_specs))


def load_calibration(pipe: Any) -> Calibration:
    """The pipeline's calibration, refused when missing, corrupt, too small or fit for another configuration."""
    path = calibration_path(pipe.path, pipe.config.useful.calibration)
    cal = load(path, refit_command(pipe))
    check_fingerprint(cal, pipeline_fingerprint(pipe), path, refit_command(pipe))
    return cal


def judge_label(pipe: Any) -> str:
    u = pipe.config.useful
    if u.judge == "score":
        return f"score >= {u.threshold:g}"
    if u.judge == "calibrated":
        return pipe.calibration.label()
    return u.judge


def useful_count(pipe: Any, s: QueryState) -> float:
    """Useful documents of one query by the pipeline's judge; a failed, blocked or abstaining query delivered none."""
    from ragcost.cost.useful import make_judge, supported_citations

    if not s.ok or abstained(s):
        return 0
    u = pipe.config.useful
    hits = [{"doc_id": h.doc_id, "score": h.score} for h in s.hits]
    if u.judge == "calibrated":
        return pipe.calibration.expected(hits)
    judge = make_judge(u.judge, threshold=u.threshold)
    if u.judge == "cited" and grounded_ran(pipe, s):
        cites = [c for c in supported_citations(s.answer or "", [h.doc_id for h in s.hits], _unsupported_spans(s))
                 if c in s.citations]
        return judge.count(hits, answer={"citations": cites})
    return judge.count(hits, answer={"citations": s.citations})


def abstained(s: QueryState) -> bool:
    return bool(s.generation.get("abstained"))


def grounded_ran(pipe: Any, s: QueryState) -> bool:
    """A grounded check on the answer is in the chain and the query reached it (not answered early by a cache)."""
    if s.outcome == "finished":
        return False
    return any("grounded" in cls.answer_checks(params) for cls, params in pipe.loaded.stage_specs)


def _unsupported_spans(s: QueryState) -> list[tuple[int, int]]:
    """The answer spans the grounded check found unsupported (its per-sentence verdicts in ``findings``)."""
    out = []
    for f in s.findings:
        if f.get("check") == "grounded" and f.get("on") == "answer" and f.get("span"):
            a, b = f["span"]
            out.append((int(a), int(b)))
    return out
