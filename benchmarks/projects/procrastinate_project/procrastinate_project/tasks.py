"""``benchtasks.noop`` as a Procrastinate task (a plain function: run in a thread by the worker)."""

from procrastinate.contrib.django import app

import benchtasks


@app.task(name="benchtasks.noop")
def noop(tag=None):
    benchtasks.noop(tag)
