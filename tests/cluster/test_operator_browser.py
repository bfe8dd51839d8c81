"""End to end in a real headless Chromium: an operator logs in to the admin of a live server,
opens the dead letters, replays one into another queue at another priority, and watches its job
page show that a running ``qcluster`` ran it to success.

Needs Debian's ``chromium`` (``scripts/test`` installs it) and Playwright for Python, driven with
``executable_path`` (no browser download). Without them the test is skipped, or fails when CI is
"true". It saves screenshots in ``$TASKMQ_SCREENSHOTS`` (the docs' come from a run with
``TASKMQ_SCREENSHOTS=docs/_static/operators``), else in the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from django_taskmq import async_task
from django_taskmq.models import DeadLetter, Job, State

pytestmark = [pytest.mark.cluster, pytest.mark.browser, pytest.mark.sqlite_only]

CHROMIUM = os.environ.get("TASKMQ_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-extensions",
        "--disable-dev-shm-usage", "--no-first-run", "--mute-audio"]
VIEWPORT = {"width": 1440, "height": 900}


def browser_or_skip():
    """Return Playwright's sync API, or skip (fail under CI) saying what is missing."""
    reason = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        reason = f"Playwright for Python is not installed ({exc}); pip install -e '.[test]'"
    if reason is None and not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        reason = f"no Chromium at {CHROMIUM}: apt-get install chromium (scripts/test does it)"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser test cannot run and CI is set: {reason}")
        pytest.skip(reason)
    return sync_playwright


@pytest.fixture
def screenshots(tmp_path) -> Path:
    path = Path(os.environ.get("TASKMQ_SCREENSHOTS") or tmp_path / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_operator_replays_a_dead_letter_in_the_browser(cluster, live_server, screenshots, monkeypatch):
    sync_playwright = browser_or_skip()
    # Playwright's sync API keeps an event loop in this thread; the ORM calls between its steps are
    # plain synchronous calls of this test.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from django.contrib.auth.models import User

    started = time.monotonic()
    User.objects.create_superuser("operator", password="correct horse battery staple")
    qc = cluster.start("-w", "2", "-n", "ops-demo", "-Q", "default,emails")  # not "reports": its jobs wait
    gate = cluster.gate("upstream")
    for i in range(3):  # a little history for the dashboard and the job list
        async_task("tests.tasks.add", i, i, queue="emails")
    for priority in (5, 0, 0):  # work waiting in a queue no cluster serves, and some for later
        async_task("tests.tasks.noop", queue="reports", priority=priority)
    async_task("tests.tasks.noop", queue="emails", delay=3600)
    dead = async_task("tests.tasks_operator.fails_until", gate, queue="default", priority=0, max_deliveries=1,
                      task_name="billing.send_invoice")
    cluster.wait_until(lambda: Job.objects.filter(pk=dead, state=State.DEAD).exists(), "the job to die", alive=[qc])
    cluster.wait_final(list(Job.objects.filter(queue="emails", visible_at__lt=time.time()).values_list("pk", flat=True)),
                       alive=[qc])
    letter = DeadLetter.objects.get(job_id=dead)
    cluster.open(gate)  # the fix is deployed: a replay will succeed

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        # The admin's navigation sidebar closed: the pages get the width (and the screenshots too).
        page.add_init_script("window.localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
        page.set_default_timeout(30_000)
        try:
            # Log in.
            page.goto(f"{live_server.url}/admin/login/?next=/admin/django_taskmq/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "correct horse battery staple")
            page.click("input[type=submit]")
            page.wait_for_selector("#django_taskmq-dashboard")  # the app list's row

            # The dashboard: the cluster is alive, a dead letter waits in "default".
            page.click("#django_taskmq-dashboard a")
            page.wait_for_selector("#taskmq-queues")
            assert "ops-demo" in page.inner_text("#taskmq-clusters")
            assert "5: 1" in page.inner_text("#taskmq-queues")  # "reports": ready by priority
            page.screenshot(path=str(screenshots / "dashboard.png"), full_page=True)

            # The dead letters.
            page.goto(f"{live_server.url}/admin/django_taskmq/deadletter/?replayed=no")
            page.wait_for_selector("#result_list")
            assert "billing.send_invoice" in page.inner_text("#result_list")
            page.screenshot(path=str(screenshots / "dead-letters.png"), full_page=True)

            # Replay it into "emails" at priority 7: the confirmation page first.
            page.check(f"input.action-select[value='{letter.pk}']")
            page.select_option("select[name=action]", "replay")
            page.click("button[name=index]")
            page.wait_for_selector("select[name=target_queue]")
            page.select_option("select[name=target_queue]", "emails")
            page.select_option("select[name=target_priority]", "7")
            page.screenshot(path=str(screenshots / "replay-confirmation.png"), full_page=True)
            page.click("input[type=submit][value^='Yes']")
            page.wait_for_selector("ul.messagelist")
            assert "1 job replayed." in page.inner_text("ul.messagelist")

            # Its job page: same id, the new queue and priority; it shows success once the cluster ran it.
            page.click(f"ul.messagelist a[href$='/job/{dead}/change/']")
            deadline = time.monotonic() + 120
            while "succeeded" not in page.inner_text(".field-state_display").lower():
                assert time.monotonic() < deadline, f"the job page never showed success:\n{cluster.outputs()}"
                page.wait_for_timeout(500)
                page.reload()
            assert "emails" in page.inner_text(".field-queue") and "7" in page.inner_text(".field-priority")
            assert "invoice sent" in page.inner_text(".field-return_value")
            page.screenshot(path=str(screenshots / "job-page.png"), full_page=True)

            # The job list, for the docs.
            page.goto(f"{live_server.url}/admin/django_taskmq/job/")
            page.wait_for_selector("#result_list")
            page.screenshot(path=str(screenshots / "jobs.png"), full_page=True)
        finally:
            browser.close()

    job = Job.objects.get(pk=dead)
    assert (job.state, job.queue, job.priority) == (State.SUCCEEDED, "emails", 7)
    assert DeadLetter.objects.get(pk=letter.pk).replay_count == 1
    print(f"browser end-to-end test: {time.monotonic() - started:.1f} s")


LONG_QUEUE = "invoices-for-customers-in-the-european-economic-area"
LONG_TASK = "billing.jobs.monthly.send_the_invoice_reminder_to_every_customer_whose_payment_is_overdue_now"
WIDTHS = (1280, 390)
#: The dead-letter list must also fit at the widths it overflowed in (REPLAYS off-screen).
LETTER_WIDTHS = (1400, 1920)


def long_rows(broker) -> dict[str, str]:
    """Rows with long task names, reasons, errors, queue and cluster names on every page of ours;
    return the URLs of their own pages."""
    from django.utils import timezone

    from django_taskmq import Workflow, schedule
    from django_taskmq.models import Cluster
    from django_taskmq.envelope import BAD_SIGNATURE

    ids = [async_task("tests.tasks.noop", queue=LONG_QUEUE, task_name=LONG_TASK) for _ in range(4)]
    dead, reserved = broker.reserve([LONG_QUEUE], 2, 600.0, "ops-demo-with-a-rather-long-cluster-label:web-1:42:ab")
    broker.dead_letter(dead, BAD_SIGNATURE, error="Traceback (most recent call last):\n" + "ValueError: " + "x" * 300)
    Cluster.objects.create(id="ops-demo-with-a-rather-long-cluster-label:web-1:42:ab", name="ops-demo-with-a-rather"
                           "-long-cluster-label", host="web-1.a-very-long-internal-domain.example.com", pid=42,
                           state="running", workers=2, queues=[LONG_QUEUE, "default", "emails"],
                           beat_at=timezone.now(), counts={"tasks": [[0, reserved.job_id, LONG_QUEUE, 3.0]]})
    schedule("tests.tasks.noop", name="a-schedule-with-a-long-name-" + "n" * 60, queue=LONG_QUEUE,
             schedule_type="I", minutes=5)
    workflow = Workflow(name="quarterly-report-for-every-region-" + "r" * 40)
    workflow.add("tests.tasks.noop", name="fetch-" + "f" * 60, after=[workflow.add("tests.tasks.noop", name="a")])
    workflow_id = workflow.enqueue()
    letter = DeadLetter.objects.get(job_id=dead.job_id)
    return {"job": f"/admin/django_taskmq/job/{ids[-1]}/change/", "letter": f"/admin/django_taskmq/deadletter/"
            f"{letter.pk}/change/", "workflow": f"/admin/django_taskmq/workflow/{workflow_id}/change/",
            "replay": f"/admin/django_taskmq/deadletter/{letter.pk}/replay/"}


def overflow(page) -> dict[str, int | str]:
    """How far the document and the result table reach beyond the window and their container, and
    the element reaching furthest right beyond the window (to say what to fix)."""
    return page.evaluate("""() => {
        const table = document.querySelector('#result_list');
        let widest = '';
        let most = window.innerWidth;
        for (const el of document.querySelectorAll('body *')) {
            const right = el.getBoundingClientRect().right;
            if (right > window.innerWidth + 1 && right >= most) {
                most = right;
                widest = `${el.tagName}.${el.className}: ${el.textContent.slice(0, 80)}`;
            }
        }
        return {document: document.documentElement.scrollWidth - window.innerWidth,
                table: table ? table.scrollWidth - table.parentElement.clientWidth : 0, widest: widest};
    }""")


def test_every_admin_page_of_ours_fits_the_window(broker, live_server, screenshots, monkeypatch, taskmq_settings):
    """At 1280 and 390 px, light and dark, with long task names, reasons and queue names: no page
    is wider than the window, and at 1280 px (and the 1400 and 1920 px of the report) no list is
    wider than its column. A dead letter is replayed from its own page."""
    sync_playwright = browser_or_skip()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from django.conf import settings
    from django.contrib.auth.models import User

    taskmq_settings(queues={**settings.TASKMQ["queues"], LONG_QUEUE: {"weight": 1}})
    User.objects.create_superuser("operator", password="correct horse battery staple")
    own = long_rows(broker)
    lists = ["/admin/django_taskmq/dashboard/", "/admin/", "/admin/django_taskmq/",
             *(f"/admin/django_taskmq/{m}/" for m in ("job", "deadletter", "schedule", "cluster", "queuepause",
                                                      "workflow")),
             "/admin/django_taskmq/deadletter/replay-all/", f"/admin/django_taskmq/deadletter/replay-all/?queue="
             f"{LONG_QUEUE}", "/admin/django_taskmq/job/?execution=reserved"]
    pages = [*lists, own["job"], own["letter"], own["workflow"], own["replay"]]
    wide: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for scheme in ("light", "dark"):
                for width in (*WIDTHS, *LETTER_WIDTHS):
                    page = browser.new_page(viewport={"width": width, "height": 900}, color_scheme=scheme)
                    page.set_default_timeout(30_000)
                    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
                    page.fill("#id_username", "operator")
                    page.fill("#id_password", "correct horse battery staple")
                    page.click("input[type=submit]")
                    page.wait_for_selector("#content")
                    for url in pages if width in WIDTHS else ["/admin/django_taskmq/deadletter/"]:
                        page.goto(f"{live_server.url}{url}")
                        page.wait_for_selector("#content")
                        reach = overflow(page)
                        if int(reach["document"]) > 0 or (width >= 1280 and int(reach["table"]) > 0):
                            wide.append(f"{url} at {width} px, {scheme}: {reach}")
                    if scheme == "light" or width == 1280:
                        page.goto(f"{live_server.url}/admin/django_taskmq/deadletter/")
                        page.screenshot(path=str(screenshots / f"dead-letters-{width}-{scheme}.png"), full_page=True)
                    page.close()

            # A dead letter replayed from its own page, into another queue.
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{live_server.url}/admin/login/?next={own['letter']}")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "correct horse battery staple")
            page.click("input[type=submit]")
            page.click("#taskmq-replay")
            page.select_option("select[name=target_queue]", "emails")
            page.click("input[type=submit][value^='Yes']")
            page.wait_for_selector("ul.messagelist")
            assert "1 job replayed." in page.inner_text("ul.messagelist")
            assert page.url.endswith(own["letter"])
        finally:
            browser.close()
    assert wide == [], "\n".join(wide)
    letter = DeadLetter.objects.get(pk=int(own["letter"].split("/")[-3]))
    assert (letter.job.state, letter.job.queue, letter.replay_count) == (State.QUEUED, "emails", 1)
