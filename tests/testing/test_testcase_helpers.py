"""django_taskmq.testing in a Django TestCase (jobs stored in the test's transaction) with the mixin."""

from __future__ import annotations

from django.test import TestCase, override_settings

from django_taskmq.models import DeadLetter, State
from django_taskmq.testing import TaskMQTestMixin
from tests.testing import tasks_project


@override_settings(ROOT_URLCONF="tests.testing.urls")
class SignupTests(TaskMQTestMixin, TestCase):
    def setUp(self):
        tasks_project.HOOKED.clear()

    def test_signup_enqueues_the_welcome_mail_and_an_order(self):
        with self.captureJobs() as jobs:
            self.client.get("/signup/", {"email": "ada@example.com", "order": 9})
        jobs.assert_enqueued(tasks_project.send_welcome, args=["ada@example.com"], queue="emails")
        self.assertEnqueued(tasks_project.charge, args=[9], count=1)
        self.assertNotEnqueued(tasks_project.broken)
        ran = self.drainJobs()
        self.assertEqual(sorted(j.func.rsplit(".", 1)[1] for j in ran), ["charge", "send_welcome", "ship"])
        self.assertEqual({j.state for j in self.enqueued()}, {State.SUCCEEDED})
        self.assertEqual(tasks_project.HOOKED, ["tests.testing.tasks_project.ship:SUCCEEDED"])

    def test_a_failure_ends_in_the_dead_letter_queue(self):
        self.client.get("/signup/", {"email": "eve@example.com", "broken": "1"})
        self.drainJobs(queue="default")
        (broken,) = self.enqueued(tasks_project.broken)
        self.assertEqual((broken.state, broken.job.deliveries), (State.DEAD, 3))
        self.assertTrue(DeadLetter.objects.filter(job_id=broken.id).exists())

    def test_each_test_starts_with_no_job(self):
        self.assertEqual(self.enqueued(), [])
