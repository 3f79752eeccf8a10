"""Bootstrap speed: intervals for every configuration of an eval run, and every paired comparison with the best.

    python -m bench.bootstrap                 # 1,000 resamples x 300 queries x 40 configurations
    python -m bench.bootstrap --resamples 2000 --queries 1000 --configs 100

Seeded synthetic per-query scores (Beta-distributed, like nDCG@10 on SciFact: many 0s and 1s).
Times, on this process's CPU (time.process_time) and wall clock: building the shared resample
matrix, the percentile interval of each configuration's mean, the paired difference (interval and
sign-flip p-value) of each configuration with the best, and $ per useful document (ratio of sums)
for each. Compares the interval with scipy.stats.bootstrap (percentile method) on one configuration.
Target: the whole job under 5 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

TARGET_S = 5.0


def main(argv: list[str] | None = None) -> dict:
    from ragcost.evaluate.bootstrap import Resampler

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--configs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    base = rng.beta(0.8, 0.5, size=a.queries)
    scores = np.clip(base[None, :] + rng.normal(0, 0.08, size=(a.configs, a.queries)) - np.linspace(0, 0.1, a.configs)[:, None], 0, 1)
    usd = rng.gamma(5.0, 2e-6, size=(a.configs, a.queries))
    useful = rng.poisson(1.2, size=(a.configs, a.queries)).astype(float)

    t_wall, t_cpu = time.perf_counter(), time.process_time()
    rs = Resampler(a.queries, a.resamples, seed=a.seed)
    built = time.perf_counter() - t_wall
    ivs = rs.intervals(scores)
    best = int(np.argmax(scores.mean(axis=1)))
    paired = [rs.paired(scores[best], scores[c]) for c in range(a.configs) if c != best]
    costs = [rs.ratio_interval(usd[c], useful[c]) for c in range(a.configs)]
    wall, cpu = time.perf_counter() - t_wall, time.process_time() - t_cpu

    from scipy.stats import bootstrap

    t0 = time.perf_counter()
    sp = bootstrap((scores[best],), np.mean, n_resamples=a.resamples, method="percentile", vectorized=True,
                   random_state=np.random.default_rng(a.seed)).confidence_interval
    scipy_one_s = time.perf_counter() - t0
    ours = ivs[best]
    width = ours.hi - ours.lo
    out = {
        "benchmark": "bootstrap",
        "machine": {"cpu": platform.processor() or platform.machine(), "note": "shared machine, loaded by other jobs"},
        "resamples": a.resamples, "queries": a.queries, "configurations": a.configs,
        "seconds": {"wall": round(wall, 4), "cpu": round(cpu, 4), "resample_matrix": round(built, 4),
                    "scipy_one_configuration": round(scipy_one_s, 4)},
        "work": {"intervals": len(ivs), "paired_with_p": len(paired), "cost_ratio_intervals": len(costs)},
        "vs_scipy": {"ours": [round(ours.lo, 5), round(ours.hi, 5)], "scipy_percentile": [round(float(sp.low), 5), round(float(sp.high), 5)],
                     "max_end_gap_over_width": round(float(max(abs(ours.lo - sp.low), abs(ours.hi - sp.high)) / width), 4)},
        "target_s": TARGET_S,
        "pass": {f"wall_lt_{TARGET_S:g}s": bool(wall < TARGET_S),
                 "ends_within_10pct_of_width_of_scipy": bool(max(abs(ours.lo - sp.low), abs(ours.hi - sp.high)) < 0.1 * width)},
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
