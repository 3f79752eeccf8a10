"""A local `embed.model` folder must hold a saved model; anything else is one ConfigError naming it."""

from __future__ import annotations

import pytest

from ragcost.embed.sentence_transformers import resolve_model_path
from ragcost.errors import ConfigError


class TestModelFolder:
    def test_a_system_folder_is_refused_naming_it_and_what_is_missing(self):
        with pytest.raises(ConfigError, match=r"embed\.model '/etc': the folder /etc is not a sentence-transformers model .*modules\.json or config\.json"):
            resolve_model_path("/etc")

    def test_an_empty_folder_beside_the_pipeline_is_refused(self, tmp_path):
        (tmp_path / "my-model").mkdir()
        with pytest.raises(ConfigError, match=r"my-model.*not a sentence-transformers model"):
            resolve_model_path("my-model", base=tmp_path)

    @pytest.mark.parametrize("marker", ["modules.json", "config.json"])
    def test_a_folder_with_a_model_file_is_accepted(self, tmp_path, marker):
        (tmp_path / marker).write_text("{}")
        assert resolve_model_path(str(tmp_path)) == tmp_path.resolve()

    def test_the_packaged_model_resolves_to_a_model_folder(self):
        path = resolve_model_path("all-MiniLM-L6-v2")
        assert (path / "modules.json").is_file()
