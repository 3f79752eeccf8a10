"""vllm-offline's batch split against a real in-process vLLM engine (CPU build, tiny random-weight Llama).

Slow: builds the model and starts vLLM's engine in the vLLM venv (a minute on 2 cores). Checks what
the split rests on: an engine built the way ragcost builds it (``load_llm``) reports, per request,
when it was scheduled and when its last token came (vLLM V1's ``RequestStateStats``), and a request
that decoded 16× the tokens is charged the larger share of the call. Skipped only when the vLLM venv
is absent and RAGCOST_REQUIRE_VLLM is unset.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.vllm_server import REPO, build_tiny_model, require_vllm

pytestmark = pytest.mark.slow

LENGTHS = (4, 16, 64)
SCRIPT = f"""
import json, time
from vllm import SamplingParams
from ragcost.generate import Attempt, BackendParams
from ragcost.generate.accounting import share_basis, shares
from ragcost.generate.vllm_offline import engine_work, load_llm

def main(model):
    llm = load_llm(BackendParams(backend="vllm-offline", model=model, engine_args=dict(
        dtype="float32", max_model_len=256, enforce_eager=True, max_num_seqs=16)))
    ps = [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in {LENGTHS!r}]
    # a first call pays the engine's warm-up inside every request's span (a loaded machine made the spans near
    # equal: the largest share 0.389, fc18); the split is about a warm engine's batch
    llm.generate(["warm"], SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))
    t0 = time.monotonic()
    outs = llm.generate(["a", "a longer prompt about the refund policy", "b"], ps)
    t1 = time.monotonic()
    work, unit = engine_work(outs)
    atts = [Attempt("vllm-offline", "gpu", start=0.0, end=1.0, work=w, work_unit=unit) for w in work]
    print("RESULT " + json.dumps({{"call": [t0, t1], "work": work, "unit": unit, "basis": share_basis(atts),
        "shares": shares(atts), "tokens": [len(o.outputs[0].token_ids) for o in outs],
        "spans": [[o.metrics.scheduled_ts, o.metrics.last_token_ts] for o in outs]}}))

if __name__ == "__main__":
    import sys
    main(sys.argv[1])
"""


def test_a_real_engine_batch_is_split_by_the_engine_seconds_each_request_used(tmp_path):
    py = require_vllm()
    model = build_tiny_model(tmp_path / "tiny-llama")
    script = tmp_path / "offline.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.update(PYTHONPATH=str(REPO), VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    run = subprocess.run([str(py), str(script), str(model)], capture_output=True, text=True, timeout=600, env=env,
                         cwd=tmp_path)
    lines = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    assert run.returncode == 0 and lines, (run.stdout + run.stderr)[-3000:]
    got = json.loads(lines[0][len("RESULT "):])
    assert got["tokens"] == list(LENGTHS)
    assert got["unit"] == got["basis"] == "engine_s"  # the stats were on: ragcost's default
    t0, t1 = got["call"]
    for (scheduled, last), w in zip(got["spans"], got["work"]):
        assert t0 <= scheduled <= last <= t1 and w == pytest.approx(last - scheduled)  # inside the call, same clock
    assert sum(got["shares"]) == pytest.approx(1)
    assert got["shares"][2] > got["shares"][0]  # 64 tokens decoded against 4: the larger share of the call
    assert max(got["shares"]) > 0.4  # not the equal split (1/3 each) the call's durations alone would give
