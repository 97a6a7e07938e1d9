"""The status page in a real browser (Debian's chromium via Playwright): live refresh, job detail, diff."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from tests.e2e.service import Service

PHONE = {"width": 390, "height": 844}
LINE = "Hello from the browser test <b>not bold</b>"


def _job(page: Page, job_id: str, status: str) -> None:
    expect(page.locator(f'li[data-job="{job_id}"][data-status="{status}"]')).to_have_count(1, timeout=30_000)


def test_job_moves_from_queued_to_succeeded_live_and_shows_its_diff(
    service: Service, browser: Browser, tmp_path: Path
) -> None:
    """With no worker a new job shows queued; a worker starts; it turns succeeded without a reload."""
    shots = tmp_path / "screenshots"
    shots.mkdir()
    service.create_wiki("ui")
    stale = {"op": "overwrite", "path": "index.md", "content": "x", "expected_version": "0" * 40}
    ok_edit = {"op": "create", "path": "wiki/first.md", "content": "first\n"}
    failed = service.apply("ui", {"message": "stale one", "edits": [ok_edit, stale]})
    assert failed["error"]["code"] == "VERSION_MISMATCH"
    service.kill_worker(service.workers[0])

    page = browser.new_page(viewport=PHONE, device_scale_factor=2)
    page.goto(f"{service.url}/ui")
    expect(page.locator("tr[data-wiki=ui]")).to_have_count(1)
    failing = page.locator(f'li[data-job="{failed["job_id"]}"] .error')
    expect(failing).to_contain_text("VERSION_MISMATCH at edit 1 (overwrite index.md)")
    page.evaluate("window.__sameDocument = 'yes'")

    batch = {
        "message": "from the browser test",
        "edits": [{"op": "create", "path": "wiki/ui.md", "content": LINE}],
    }
    answer = service.submit("ui", batch)
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["job_id"]
    _job(page, job_id, "queued")
    expect(page.locator("tr[data-wiki=ui] .queued")).to_have_text("1 queued")
    page.screenshot(path=str(shots / "1-queued.png"))

    service.start_worker()
    _job(page, job_id, "succeeded")
    assert page.evaluate("window.__sameDocument") == "yes"  # refreshed in place, never reloaded
    commit = service.wait(job_id)["result"]["commit"]
    expect(page.locator(f'li[data-job="{job_id}"] .line2')).to_contain_text(commit[:10])
    expect(page.locator("tr[data-wiki=ui] td.mono")).to_have_text(commit[:10])
    page.screenshot(path=str(shots / "2-succeeded.png"), full_page=True)

    page.locator(f'a[href="/ui/jobs/{job_id}"]').click()
    page.wait_for_url(f"**/ui/jobs/{job_id}")
    expect(page.locator("#job-status")).to_have_text("succeeded")
    expect(page.locator("#job-meta")).to_contain_text(commit)
    expect(page.locator("#job-applied li")).to_contain_text("create wiki/ui.md")
    added = page.locator(".diff .add")
    expect(added).to_have_text("+" + LINE)  # escaped: the tag shows as text
    assert page.locator(".diff b").count() == 0
    expect(page.locator("#live")).to_have_text("final")
    page.screenshot(path=str(shots / "3-detail.png"), full_page=True)

    failed_page = browser.new_page(viewport=PHONE)
    failed_page.goto(f"{service.url}/ui/jobs/{failed['job_id']}")
    expect(failed_page.locator("#job-applied li.failing")).to_contain_text("overwrite index.md")
    expect(failed_page.locator("#job-diff")).to_contain_text("No commit")
    failed_page.screenshot(path=str(shots / "4-failed.png"), full_page=True)
    assert sorted(p.name for p in shots.iterdir()) == [
        "1-queued.png",
        "2-succeeded.png",
        "3-detail.png",
        "4-failed.png",
    ]
