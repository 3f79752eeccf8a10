"""ragcost's own warnings reach a CLI user as one line, like its errors; other libraries' warnings are left alone."""

from __future__ import annotations

import warnings

from ragcost.cli.main import _one_line_warnings
from tests.cli.conftest import run_cli, write_corpus, write_pipeline


def test_a_ragcost_warning_is_one_line_and_another_librarys_goes_to_python(capsys, tmp_path):
    seen = []
    show = _one_line_warnings(lambda *a: seen.append(a))
    show(RuntimeWarning("cache down;\nrunning uncached"), RuntimeWarning, str(tmp_path / "ragcost" / "stages" / "cache.py"), 3)
    show(UserWarning("from elsewhere"), UserWarning, "/usr/lib/python3/site-packages/other/mod.py", 7)
    err = capsys.readouterr().err
    assert err.startswith("warning: cache down;") and err.count("\n") == 1 and "cache.py" not in err
    assert [str(a[0]) for a in seen] == ["from elsewhere"]


def test_index_prints_the_bfloat16_warning_as_one_line(capsys, tmp_path, monkeypatch):
    import ragcost.embed.sentence_transformers as st

    monkeypatch.setattr(st, "native_bf16", lambda: False)
    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, embed={"model": "all-MiniLM-L6-v2", "batch_size": 16, "dtype": "bfloat16"})
    before = warnings.showwarning
    code, _, err = run_cli(capsys, "index", p)
    assert code == 0 and warnings.showwarning is before  # put back after the command
    lines = [ln for ln in err.splitlines() if "bfloat16" in ln]
    assert lines == ["warning: embed.dtype bfloat16: this CPU has neither AMX nor AVX-512 BF16, so bfloat16 runs "
                     "emulated and slower than float32; use dtype: float32 here"]
