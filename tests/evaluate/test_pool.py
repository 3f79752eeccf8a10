"""`ragcost judgments pool|merge`: judgments for a team that has none, and judged@k in eval."""

from __future__ import annotations

import csv
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from ragcost.cli.main import main
from ragcost.evaluate.pool import COLUMNS, judged_at, merge, pool, read_existing, write_pool
from ragcost.evaluate.run import ConfigResult, run_eval
from ragcost.evaluate.spec import load_spec
from ragcost.evaluate.verdict import unjudged_note
from tests.evaluate.conftest import write_beir, write_spec
from tests.evaluate.test_intervals import GRID


def _rows(path):
    return list(csv.DictReader(path.open(encoding="utf-8"), delimiter="\t"))


@pytest.fixture(scope="module")
def unjudged(tmp_path_factory):
    """A synthetic dataset whose qrels were moved aside: the team's questions, nobody's judgments."""
    folder = tmp_path_factory.mktemp("pool")
    data = write_beir(folder / "data" / "synth", n_docs=96)
    truth = read_existing(data)  # the "person" judges by these
    (data / "qrels.tsv").unlink()
    spec = write_spec(folder, GRID, dims=[64, 32], precisions=["float32"], k=[10])
    ls = load_spec(spec)
    return folder, spec, ls, truth, pool(ls, folder / "cache")


def _fill(src, dst, truth, judge="alice"):
    """Judge every row of a pool file as the truth says (0 where it says nothing)."""
    rows = _rows(src)
    with dst.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, delimiter="\t", lineterminator="\n")
        w.writeheader()
        for r in rows:
            if not r["relevance"]:
                r["relevance"] = str(truth.get(r["query_id"], {}).get(r["doc_id"], 0))
                r["judge"] = judge
            w.writerow(r)
    return rows


class TestPool:
    def test_every_question_gets_the_union_of_every_configurations_top_k(self, unjudged):
        _, _, ls, _, p = unjudged
        assert len(p.tops) == 6 and len(p.queries) == 9  # flat, hnsw ef 8/64 at d64 and d32; all questions, judged or not
        for q in p.queries:
            union = set().union(*(set(t[q]) for t in p.tops.values()))
            assert set(p.docs[q]) == union and all(len(t[q]) == 10 for t in p.tops.values())
            assert all(p.docs[q][d] == sum(d in t[q] for t in p.tops.values()) for d in union)

    def test_the_file_is_ready_to_judge_and_not_in_rank_order(self, unjudged, tmp_path):
        folder, _, ls, _, p = unjudged
        todo = write_pool(p, ls.dataset_path, tmp_path / "j.tsv")
        rows = _rows(tmp_path / "j.tsv")
        assert list(rows[0]) == COLUMNS and todo == len(rows) == p.pairs
        assert all(r["relevance"] == "" and r["judge"] == "" and r["passage"] and "\t" not in r["passage"] for r in rows)
        first = [r["doc_id"] for r in rows if r["query_id"] == "q0"]
        flat = p.tops["flat d64 f32"]["q0"]
        assert first != flat[: len(first)]  # seeded shuffle, not the flat index's ranking
        write_pool(p, ls.dataset_path, tmp_path / "again.tsv")
        assert (tmp_path / "again.tsv").read_text() == (tmp_path / "j.tsv").read_text()  # seeded: the same file

    def test_judged_then_merged_every_configuration_is_fully_judged_in_eval(self, unjudged, tmp_path):
        folder, spec, ls, truth, p = unjudged
        data = tmp_path / "data" / "synth"
        shutil.copytree(ls.dataset_path, data)
        spec2 = write_spec(tmp_path, GRID, dims=[64, 32], precisions=["float32"], k=[10])
        write_pool(p, data, tmp_path / "j.tsv")
        _fill(tmp_path / "j.tsv", tmp_path / "done.tsv", truth)
        m = merge(data, tmp_path / "done.tsv")
        assert m.added == p.pairs and m.changed == 0 and m.judges == {"alice": p.pairs}
        log = _rows(data / "judgments.tsv")
        assert len(log) == p.pairs and {r["judge"] for r in log} == {"alice"} and all(r["judged_at"] for r in log)
        run = run_eval(load_spec(spec2), folder / "cache")
        # the pool holds exactly what eval's configurations retrieve: all of it judged
        assert [r.judged_at_k for r in run.ok()] == [1.0] * len(run.ok())
        # the judgments are the truth's on what was pooled: relevant documents kept their grades
        qrels = read_existing(data)
        assert all(qrels[r["query_id"]][r["doc_id"]] == truth.get(r["query_id"], {}).get(r["doc_id"], 0) for r in log)

    def test_a_second_judge_changing_a_score_is_counted_and_logged_beside_the_first(self, unjudged, tmp_path):
        _, _, ls, truth, p = unjudged
        data = tmp_path / "synth"
        shutil.copytree(ls.dataset_path, data)
        write_pool(p, data, tmp_path / "j.tsv")
        _fill(tmp_path / "j.tsv", tmp_path / "a.tsv", truth)
        merge(data, tmp_path / "a.tsv")
        rows = _rows(tmp_path / "a.tsv")
        rows[0]["relevance"], rows[0]["judge"] = str(3 - int(rows[0]["relevance"]) % 3), "bob"
        with (tmp_path / "b.tsv").open("w", encoding="utf-8") as f:
            w = csv.DictWriter(f, COLUMNS, delimiter="\t", lineterminator="\n")
            w.writeheader()
            w.writerow(rows[0])
        m = merge(data, tmp_path / "b.tsv")
        assert m.changed == 1 and m.added == 0
        log = _rows(data / "judgments.tsv")
        assert [r["judge"] for r in log if (r["query_id"], r["doc_id"]) == (rows[0]["query_id"], rows[0]["doc_id"])] == ["alice", "bob"]

    def test_a_bad_cell_is_one_line_and_nothing_is_written(self, unjudged, tmp_path, capsys):
        _, spec, ls, _, p = unjudged
        path = tmp_path / "bad.tsv"
        write_pool(p, ls.dataset_path, path)
        text = path.read_text().splitlines()
        cells = text[3].split("\t")
        cells[2], cells[3] = "yes", "carol"
        text[3] = "\t".join(cells)
        path.write_text("\n".join(text) + "\n")
        assert main(["judgments", "merge", str(spec), str(path)]) == 1
        err = capsys.readouterr().err
        assert f"{path}:4: relevance 'yes'" in err and "Traceback" not in err
        assert not (ls.dataset_path / "qrels.tsv").exists() and not (ls.dataset_path / "judgments.tsv").exists()
        cells[2], cells[3] = "1", ""
        text[3] = "\t".join(cells)
        path.write_text("\n".join(text) + "\n")
        assert main(["judgments", "merge", str(spec), str(path)]) == 1
        assert "has no judge" in capsys.readouterr().err

    def test_cli_pools_with_judged_at_k_against_the_qrels_there_are(self, tmp_path, capsys):
        data = write_beir(tmp_path / "data" / "synth", n_docs=96)
        spec = write_spec(tmp_path, GRID, dims=[64], precisions=["float32"], k=[10])
        assert main(["judgments", "pool", str(spec), "-o", str(tmp_path / "j.tsv"), "--cache-dir", str(tmp_path / "c")]) == 0
        out = capsys.readouterr().out
        assert "judged@10" in out and "flat d64 f32" in out and "to judge" in out
        rows = _rows(tmp_path / "j.tsv")
        pre = [r for r in rows if r["judge"] == "qrels.tsv"]
        assert pre and all(r["relevance"] == str(read_existing(data)[r["query_id"]][r["doc_id"]]) for r in pre)


def test_judged_at_counts_zero_judgments_as_judged():
    assert judged_at({"q": ["a", "b", "c", "d"]}, {"q": {"a": 0, "c": 2}}, 4) == 0.5
    assert judged_at({"q": ["a", "b"]}, {}, 2) == 0.0


def test_unjudged_documents_that_could_reverse_a_comparison_are_named():
    def res(name, q, top):
        r = ConfigResult(name, metrics={"ndcg@10": q})
        r.top = top
        return r

    qrels = {"q1": {"a": 1, "x": 0}, "q2": {"b": 1}}
    # winner: the relevant document first; loser: unjudged documents ahead of it
    win = res("win", 1.0, [["a", "x"], ["b"]])
    lose = res("lose", 0.0, [["u1", "u2"], ["u3"]])
    from ragcost.evaluate.metrics import evaluate

    win.metrics["ndcg@10"] = evaluate({"q1": win.top[0], "q2": win.top[1]}, qrels, ["ndcg@10"])[0]["ndcg@10"]
    lose.metrics["ndcg@10"] = evaluate({"q1": lose.top[0], "q2": lose.top[1]}, qrels, ["ndcg@10"])[0]["ndcg@10"]
    run = SimpleNamespace(qrels=qrels, quality="ndcg@10", query_ids=["q1", "q2"], k=[10], spec_path="s.yaml")
    note = unjudged_note(run, win, lose)
    assert note and "3 unjudged documents in lose's top 10" in note
    # fully judged: nothing to say
    judged = {"q1": {"a": 1, "x": 0, "u1": 0, "u2": 0}, "q2": {"b": 1, "u3": 0}}
    assert unjudged_note(SimpleNamespace(**{**vars(run), "qrels": judged}), win, lose) is None
    assert np.isfinite(win.metrics["ndcg@10"])
