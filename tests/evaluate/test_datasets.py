from __future__ import annotations

import pytest

from ragcost.errors import IngestError
from ragcost.evaluate.datasets import load_dataset
from tests.evaluate.conftest import write_beir

DOC_IDS = [f"d{i}" for i in range(96)]


class TestLoadDataset:
    def test_unknown_documents_and_queries_are_counted_shown_and_skipped(self, tmp_path):
        root = write_beir(tmp_path / "ds", extra_qrels="q0\tghost\t1\nq0\tghost2\t2\nnope\td1\t1\n")
        ds = load_dataset(root, DOC_IDS)
        p = ds.problems
        assert p.unknown_docs == 2 and p.unknown_doc_examples == ["q0->ghost", "q0->ghost2"]
        assert p.unknown_queries == 1 and p.unknown_query_examples == ["nope"]
        assert "ghost" not in ds.qrels["q0"] and "nope" not in ds.qrels
        lines = p.lines()
        assert any("2 qrels row(s) name documents not in the indexed corpus" in x and "q0->ghost" in x for x in lines)
        assert any("1 qrels row(s) name queries not in queries.jsonl" in x and "nope" in x for x in lines)

    def test_only_queries_with_a_relevant_document_are_evaluated(self, tmp_path):
        root = write_beir(tmp_path / "ds")
        ds = load_dataset(root, DOC_IDS)
        assert sorted(ds.queries) == [f"q{j}" for j in range(8)]  # q-unjudged has no qrels
        assert ds.qrels["q0"]["d0"] == 3 and ds.qrels["q0"]["d16"] == 1  # graded scores kept

    def test_a_query_whose_judged_documents_are_all_unknown_is_dropped_and_reported(self, tmp_path):
        root = write_beir(tmp_path / "ds")
        ds = load_dataset(root, [f"d{i}" for i in range(96) if i % 8])  # none of q0's documents
        assert "q0" not in ds.queries and ds.problems.no_relevant == 1
        assert ds.problems.unknown_docs == 12

    @pytest.mark.parametrize("missing", ["queries.jsonl", "qrels.tsv", "corpus.jsonl"])
    def test_a_missing_file_is_a_one_line_error_naming_it(self, tmp_path, missing):
        root = write_beir(tmp_path / "ds")
        (root / missing).unlink()
        with pytest.raises(IngestError, match=missing.replace(".", r"\.")) as e:
            load_dataset(root, DOC_IDS)
        assert "\n" not in str(e.value)

    def test_a_missing_folder_is_an_error_naming_it(self, tmp_path):
        with pytest.raises(IngestError, match="dataset folder not found: .*nowhere"):
            load_dataset(tmp_path / "nowhere", DOC_IDS)

    def test_beir_qrels_test_tsv_is_accepted(self, tmp_path):
        root = write_beir(tmp_path / "ds")
        (root / "qrels").mkdir()
        (root / "qrels.tsv").rename(root / "qrels" / "test.tsv")
        assert len(load_dataset(root, DOC_IDS).qrels) == 8

    def test_malformed_qrels_lines_are_skipped_and_reported(self, tmp_path):
        root = write_beir(tmp_path / "ds", extra_qrels="q1\td1\n")
        ds = load_dataset(root, DOC_IDS)
        assert ds.problems.malformed and "qrels.tsv:" in ds.problems.malformed[0]
