"""PII detection and redaction: validators, the labelled set's precision/recall, document redaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragcost.errors import ConfigError
from ragcost.guards import redact_document, redact_document_text
from ragcost.guards.pii import card_ok, cnpj_ok, cpf_ok, find_pii, iban_ok, redact_text, score_detector
from ragcost.records import SourceDocument

DATA = Path(__file__).parent / "data"


def load_cases(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


class TestValidators:
    @pytest.mark.parametrize("cpf, ok", [("529.982.247-25", True), ("11144477735", True), ("529.982.247-24", False), ("111.111.111-11", False)])
    def test_cpf_check_digits(self, cpf, ok):
        assert cpf_ok(cpf) is ok

    @pytest.mark.parametrize("cnpj, ok", [("11.222.333/0001-81", True), ("33000167000101", True), ("11.222.333/0001-80", False), ("00000000000000", False)])
    def test_cnpj_check_digits(self, cnpj, ok):
        assert cnpj_ok(cnpj) is ok

    @pytest.mark.parametrize("card, ok", [("4111 1111 1111 1111", True), ("378282246310005", True), ("4111 1111 1111 1112", False), ("1234567812345670", False)])
    def test_cards_need_luhn_and_an_issuer_prefix(self, card, ok):
        assert card_ok(card) is ok  # 1234567812345670 passes Luhn but no issuer starts with 1

    @pytest.mark.parametrize("iban, ok", [("DE89 3704 0044 0532 0130 00", True), ("GB82WEST12345698765432", True), ("DE89 3704 0044 0532 0130 01", False), ("DE89 3704 0044 0532 01", False)])
    def test_iban_mod_97_and_country_length(self, iban, ok):
        assert iban_ok(iban) is ok


class TestFindAndRedact:
    def test_redaction_replaces_each_value_with_its_kind(self):
        text = "Mail ana@example.com, CPF 529.982.247-25, card 4111 1111 1111 1111, IP 10.1.2.3 or 2001:db8::1."
        out = redact_text(text)
        assert out == "Mail <EMAIL>, CPF <CPF>, card <CREDIT_CARD>, IP <IP_ADDRESS> or <IP_ADDRESS>."

    def test_an_invalid_number_is_left_alone(self):
        text = "CPF 529.982.247-24 and card 4111 1111 1111 1112"
        assert find_pii(text) == []
        assert redact_text(text) == text

    def test_kinds_can_be_restricted(self):
        assert [s.kind for s in find_pii("ana@example.com 8.8.8.8", ("email",))] == ["email"]

    def test_labelled_set_precision_and_recall(self):
        result = score_detector(load_cases("pii.jsonl"))
        print(f"\nPII precision={result['precision']} recall={result['recall']} (tp={result['tp']} fp={result['fp']} fn={result['fn']})")
        for kind, r in result["by_kind"].items():
            print(f"  {kind:12s} precision={r['precision']} recall={r['recall']}")
        assert result["precision"] >= 0.95
        assert result["recall"] >= 0.9
        for kind in ("cpf", "cnpj", "credit_card", "iban", "email"):
            assert result["by_kind"][kind] == {**result["by_kind"][kind], "precision": 1.0, "recall": 1.0}


class TestRedactDocument:
    def test_title_text_and_string_metadata_are_redacted(self):
        doc = SourceDocument("d1", "Call +44 20 7946 0958 or write bob@corp.example.", "Bob <bob@corp.example>",
                             {"owner": "bob@corp.example", "tags": ["x", "8.8.8.8"], "year": 2024})
        out = redact_document(doc, ["pii"])
        assert out.text == "Call <PHONE> or write <EMAIL>."
        assert out.title == "Bob <<EMAIL>>"
        assert out.metadata == {"owner": "<EMAIL>", "tags": ["x", "<IP_ADDRESS>"], "year": 2024}
        assert doc.text.startswith("Call +44")  # the original is not changed in place

    def test_an_id_with_personal_data_becomes_its_redaction_plus_a_keyed_hash(self):
        a, b = SourceDocument("alice@corp.example", "x"), SourceDocument("bob@corp.example", "y")
        key = bytes(32)
        ra, rb = redact_document(a, ["pii"], key), redact_document(b, ["pii"], key)
        assert ra.id.startswith("<EMAIL>#") and len(ra.id) == len("<EMAIL>#") + 16
        assert ra.id != rb.id  # two e-mails that redact alike stay two documents
        assert redact_document(a, ["pii"], key).id == ra.id  # stable, so a rerun finds it unchanged
        assert redact_document(a, ["pii"], b"another key").id != ra.id  # keyed: guessing needs the key
        assert "alice" not in ra.id

    def test_an_id_without_personal_data_is_kept(self):
        assert redact_document(SourceDocument("kb-1", "mail bob@corp.example"), ["pii"]).id == "kb-1"

    def test_an_id_with_personal_data_and_no_key_is_refused(self):
        with pytest.raises(ConfigError, match="its id holds personal data; pass id_key"):
            redact_document(SourceDocument("alice@corp.example", "x", origin="f.jsonl:3"), ["pii"])

    def test_redact_document_text(self):
        assert redact_document_text("CNPJ 11.222.333/0001-81", ["pii"]) == "CNPJ <CNPJ>"

    def test_a_check_that_cannot_redact_is_refused(self):
        with pytest.raises(ConfigError, match=r"'prompt_injection' cannot redact.*checks that can: pii"):
            redact_document_text("x", ["prompt_injection"])
