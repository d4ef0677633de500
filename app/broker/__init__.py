"""The broker side of dreads: Redis through Celery and kombu, a disposable transport.

    names.py     queue names, the task name, the broker's Redis keys (no Celery import)
    config.py    the Celery configuration both sides build from ``Settings``
    client.py    the send-only client that publishers use (``make_client``, ``make_sender``)
    publish.py   decision ids into chunk messages on a run's queue; ``RunPublisher``
    epoch.py     when the broker's data began, and the re-publishing of what it lost
    process.py   a run's publisher in a child process of its own (``dreads submit``)

Messages carry decision ids only; SQL is the source of truth. Nothing here imports
``workers/``: tasks are addressed by name.
"""
