"""More of the bad-input catalogue (issue 18): artifacts, stores and filters, prices, judges, plugins.

Same table format and runner as ``test_cli_catalogue.py`` (see its docstring); these rows cover
the areas whose fixes live in the index, store, cost and runtime layers.
"""

from __future__ import annotations

import json
import os
from typing import Callable

import pytest

from tests.reliability.conftest import REPO, Workspace
from tests.reliability.test_cli_catalogue import Probe, test_probe as _run_probe

Q = ("query", "{kb}")
V = ("validate", "{kb}")


def _manifest(ws: Workspace) -> dict:
    return json.loads((ws.dir / "index" / "manifest.json").read_text())


def _damage(what: str) -> Callable[[Workspace], None]:
    """Index the clean corpus, then damage one artifact file the way a bad disk or a hand edit would."""
    def setup(ws: Workspace) -> None:
        ws.indexed("clean")
        m = _manifest(ws)
        idx = ws.dir / "index"
        if what in ("vectors", "labels"):
            f = idx / m[f"{what}_file"]
            st = f.stat()
            data = bytearray(f.read_bytes())
            if what == "labels":
                data[-16:] = data[-8:] + data[-16:-8]  # two labels swapped: same bytes, other order
            else:
                data[-64:] = bytes(255 - b for b in data[-64:])
            f.write_bytes(bytes(data))
            os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
        elif what == "dim":
            m["dim"] = 128
            (idx / "manifest.json").write_text(json.dumps(m))
        elif what == "truncated":
            text = (idx / "manifest.json").read_text()
            (idx / "manifest.json").write_text(text[: len(text) // 2])
        elif what == "outside":
            m["index_file"] = "../../outside.hnsw"
            (idx / "manifest.json").write_text(json.dumps(m))
    return setup


def _user_tmp_then_change(ws: Workspace) -> None:
    ws.indexed("clean")
    (ws.dir / "index" / ".mine.tmp").write_text("the user's own file")
    with (ws.dir / "kb.jsonl").open("a", encoding="utf-8") as f:  # a change, so the index is rebuilt
        f.write(json.dumps({"id": "kb-9", "title": "New", "text": "A new document about invoices."}) + "\n")


def _kept(name: str) -> Callable[[Workspace], None]:
    def check(ws: Workspace) -> None:
        assert (ws.dir / name).exists(), f"{name} was deleted"
    return check


def _prices(body: str) -> Callable[[Workspace], None]:
    """A price book with one bad line, and the pipeline pointing at it."""
    def setup(ws: Workspace) -> None:
        text = (REPO / "pricing" / "default.yaml").read_text()
        text = text.replace("  storage:\n", body + "  storage:\n", 1)
        ws.write("prices.yaml", text)
        ws.pipeline(pricing=str(ws.dir / "prices.yaml"))
    return setup


def _pipe(**overrides) -> Callable[[Workspace], None]:
    return lambda ws: ws.pipeline(**overrides)


def _alias_bomb(ws: Workspace) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    ws.write("kb.yaml", "name: kb\nstages: [{type: retrieve}]\nextra:\n" + "\n".join("  " + x for x in lines) + "\n")


def _nan_metadata_source(ws: Workspace) -> None:
    ws.write("kb.jsonl", '{"id": "a", "title": "A", "text": "refund policy text", "year": 2024}\n'
                         '{"id": "b", "title": "B", "text": "another document", "year": NaN}\n')


def _filter_deep(depth: int) -> str:
    return '{"$or": [' * depth + '{"year": 1}' + "]}" * depth


TIME = "{kind: time, usd_per_hour: %s, source: test, note: probe}"
AREAS: list[Probe] = [
    # --- built index artifacts -------------------------------------------------------------------
    Probe("index_garbled_vectors_file_is_refused", (*Q, "refund"), 1, r"vectors-\w+\.npy.*ragcost index", setup=_damage("vectors")),
    Probe("index_reordered_labels_file_is_refused", (*Q, "refund"), 1, r"labels-\w+\.npy.*ragcost index", setup=_damage("labels")),
    Probe("index_manifest_dim_edit_is_refused", (*Q, "refund"), 1, r"says float32 \(5, 128\).*ragcost index", setup=_damage("dim")),
    Probe("index_truncated_manifest_is_one_line", (*Q, "refund"), 1, r"manifest\.json: the index manifest is damaged.*ragcost index",
          setup=_damage("truncated")),
    Probe("index_manifest_pointing_outside_is_refused", (*Q, "refund"), 1, r"outside", setup=_damage("outside")),
    Probe("index_validate_deep_names_a_garbled_file", (*V, "--deep"), 1, r"vectors-\w+\.npy.*ragcost index", setup=_damage("vectors")),
    Probe("index_dir_rebuild_keeps_the_users_tmp_file", ("index", "{kb}", "--quiet"), 0, "", out=r"1 embedded \(1 chunks[\s\S]*index built",
          setup=_user_tmp_then_change, check=_kept("index/.mine.tmp")),
    Probe("index_query_without_any_index", (*Q, "refund"), 1, r"no index at .*ragcost index",
          setup=lambda ws: (ws.indexed("clean"), __import__("shutil").rmtree(ws.dir / "index"))),
    # --- filters and the store ---------------------------------------------------------------------
    Probe("filter_all_with_a_thousand_values_runs", (*Q, "refund", "--filter", json.dumps({"tags": {"$all": [f"t{i}" for i in range(1000)]}}),
                                                     "--json", "--no-ledger"), 0, "", out=r'"hits": \[\]', setup=lambda ws: ws.indexed("clean")),
    Probe("filter_integer_beyond_64_bits_is_one_line", (*Q, "refund", "--filter", '{"year": 9223372036854775808}'), 1, r"year",
          setup=lambda ws: ws.indexed("clean")),
    Probe("filter_nested_40_deep_is_refused_with_the_limit", (*Q, "refund", "--filter", _filter_deep(40)), 1, r"nest|deep|depth",
          setup=lambda ws: ws.indexed("clean")),
    Probe("filter_in_with_ten_thousand_and_one_values", (*Q, "refund", "--filter", json.dumps({"tenant": {"$in": [f"t{i}" for i in range(10001)]}})),
          1, r"tenant|\$in", setup=lambda ws: ws.indexed("clean")),
    Probe("filter_matching_nothing_is_zero_hits_not_an_error", (*Q, "refund", "--filter", '{"tenant": "nobody"}', "--json", "--no-ledger"), 0, "",
          out=r'"hits": \[\]', setup=lambda ws: ws.indexed("clean")),
    Probe("metadata_nan_is_skipped_with_its_line", ("index", "{kb}", "--quiet"), 0, "", out=r"kb\.jsonl:2[\s\S]*1 embedded \(1 chunks",
          setup=_nan_metadata_source),
    Probe("store_url_unknown_scheme", V, 1, r"store 'mongodb://x/y'", setup=_pipe(store="mongodb://x/y")),
    # --- prices -------------------------------------------------------------------------------------
    Probe("price_infinite_is_refused_at_its_line", V, 1, r"prices\.yaml:\d+:\d+: .*usd_per_hour: .*finite.*; write a plain number", setup=_prices("  probe: " + TIME % ".inf" + "\n")),
    Probe("price_1e400_is_refused_at_its_line", V, 1, r"prices\.yaml:\d+:\d+: .*usd_per_hour", setup=_prices("  probe: " + TIME % "1e400" + "\n")),
    Probe("price_nan_is_refused_at_its_line", V, 1, r"prices\.yaml:\d+:\d+: .*usd_per_hour", setup=_prices("  probe: " + TIME % ".nan" + "\n")),
    Probe("price_negative_is_refused_at_its_line", V, 1, r"prices\.yaml:\d+:\d+: .*usd_per_hour", setup=_prices("  probe: " + TIME % "-1" + "\n")),
    Probe("price_resource_unknown_to_the_book", V, 1, r"unknown resource 'gpu-b300'.*add it to the price book", setup=_pipe(resource="gpu-b300")),
    Probe("yaml_alias_bomb_is_refused_quickly", V, 1, r"kb\.yaml.*alias", setup=_alias_bomb),
    # --- judges ---------------------------------------------------------------------------------------
    Probe("judge_threshold_rrf_cannot_reach", V, 1, r"useful\.threshold 0\.5 can never be reached.*rerank:hybrid",
          setup=_pipe(stages=[{"type": "retrieve"}, {"type": "rerank", "backend": "hybrid"}])),
    Probe("judge_cited_without_generate", V, 1, r"useful\.judge: cited .*no generate stage", setup=_pipe(useful={"judge": "cited"})),
    Probe("judge_threshold_above_cosine", V, 1, r"useful\.threshold 2 can never be reached", setup=_pipe(useful={"threshold": 2})),
    # --- what index would refuse, refused by validate first -----------------------------------------
    Probe("validate_chunk_size_beyond_the_model_window", V, 1, r"chunking\.size 300 is larger than the model's window of 254",
          setup=_pipe(chunking={"size": 300, "overlap": 8})),
    Probe("validate_unknown_reader", V, 1, r"source\.reader 'xml' is unknown; installed:", setup=_pipe(source={"path": "kb.jsonl", "reader": "xml"})),
    Probe("validate_embed_dim_above_the_model", ("index", "{kb}"), 1, r"embed\.dim 500 is larger than the model's 384",
          setup=_pipe(embed={"model": "all-MiniLM-L6-v2", "dim": 500})),
    Probe("validate_hnswlib_int8", V, 1, r"hnswlib.*float32", setup=_pipe(embed={"model": "all-MiniLM-L6-v2", "precision": "int8"})),
    # --- unknown names list what is installed ------------------------------------------------------
    Probe("unknown_guard_check", V, 1, r"kb\.yaml:\d+:\d+: .*unknown guard check 'toxicity'; installed: .*pii",
          setup=_pipe(stages=[{"type": "guard", "checks": ["toxicity"]}, {"type": "retrieve"}])),
    Probe("unknown_generate_backend", V, 1, r"kb\.yaml:\d+:\d+: .*unknown generate backend 'whisper'; installed: .*extractive",
          setup=_pipe(stages=[{"type": "retrieve"}, {"type": "generate", "backend": "whisper"}])),
    Probe("unknown_rerank_backend", V, 1, r"kb\.yaml:\d+:\d+: .*unknown rerank backend 'colbert'; installed: .*rescore",
          setup=_pipe(stages=[{"type": "retrieve"}, {"type": "rerank", "backend": "colbert"}])),
    Probe("unknown_index_backend", V, 1, r"kb\.yaml:\d+:\d+: index\.backend: unknown index backend 'annoy'; installed: .*faiss",
          setup=_pipe(index={"backend": "annoy", "kind": "hnsw"})),
    Probe("redact_with_a_check_that_cannot", V, 1, r"kb\.yaml:\d+:\d+: redact: check 'prompt_injection' cannot redact",
          setup=_pipe(redact=["prompt_injection"])),
]


@pytest.mark.parametrize("probe", AREAS, ids=[p.name for p in AREAS])
def test_area_probe(probe: Probe, workspace: Workspace, capsys):
    _run_probe(probe, workspace, capsys)


def test_the_whole_catalogue_has_at_least_118_probes():
    from tests.reliability.test_cli_catalogue import CATALOGUE
    from tests.reliability.test_ingest_catalogue import CATALOGUE as INGEST

    assert len(CATALOGUE) + len(AREAS) + len(INGEST) >= 118
