"""In a real headless Chromium: a staff user who may view jobs but not their payload reads no
marker on the job, dead-letter and workflow pages of encrypted jobs a real cluster ran; given
``view_job_payload``, the same pages show it and the job's history names who saw it.

Needs Debian's ``chromium`` and Playwright (see test_operator_browser.py); skipped without them."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User

from django_taskmq import Workflow, async_task
from django_taskmq.admin.payload_access import VIEWED
from django_taskmq.encryption import generate_key
from django_taskmq.models import DeadLetter

from .conftest import job_states
from .test_operator_browser import ARGS, CHROMIUM, VIEWPORT, browser_or_skip

pytestmark = [pytest.mark.cluster, pytest.mark.browser, pytest.mark.sqlite_only]

MARKER = "marker-c0ffee42"
PASSWORD = "correct horse battery staple"


def test_only_a_user_with_view_job_payload_reads_the_payload(cluster, live_server, monkeypatch):
    sync_playwright = browser_or_skip()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    cluster.configure(encryption_keys=[generate_key()])
    done = async_task("tests.tasks.record_secret", MARKER, encrypt=True)
    dead = async_task("tests.tasks.fail_with", "refused", email=MARKER, encrypt=True, max_deliveries=1)
    flow = Workflow(name="billing")
    flow.add("tests.tasks.record_secret", MARKER, name="invoice", q_options={"encrypt": True})
    flow.enqueue()
    cluster.burst("-w", "2")
    assert job_states([done, dead, flow.job_ids["invoice"]]) == {"SUCCEEDED": 2, "DEAD": 1}
    letter = DeadLetter.objects.get(job_id=dead)
    urls = {"job": f"/admin/django_taskmq/job/{done}/change/",
            "dead job": f"/admin/django_taskmq/job/{dead}/change/",
            "dead letter": f"/admin/django_taskmq/deadletter/{letter.pk}/change/",
            "workflow": f"/admin/django_taskmq/workflow/{flow.id}/change/",
            "step": f"/admin/django_taskmq/job/{flow.job_ids['invoice']}/change/"}
    user = User.objects.create_user("auditor", password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="django_taskmq", codename__in=["view_job", "view_deadletter", "view_workflow"]))

    def read_pages(page) -> dict[str, str]:
        texts = {}
        for what, url in urls.items():
            page.goto(live_server.url + url)
            page.wait_for_selector("#content")
            texts[what] = page.inner_text("#content")
        return texts

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(30_000)
        try:
            page.goto(f"{live_server.url}/admin/login/?next=/admin/")
            page.fill("#id_username", "auditor")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#content")

            hidden = read_pages(page)
            for what, text in hidden.items():
                assert MARKER not in text, what
            assert "encrypted; not shown" in hidden["job"] and "an encrypted result, not shown" in hidden["job"]
            assert "encrypted; not shown" in hidden["dead letter"]
            assert not LogEntry.objects.filter(change_message=VIEWED).exists()

            user.user_permissions.add(Permission.objects.get(codename="view_job_payload"))
            shown = read_pages(page)
        finally:
            browser.close()

    for what in ("job", "dead job", "dead letter", "step"):
        assert MARKER in shown[what], what
    assert MARKER not in shown["workflow"]  # the graph and table show names and states, never arguments
    seen = LogEntry.objects.filter(user=user, change_message=VIEWED)
    assert sorted(seen.values_list("object_id", flat=True)) == sorted([done, dead, dead, flow.job_ids["invoice"]])
