"""A tail rule (and a title rule) is part of what made an index: changing it is refused at query time and re-embeds at index time."""

from __future__ import annotations

import re

import pytest

from ragcost.errors import FingerprintError
from ragcost.runtime.pipeline import Pipeline
from tests.cli.conftest import run_cli, write_corpus, write_pipeline


def _refused_until_reindexed(p, change: str) -> None:
    pipe = Pipeline.load(p)
    try:
        with pytest.raises(FingerprintError, match=change + ".*ragcost index"):
            pipe.artifact()
    finally:
        pipe.close()


def test_changing_the_tail_rule_is_refused_until_reindexed_and_then_re_embeds(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, chunking={"size": 16, "overlap": 4, "tail": "none"})
    assert run_cli(capsys, "index", p)[0] == 0
    write_pipeline(tmp_path, chunking={"size": 16, "overlap": 4, "tail": "align", "min_tail": 8})
    _refused_until_reindexed(p, r"chunking.tail: \(none\) -> align\)")
    code, out, _ = run_cli(capsys, "index", p)
    assert code == 0 and "chunk_tail None -> align:8" in out



def test_changing_the_title_rule_re_embeds_only_the_documents_whose_chunks_it_changes(tmp_path, capsys):
    from tests.cli.conftest import DOCS

    first = DOCS[0]
    docs = [(first[0], first[1], f"{first[1]}: {first[2]}", *first[3:]), *DOCS[1:]]  # only it begins with its title
    write_corpus(tmp_path / "kb.jsonl", docs)
    p = write_pipeline(tmp_path, chunking={"size": 16, "overlap": 4, "title": "dedupe"})
    assert run_cli(capsys, "index", p)[0] == 0
    write_pipeline(tmp_path, chunking={"size": 16, "overlap": 4, "title": "prepend"})
    _refused_until_reindexed(p, r"chunking.title: \(none\) -> prepend")
    code, out, _ = run_cli(capsys, "index", p)
    begins = sum(text.startswith(title) for _, title, text, *_ in docs)  # kb-1, and kb-8 ("Webhooks send ...")
    assert begins == 2
    assert code == 0 and (f"chunk_title None -> prepend; the {begins} document(s) whose chunks it changes were re-embedded, "
                          f"the other {len(DOCS) - begins} kept their vectors") in out
    assert re.search(rf"{len(DOCS)} documents read: {begins} embedded \(.*\), {len(DOCS) - begins} unchanged", out)
    pipe = Pipeline.load(p)
    try:
        _, texts = pipe.store().chunk_column("text")
        assert any(t.startswith(f"{first[1]}\n{first[1]}: ") for t in texts)  # the title twice, as BEIR encodes it
    finally:
        pipe.close()


def test_from_prepend_to_every_chunk_only_documents_longer_than_one_window_re_embed(tmp_path, capsys):
    from ragcost.ingest.chunker import Chunker
    from ragcost.records import SourceDocument
    from tests.cli.conftest import DOCS

    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, chunking={"size": 16, "overlap": 4, "title": "prepend"})
    assert run_cli(capsys, "index", p)[0] == 0
    write_pipeline(tmp_path, chunking={"size": 16, "overlap": 4})  # the default: every_chunk
    _refused_until_reindexed(p, r"chunking.title: prepend -> every_chunk")
    pipe = Pipeline.load(p)
    try:
        tok = pipe.embedder.tokenizer
    finally:
        pipe.close()
    docs = [SourceDocument(id=i, title=t, text=x) for i, t, x, *_ in DOCS]
    windows = Chunker(tok, 16, 4, tail="align", title="prepend").chunk_documents(docs)
    short_title = {d.id for d in docs if len(tok(d.title, add_special_tokens=False)["input_ids"]) <= 16 // 4}  # repeated
    headed = {d.id for d, cs in zip(docs, windows) if len(cs) > 1 and d.id in short_title}
    assert 0 < len(headed) < len(DOCS) and len(short_title) < len(DOCS)  # one-window documents and long titles too
    code, out, _ = run_cli(capsys, "index", p)
    assert code == 0 and (f"chunk_title prepend -> every_chunk; the {len(headed)} document(s) whose chunks it changes were "
                          f"re-embedded, the other {len(DOCS) - len(headed)} kept their vectors") in out
    pipe = Pipeline.load(p)
    try:
        rows = pipe.store().chunks(pipe.store().vectors()[0].tolist())
        title = {i: t for i, t, *_ in DOCS}
        mine = [r for r in rows if r["doc_id"] in headed]
        assert len(mine) > len(headed) and all(r["text"].startswith(title[r["doc_id"]] + "\n") for r in mine)  # each window
        assert all(len(tok(r["text"])["input_ids"]) <= 16 + 2 for r in rows)  # and still fits the window
    finally:
        pipe.close()
