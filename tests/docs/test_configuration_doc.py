"""docs/configuration.md is what ``python -m worker.settings_doc`` writes from the settings model."""

from __future__ import annotations

import pytest

from worker import settings_doc
from worker.settings import Settings


def test_the_page_is_what_the_generator_writes() -> None:
    """Regenerate with ``python -m worker.settings_doc`` after changing worker/settings.py."""
    written = settings_doc.PAGE.read_text(encoding="utf-8")
    assert written == settings_doc.render(), (
        "docs/configuration.md is stale: run python -m worker.settings_doc"
    )


def test_every_setting_is_on_the_page_once() -> None:
    """Each field of the model appears as exactly one table row, under its environment variable."""
    page = settings_doc.render()
    for name in Settings.model_fields:
        assert page.count(f"| `WIKIQ_{name.upper()}` |") == 1, name


def test_a_setting_without_a_description_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new setting left out of GROUPS is named, not silently missing from the page."""
    groups = tuple(
        (title, {k: v for k, v in group.items() if k != "log_level"}) for title, group in settings_doc.GROUPS
    )
    monkeypatch.setattr(settings_doc, "GROUPS", groups)
    with pytest.raises(settings_doc.SettingsDocError, match="describe WIKIQ_LOG_LEVEL"):
        settings_doc.render()


def test_a_description_of_no_setting_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A setting removed from the model but still described is named too."""
    groups = (*settings_doc.GROUPS, ("Gone", {"no_such_setting": "was removed"}))
    monkeypatch.setattr(settings_doc, "GROUPS", groups)
    with pytest.raises(settings_doc.SettingsDocError, match="drop WIKIQ_NO_SUCH_SETTING"):
        settings_doc.render()


def test_check_mode_fails_on_a_stale_page(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--check`` exits 1 when the page differs, 0 once it is rewritten."""
    page = tmp_path / "configuration.md"
    page.write_text("stale\n", encoding="utf-8")
    monkeypatch.setattr(settings_doc, "PAGE", page)
    assert settings_doc.main(["--check"]) == 1
    assert settings_doc.main([]) == 0
    assert settings_doc.main(["--check"]) == 0
