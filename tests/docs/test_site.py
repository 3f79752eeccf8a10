"""The docs site builds with `mkdocs build --strict`, offline, and each command's --help links its page."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly_offline(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(REPO),
               # Any attempt to reach the network fails fast instead of hanging or silently succeeding.
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    site = tmp_path / "site"
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "ragcost index" in cli and "--prune" in cli  # the generated CLI reference is there
    yaml = (site / "reference" / "yaml" / "index.html").read_text(encoding="utf-8")
    assert "exact_below" in yaml and "usd_per_hour" in yaml  # stage params and price book keys
    embed = json.loads((REPO / "bench" / "out" / "embed.json").read_text(encoding="utf-8"))
    measured = (site / "measured" / "embed" / "index.html").read_text(encoding="utf-8")
    assert "python -m bench.embed" in measured and str(embed["ragcost"]["texts_per_s"]) in measured  # read from the JSON
    listed = (site / "measured" / "index.html").read_text(encoding="utf-8")
    assert all(p.stem in listed for p in (REPO / "bench" / "out").glob("*.json"))  # a page for every file
    html = "".join(p.read_text(encoding="utf-8") for p in site.rglob("*.html"))
    assert "fonts.googleapis.com" not in html and "fonts.gstatic.com" not in html


def test_every_docs_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    missing = sorted(p for p in pages if not re.search(rf":\s*{re.escape(p)}\s*$", nav, re.M))
    assert not missing, f"add these pages to mkdocs.yml's nav: {missing}"


def test_every_command_help_ends_with_its_docs_page():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import mkdocs_hooks
    finally:
        sys.path.pop(0)
    for path in mkdocs_hooks.commands():
        last = mkdocs_hooks.help_text(path).splitlines()[-1]
        m = re.search(r"docs/(\S+\.md)", last)
        assert m, f"ragcost {' '.join(path)} --help: the last line names no docs page: {last!r}"
        assert (REPO / "docs" / m.group(1)).is_file(), f"ragcost {' '.join(path)} --help links a missing page {m.group(1)}"
